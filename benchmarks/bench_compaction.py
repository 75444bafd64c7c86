"""The cleaner against a raw copy of the same bytes, and what cleaning leaves.

    .venv/bin/python -m benchmarks.bench_compaction [--mb 16] [--codec lz4] [--store s3|local|none]

A partition of keyed updates, 10% of them distinct keys (values of ~100 bytes of text-like
JSON, batches of ~16 KiB, built by kafka-python in one codec).

First in memory: `build_offset_map` over the whole dirty range, then `clean` over the log, in
as many passes as the map needs, against a raw copy of each batch (reading it and writing it
elsewhere without looking inside) and the codec's own decompress + compress of each batch (the
floor of any rewrite of compressed batches); with the peak of memory the passes allocated
(tracemalloc) next to the map's configured size. Each figure is the best of several repeats,
the runs timed alternately; MB/s counts input bytes.

Then against object storage (`--store`: moto's S3 server in a process of its own, or local
files), the batches produced through a broker into a SQLite coordinator: the lifecycle's
`Cleaner` over every pass until nothing is due (reading the rows, cleaning, uploading the
object, swapping it in), against a raw GET of the same rows' byte ranges and a PUT of those
bytes as one object, each the best of `--repeats` fresh copies of the partition; the object
bytes and the coordinator's metadata (rows, SQLite pages in use) before and after; and the
peak of what the cleaner allocated (a fresh copy of the partition, cleaned under tracemalloc)
next to its bound: the map, its object cache and the object it uploads.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import random
import socket
import subprocess
import sys
import tempfile
import time
import tracemalloc
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Final, NamedTuple

from diskless import BrokerConfig, DisklessBroker, ErrorCode, TopicPartition
from diskless.compaction import (
    CleanStats,
    OffsetMap,
    build_offset_map,
    clean,
    last_records_of,
)
from diskless.coordinator import (
    BatchCoordinator,
    BatchInfo,
    MetadataStats,
    SqliteBatchCoordinator,
    TopicConfig,
)
from diskless.lifecycle import Cleaner, CleanerConfig
from diskless.read import Span, coalesce
from diskless.records import COMPRESSORS, DECOMPRESSED_BYTES_MAX, DECOMPRESSORS, parse_batch
from diskless.storage import LocalObjectStore, ObjectStore
from testkit.batches import batch_builder, json_text
from testkit.compaction import headers_of
from testkit.ports import free_port
from testkit.s3server import create_bucket, s3_store

CODECS: Final = {"none": 0, "gzip": 1, "snappy": 2, "lz4": 3, "zstd": 4}
BATCH_BYTES: Final = 16 * 1024
VALUE_BYTES: Final = 100
DISTINCT_SHARE: Final = 0.10
MAP_BYTES_DEFAULT: Final = 4 * 1024 * 1024
NOW_MS: Final = 1_700_000_000_000
RETENTION_MS: Final = 86_400_000
REPEATS_DEFAULT: Final = 3
SEED_DEFAULT: Final = 20261128
TP: Final = TopicPartition("table", 0)
INFLIGHT: Final = 32


def partition(
    megabytes: float, codec: int, rng: random.Random, producer_id: int = 1000
) -> list[bytes]:
    """Batches of about `megabytes` of uncompressed records, offsets assigned in order, from an
    idempotent producer (`producer_id` -1: none)."""
    records_total = int(megabytes * 1e6 / (VALUE_BYTES + 30))
    keys = max(1, int(records_total * DISTINCT_SHARE))
    batches = []
    offset = 0
    sequence = 0
    while offset < records_total:
        idempotent = producer_id >= 0
        builder = batch_builder(
            compression=codec,
            producer_id=producer_id,
            producer_epoch=0 if idempotent else -1,
            base_sequence=sequence if idempotent else -1,
        )
        delta = 0
        while builder.size() < BATCH_BYTES - VALUE_BYTES - 64 and offset + delta < records_total:
            key = b"key-%d" % rng.randrange(keys)
            value = None if rng.random() < 0.01 else json_text(rng, VALUE_BYTES)
            assert builder.append(delta, NOW_MS - 60_000 + offset + delta, key, value, [])
            delta += 1
        data = bytearray(builder.build())
        data[0:8] = offset.to_bytes(8, "big")  # the base offset lies outside the CRC
        batches.append(bytes(data))
        offset += delta
        sequence += delta
    return batches


def run_clean(batches: Sequence[bytes], map_bytes: int) -> tuple[list[bytes], int, CleanStats]:
    """Every pass over the whole partition: (cleaned batches, passes, the last pass's stats)."""
    log = list(batches)
    end = parse_batch(log[-1]).last_offset + 1  # type: ignore[union-attr]
    last = last_records_of(headers_of(log))
    offset_map = OffsetMap(map_bytes)
    start = 0
    passes = 0
    stats = CleanStats()
    while True:
        outcome = build_offset_map(log, start=start, end=end, offset_map=offset_map, aborted=())
        assert outcome.mapped_end > start
        stats = CleanStats()
        head = [b for b in log if int.from_bytes(b[:8], "big") < outcome.mapped_end]
        cleaned = list(
            clean(
                head,
                offset_map=offset_map,
                now_ms=NOW_MS,
                delete_retention_ms=RETENTION_MS,
                aborted=(),
                last_records=last,
                upper_bound=end,
                stats=stats,
            )
        )
        log = cleaned + log[len(head) :]
        passes += 1
        start = outcome.mapped_end
        if not outcome.full:
            return log, passes, stats


def run_copy(batches: Sequence[bytes]) -> None:
    for data in batches:
        bytearray(data)


def run_codec(batches: Sequence[bytes], codec: int) -> None:
    if not codec:
        run_copy(batches)
        return
    decompress, compress = DECOMPRESSORS[codec], COMPRESSORS[codec]
    for data in batches:
        records = decompress(memoryview(data)[61:], DECOMPRESSED_BYTES_MAX)
        assert isinstance(records, bytes)
        compress(records, 0 if codec == 2 else {1: -1, 3: 9, 4: 3}[codec])


def best_of(runs: Sequence[Callable[[], object]], repeats: int) -> list[float]:
    """Best seconds of each run, the runs timed alternately so that all see the same load."""
    best = [float("inf")] * len(runs)
    for _ in range(repeats):
        for index, run in enumerate(runs):
            start = time.perf_counter()
            run()
            best[index] = min(best[index], time.perf_counter() - start)
    return best


# --- against object storage ----------------------------------------------------------------------
class StoreRun(NamedTuple):
    raw_s: float
    clean_s: float
    input_bytes: int
    object_bytes: int
    passes: int
    before: MetadataStats
    after: MetadataStats
    peak: int
    """Bytes the traced pass allocated at its peak (tracemalloc)."""
    output_bytes: int


@contextlib.contextmanager
def moto_process() -> Iterator[str]:
    """moto's S3 server in a process of its own (not a thread of this one: its CPU would be
    the cleaner's), its endpoint."""
    port = free_port()
    server = subprocess.Popen(
        [str(Path(sys.executable).with_name("moto_server")), "-H", "127.0.0.1", "-p", str(port)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                break
            except OSError:
                if time.monotonic() > deadline or server.poll() is not None:
                    raise
                time.sleep(0.1)
        yield f"http://127.0.0.1:{port}"
    finally:
        server.terminate()
        server.wait()


async def load(store: ObjectStore, coordinator: BatchCoordinator, batches: Sequence[bytes]) -> None:
    """The batches produced to a compacted topic's partition through a broker."""
    config = TopicConfig(inapplicable_configs=(("cleanup.policy", "compact"),))
    async with DisklessBroker(1, store, coordinator, BrokerConfig()) as broker:
        assert await broker.create_topic(TP.topic, 1, config) == ErrorCode.NONE
        for start in range(0, len(batches), INFLIGHT):
            produced = await asyncio.gather(
                *(broker.produce({TP: batch}) for batch in batches[start : start + INFLIGHT])
            )
            assert all(result[TP].error == ErrorCode.NONE for result in produced), produced


async def raw_get_put(store: ObjectStore, rows: Sequence[BatchInfo]) -> tuple[float, int]:
    """(seconds, bytes) of GETting the rows' byte ranges (coalesced per object, as the read path
    does) and PUTting one object of those bytes."""
    started = time.perf_counter()
    spans = coalesce(Span(b.object_key, b.byte_offset, b.byte_offset + b.size) for b in rows)
    chunks = await asyncio.gather(*(store.get_range(*span) for span in spans))
    data = b"".join(chunks)
    await store.put("baseline/copy", data)
    elapsed = time.perf_counter() - started
    await store.delete_many(["baseline/copy"])
    return elapsed, len(data)


async def clean_all(cleaner: Cleaner) -> tuple[float, int]:
    """(seconds, passes) of cleaning until nothing is due."""
    started = time.perf_counter()
    passes = 0
    while (run := await cleaner.run_once()).cleaned:
        assert run.failures == 0, run
        passes += 1
    return time.perf_counter() - started, passes


async def against_store(
    batches: Sequence[bytes], map_bytes: int, directory: Path, endpoint: str | None, repeats: int
) -> StoreRun:
    """The cleaner over the batches, produced and stored, against a raw GET + PUT of the same
    rows, each the best of `repeats` fresh copies; then one more copy cleaned with the
    cleaner's allocations traced."""
    store: ObjectStore = (
        LocalObjectStore(directory / "objects")
        if endpoint is None
        else s3_store(endpoint, await create_bucket(endpoint))
    )
    config = CleanerConfig(age_ms=0, map_bytes=map_bytes)
    raw_s = clean_s = float("inf")
    try:
        for repeat in range(repeats):
            timed = SqliteBatchCoordinator(directory / f"timed-{repeat}.db")
            await load(store, timed, batches)
            before = await timed.metadata_stats()
            cleaning = await timed.cleaning_range(TP, 1 << 40)
            assert cleaning is not None
            seconds, input_bytes = await raw_get_put(store, cleaning.batches)
            raw_s = min(raw_s, seconds)
            seconds, passes = await clean_all(Cleaner(store, timed, config))
            clean_s = min(clean_s, seconds)
            after = await timed.metadata_stats()
            cleaned = await timed.cleaning_range(TP, 1 << 40)
            assert cleaned is not None and cleaned.batches[0].object_size is not None
            object_bytes = cleaned.batches[0].object_size
            await timed.close()

        traced = SqliteBatchCoordinator(directory / "traced.db")
        await load(store, traced, batches)
        cleaner = Cleaner(store, traced, config)
        tracemalloc.start()
        baseline = tracemalloc.get_traced_memory()[0]
        await clean_all(cleaner)
        peak = tracemalloc.get_traced_memory()[1] - baseline
        tracemalloc.stop()
        await traced.close()
    finally:
        await store.close()
    return StoreRun(
        raw_s, clean_s, input_bytes, object_bytes, passes, before, after, peak, object_bytes
    )


def report_store(run: StoreRun, map_bytes: int, where: str) -> None:
    mb = run.input_bytes / 1e6
    print(f"against {where}: {run.input_bytes:,} B of rows, {run.passes} pass(es), best of each")
    header = f"{'run':<26} {'MB/s':>8} {'vs raw':>8}"
    print(header)
    print("-" * len(header))
    for name, seconds in (
        ("cleaner (all its passes)", run.clean_s),
        ("raw GET + PUT", run.raw_s),
    ):
        print(f"{name:<26} {mb / seconds:>8.1f} {run.raw_s / seconds:>8.1%}")
    print()
    b, a = run.before, run.after
    print(f"object bytes        {run.input_bytes:,} -> {run.object_bytes:,}")
    print(
        f"metadata rows       {b.batch_rows:,} batch + {b.extent_rows:,} extent -> "
        f"{a.batch_rows:,} batch + {a.extent_rows:,} extent"
    )
    print(f"metadata bytes      {b.stored_bytes} -> {a.stored_bytes} (SQLite pages in use)")
    config = CleanerConfig()
    bound = map_bytes + config.cache_bytes_max + run.output_bytes
    print(
        f"memory peak         {run.peak:,} B allocated by the cleaner; bound: map {map_bytes:,}"
        f" + cache {config.cache_bytes_max:,} + its object {run.output_bytes:,} = {bound:,} B"
        f" ({'within' if run.peak <= bound else 'OVER'})"
    )


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mb", type=float, default=16.0, help="uncompressed MB of records")
    parser.add_argument("--codec", choices=sorted(CODECS), default="lz4")
    parser.add_argument("--map-bytes", type=int, default=MAP_BYTES_DEFAULT)
    parser.add_argument("--repeats", type=int, default=REPEATS_DEFAULT)
    parser.add_argument("--seed", type=int, default=SEED_DEFAULT)
    parser.add_argument(
        "--store", choices=["s3", "local", "none"], default="s3", help="moto's S3 server, files"
    )
    args = parser.parse_args(argv)
    codec = CODECS[args.codec]
    print(f"seed {args.seed}, best of {args.repeats}, codec {args.codec}, map {args.map_bytes} B")
    batches = partition(args.mb, codec, random.Random(args.seed))
    before = sum(len(b) for b in batches)
    records_before = sum(h.records_count for h in headers_of(batches))

    outcome: list[tuple[list[bytes], int, CleanStats]] = []
    seconds = best_of(
        [
            lambda: outcome.append(run_clean(batches, args.map_bytes)),
            lambda: run_copy(batches),
            lambda: run_codec(batches, codec),
        ],
        args.repeats,
    )
    cleaned, passes, _stats = outcome[-1]
    after = sum(len(b) for b in cleaned)
    records_after = sum(h.records_count for h in headers_of(cleaned))

    tracemalloc.start()
    baseline = tracemalloc.get_traced_memory()[0]
    run_clean(batches, args.map_bytes)
    peak = tracemalloc.get_traced_memory()[1] - baseline
    tracemalloc.stop()
    kept = sum(len(b) for b in cleaned)  # the output list is part of the peak: not the pass's

    header = f"{'run':<26} {'MB/s':>8} {'vs copy':>8}"
    print(header)
    print("-" * len(header))
    clean_s, copy_s, codec_s = seconds
    for name, value in (
        ("clean (map + filter)", clean_s),
        ("raw copy", copy_s),
        (f"{args.codec} decompress+compress", codec_s),
    ):
        print(f"{name:<26} {before / value / 1e6:>8.1f} {copy_s / value:>8.2%}")
    print()
    print(f"passes              {passes}")
    print(f"bytes               {before:,} -> {after:,} ({after / before:.1%})")
    print(f"batches             {len(batches):,} -> {len(cleaned):,}")
    print(f"records             {records_before:,} -> {records_after:,}")
    print(
        f"memory peak         {peak:,} B allocated by the passes, of which {kept:,} B are the "
        f"cleaned log they return; map configured at {args.map_bytes:,} B"
    )
    print(f"beyond map + output {peak - kept - args.map_bytes:,} B")
    if args.store == "none":
        return
    print()
    produced = partition(args.mb, codec, random.Random(args.seed), producer_id=-1)
    stored = [bytes(8) + batch[8:] for batch in produced]  # as a client sends them: base offset 0
    with tempfile.TemporaryDirectory() as directory, contextlib.ExitStack() as stack:
        endpoint = stack.enter_context(moto_process()) if args.store == "s3" else None
        run = asyncio.run(
            against_store(stored, args.map_bytes, Path(directory), endpoint, args.repeats)
        )
    report_store(run, args.map_bytes, "moto's S3 server" if endpoint else "local files")


if __name__ == "__main__":
    main()
