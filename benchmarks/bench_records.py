"""Throughput of producer-batch validation against the bare CRC-32C it cannot avoid.

    .venv/bin/python -m benchmarks.bench_records

For 1 KiB and 64 KiB batches (built by kafka-python, uncompressed, random values) it times
`parse_produce_payload` (framing, header decode, every client check, CRC-32C over the batch), the
same with record-level rules (every record walked), and
`parse_batch` (framing and header decode only) next to `crc32c.crc32c` over the same bytes: the
floor any validation must pay. Each figure is the best of several repeats over a pool of distinct
batches (16 MiB, so that the data does not sit in a small cache); ratio = rate / crc32c rate.

Then, for each codec, batches of 64 KiB of uncompressed text-like records (values of ~100 and
~1000 bytes) compressed by kafka-python: `parse_produce_payload` with record-level rules (framing,
CRC-32C, bounded decompression and the walk over every record) against the codec call alone on
the same bytes, the two timed alternately in the same run; share = validation rate / raw
decompression rate, against the target of 70% (issue "Hostile input and races").
"""

from __future__ import annotations

import argparse
import functools
import random
import time
import warnings
from collections.abc import Callable, Sequence
from typing import Final

import crc32c

from diskless.records import BatchHeader, RecordRules, parse_batch, parse_produce_payload
from testkit.batches import batch_builder, json_text

with warnings.catch_warnings():
    warnings.simplefilter("ignore", DeprecationWarning)
    from kafka.record.default_records import DefaultRecordBatchBuilder

POOL_BYTES: Final = 16 * 1024 * 1024
BATCH_SIZES: Final = (1024, 64 * 1024)
RECORD_VALUE_BYTES: Final = {1024: 100, 64 * 1024: 1000}
MAX_MESSAGE_BYTES: Final = 1048588
REPEATS_DEFAULT: Final = 5
TARGET_SHARE: Final = 0.70
"""Validation of a compressed batch must run at this share of raw decompression, at least."""
SEED_DEFAULT: Final = 20240601


def build_batch(target_bytes: int, value_bytes: int, rng: random.Random, sequence: int) -> bytes:
    """An idempotent producer's batch of about `target_bytes` (never more)."""
    builder = batch_builder(
        producer_id=1000, producer_epoch=0, base_sequence=sequence, batch_size=target_bytes
    )
    offset = 0
    timestamp = 1_700_000_000_000
    while True:
        free = target_bytes - builder.size()
        overhead = DefaultRecordBatchBuilder.size_in_bytes(offset, offset, b"key", b"", [])
        value = min(value_bytes, free - overhead - 2)  # 2: the value length may take more bytes
        if value < 1 and offset > 0:
            break
        record = builder.append(offset, timestamp + offset, b"key", rng.randbytes(value), [])
        assert record is not None
        offset += 1
    data = bytes(builder.build())
    assert len(data) <= target_bytes or offset == 1
    return data


def pool_of(batch_bytes: int, rng: random.Random) -> list[bytes]:
    pool = []
    total = 0
    sequence = 0
    while total < POOL_BYTES:
        batch = build_batch(batch_bytes, RECORD_VALUE_BYTES[batch_bytes], rng, sequence)
        pool.append(batch)
        total += len(batch)
        sequence += 1
    return pool


def best_seconds(
    run: Callable[[Sequence[bytes]], None], pool: Sequence[bytes], repeats: int
) -> float:
    best = float("inf")
    for _ in range(repeats):
        start = time.perf_counter()
        run(pool)
        best = min(best, time.perf_counter() - start)
    return best


def run_crc(pool: Sequence[bytes]) -> None:
    checksum = crc32c.crc32c
    for data in pool:
        checksum(data)


def run_validate(pool: Sequence[bytes]) -> None:
    validate = parse_produce_payload
    for data in pool:
        validate(data, MAX_MESSAGE_BYTES)


def run_validate_records(pool: Sequence[bytes]) -> None:
    validate = parse_produce_payload
    rules = RecordRules(NOW_MS)
    for data in pool:
        validate(data, MAX_MESSAGE_BYTES, rules)


def run_frame(pool: Sequence[bytes]) -> None:
    frame = parse_batch
    for data in pool:
        frame(data)


COMPRESSED_POOL_BYTES: Final = 4 * 1024 * 1024
"""Uncompressed bytes per compressed pool."""
NOW_MS: Final = 1_700_000_000_000


def build_compressed(codec: int, value_bytes: int, rng: random.Random) -> bytes:
    builder = batch_builder(compression=codec)
    offset = 0
    while builder.size() < 64 * 1024 - value_bytes - 64:
        value = json_text(rng, value_bytes)
        assert builder.append(offset, NOW_MS - 1000 + offset, b"key-%d" % offset, value, [])
        offset += 1
    return bytes(builder.build())


