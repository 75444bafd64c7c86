"""Throughput of producer-batch validation against the bare CRC-32C it cannot avoid.

    .venv/bin/python -m benchmarks.bench_records

For 1 KiB and 64 KiB batches (built by kafka-python, uncompressed, random values) it times
`parse_produce_payload` (framing, header decode, every client check, CRC-32C over the batch) and
`parse_batch` (framing and header decode only) next to `crc32c.crc32c` over the same bytes: the
floor any validation must pay. Each figure is the best of several repeats over a pool of distinct
batches (16 MiB, so that the data does not sit in a small cache); ratio = rate / crc32c rate.
"""

from __future__ import annotations

import argparse
import random
import time
import warnings
from collections.abc import Callable, Sequence
from typing import Final

import crc32c

from diskless.records import BatchHeader, parse_batch, parse_produce_payload

with warnings.catch_warnings():
    warnings.simplefilter("ignore", DeprecationWarning)
    from kafka.record.default_records import DefaultRecordBatchBuilder

POOL_BYTES: Final = 16 * 1024 * 1024
BATCH_SIZES: Final = (1024, 64 * 1024)
RECORD_VALUE_BYTES: Final = {1024: 100, 64 * 1024: 1000}
MAX_MESSAGE_BYTES: Final = 1048588
REPEATS_DEFAULT: Final = 5
SEED_DEFAULT: Final = 20240601


def build_batch(target_bytes: int, value_bytes: int, rng: random.Random, sequence: int) -> bytes:
    """An idempotent producer's batch of about `target_bytes` (never more)."""
    builder = DefaultRecordBatchBuilder(
        magic=2,
        compression_type=0,
        is_transactional=False,
        producer_id=1000,
        producer_epoch=0,
        base_sequence=sequence,
        batch_size=target_bytes,
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


def run_frame(pool: Sequence[bytes]) -> None:
    frame = parse_batch
    for data in pool:
        frame(data)


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
            ("parse_batch (no CRC)", run_frame),
        ):
            seconds = baseline if run is run_crc else best_seconds(run, pool, args.repeats)
            print(
                f"{mean:>8.0f} B {name:<22} {total / seconds / 1e6:>10.1f} "
                f"{len(pool) / seconds:>12,.0f} {baseline / seconds:>9.2f}x"
            )


if __name__ == "__main__":
    main()
