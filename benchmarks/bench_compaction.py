"""The cleaner's filter against a raw copy of the same bytes, and what cleaning leaves.

    .venv/bin/python -m benchmarks.bench_compaction [--mb 16] [--codec lz4]

A partition of keyed updates, 10% of them distinct keys (values of ~100 bytes of text-like
JSON, batches of ~16 KiB from an idempotent producer, built by kafka-python in one codec), is
cleaned in memory: `build_offset_map` over the whole dirty range, then `clean` over the log, in
as many passes as the map needs. Against it, on the same batches: a raw copy (each batch copied
once, as reading it and writing it elsewhere would, without looking inside), and the codec's own
decompress + compress of each batch (the floor of any rewrite of compressed batches). Each
figure is the best of several repeats, the runs timed alternately; MB/s counts input bytes.

It then prints bytes, batches and records before and after, and the peak of memory the pass
allocated (tracemalloc) next to the map's configured size: the pass holds the map and one
batch at a time.

This measures the pure filter only; the cleaner's GET + PUT and its coordinator swap are timed
when the cleaner runs against object storage.
"""

from __future__ import annotations

import argparse
import random
import time
import tracemalloc
from collections.abc import Callable, Sequence
from typing import Final

from diskless.compaction import (
    CleanStats,
    OffsetMap,
    build_offset_map,
    clean,
    last_records_of,
)
from diskless.records import COMPRESSORS, DECOMPRESSED_BYTES_MAX, DECOMPRESSORS, parse_batch
from testkit.batches import batch_builder
from testkit.compaction import headers_of

CODECS: Final = {"none": 0, "gzip": 1, "snappy": 2, "lz4": 3, "zstd": 4}
BATCH_BYTES: Final = 16 * 1024
VALUE_BYTES: Final = 100
DISTINCT_SHARE: Final = 0.10
MAP_BYTES_DEFAULT: Final = 4 * 1024 * 1024
NOW_MS: Final = 1_700_000_000_000
RETENTION_MS: Final = 86_400_000
REPEATS_DEFAULT: Final = 3
SEED_DEFAULT: Final = 20261128
_WORDS: Final = (b"order", b"user", b"amount", b"EUR", b"status", b"shipped", b"pending", b"item")


def _text(rng: random.Random, size: int) -> bytes:
    out = bytearray(b'{"event": ')
    while len(out) < size:
        out += b'"%s": %d, ' % (rng.choice(_WORDS), rng.randrange(100_000))
    return bytes(out[:size])


def partition(megabytes: float, codec: int, rng: random.Random) -> list[bytes]:
    """Batches of about `megabytes` of uncompressed records, offsets assigned in order."""
    records_total = int(megabytes * 1e6 / (VALUE_BYTES + 30))
    keys = max(1, int(records_total * DISTINCT_SHARE))
    batches = []
    offset = 0
    sequence = 0
    while offset < records_total:
        builder = batch_builder(
            compression=codec, producer_id=1000, producer_epoch=0, base_sequence=sequence
        )
        delta = 0
        while builder.size() < BATCH_BYTES - VALUE_BYTES - 64 and offset + delta < records_total:
            key = b"key-%d" % rng.randrange(keys)
            value = None if rng.random() < 0.01 else _text(rng, VALUE_BYTES)
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


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mb", type=float, default=16.0, help="uncompressed MB of records")
    parser.add_argument("--codec", choices=sorted(CODECS), default="lz4")
    parser.add_argument("--map-bytes", type=int, default=MAP_BYTES_DEFAULT)
    parser.add_argument("--repeats", type=int, default=REPEATS_DEFAULT)
    parser.add_argument("--seed", type=int, default=SEED_DEFAULT)
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


if __name__ == "__main__":
    main()