def raw_decompressor(codec: int) -> Callable[[bytes], object]:
    """The codec call alone, as a consumer or a broker that trusts the batch would make it."""
    import zlib

    import lz4.frame
    import zstandard
    from kafka.codec import snappy_decode

    zstd = zstandard.ZstdDecompressor()
    calls: dict[int, Callable[[bytes], object]] = {
        1: lambda body: zlib.decompress(body, wbits=31),
        2: snappy_decode,  # xerial framing, as Java clients write it
        3: lz4.frame.decompress,
        4: lambda body: zstd.decompress(body, max_output_size=1 << 20),
    }
    return calls[codec]


def best_pair(
    first: Callable[[], None], second: Callable[[], None], repeats: int
) -> tuple[float, float]:
    """Best seconds of each of two runs, timed alternately so that both see the same load."""
    best_first = best_second = float("inf")
    for _ in range(repeats):
        start = time.perf_counter()
        first()
        middle = time.perf_counter()
        second()
        best_first = min(best_first, middle - start)
        best_second = min(best_second, time.perf_counter() - middle)
    return best_first, best_second


def run_raw(decompress: Callable[[bytes], object], bodies: Sequence[bytes]) -> None:
    for body in bodies:
        decompress(body)


def run_valid(pool: Sequence[bytes], rules: RecordRules) -> None:
    validate = parse_produce_payload
    for data in pool:
        validate(data, MAX_MESSAGE_BYTES, rules)


def compressed_section(rng: random.Random, repeats: int) -> None:
    rules = RecordRules(NOW_MS)
    header = (
        f"{'codec':>7} {'value':>6} {'compr.':>8} {'raw MB/s':>10} {'valid MB/s':>11} "
        f"{'share':>7} {'target':>7}"
    )
    print()
    print("compressed 64 KiB batches (MB/s of uncompressed records)")
    print(header)
    print("-" * len(header))
    for codec, name in ((1, "gzip"), (2, "snappy"), (3, "lz4"), (4, "zstd")):
        decompress = raw_decompressor(codec)
        for value_bytes in (100, 1000):
            pool = []
            total = 0
            while total < COMPRESSED_POOL_BYTES:
                batch = build_compressed(codec, value_bytes, rng)
                pool.append(batch)
                total += len(decompress(batch[61:]))  # type: ignore[arg-type]
            for data in pool:
                assert isinstance(
                    parse_produce_payload(data, MAX_MESSAGE_BYTES, rules), BatchHeader
                )
            bodies = [data[61:] for data in pool]

            raw, valid = best_pair(
                functools.partial(run_raw, decompress, bodies),
                functools.partial(run_valid, pool, rules),
                repeats,
            )
            compressed = sum(len(b) for b in bodies)
            share = raw / valid
            verdict = "ok" if share >= TARGET_SHARE else "MISSED"
            print(
                f"{name:>7} {value_bytes:>6} {total / compressed:>7.1f}x "
                f"{total / raw / 1e6:>10.1f} {total / valid / 1e6:>11.1f} {share:>7.0%} "
                f"{TARGET_SHARE:>6.0%} {verdict}"
            )


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=REPEATS_DEFAULT)
    parser.add_argument("--seed", type=int, default=SEED_DEFAULT)
    args = parser.parse_args(argv)
    print(f"seed {args.seed}, best of {args.repeats}, crc32c hardware: {crc32c.hardware_based}")

    rng = random.Random(args.seed)
    header = f"{'batch':>10} {'operation':<22} {'MB/s':>10} {'batches/s':>12} {'vs crc32c':>10}"
    print(header)
    print("-" * len(header))
    for batch_bytes in BATCH_SIZES:
        pool = pool_of(batch_bytes, rng)
        for data in pool:  # every batch must be one the broker accepts, or we time the wrong path
            assert isinstance(parse_produce_payload(data, MAX_MESSAGE_BYTES), BatchHeader)
        total = sum(len(data) for data in pool)
        mean = total / len(pool)
        baseline = best_seconds(run_crc, pool, args.repeats)
        for name, run in (
            ("crc32c.crc32c", run_crc),
            ("parse_produce_payload", run_validate),
            ("+ every record", run_validate_records),
            ("parse_batch (no CRC)", run_frame),
        ):
            seconds = baseline if run is run_crc else best_seconds(run, pool, args.repeats)
            print(
                f"{mean:>8.0f} B {name:<22} {total / seconds / 1e6:>10.1f} "
                f"{len(pool) / seconds:>12,.0f} {baseline / seconds:>9.2f}x"
            )
    compressed_section(rng, args.repeats)


if __name__ == "__main__":
    main()
