"""Batches built and decoded by kafka-python: an independent codec, not ours checking itself.

The library has no general batch encoder of its own (a broker only receives batches), so the
tests and the benchmarks build every batch with kafka-python's builder, made here
(`batch_builder`), with Kafka's v2 header fields as a producer sets them.
"""

from __future__ import annotations

import random
import warnings
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Final

with warnings.catch_warnings():
    # Importing `kafka` the first time loads its protocol schemas through a deprecated
    # `importlib.resources` call.
    warnings.simplefilter("ignore", DeprecationWarning)
    from kafka.record import MemoryRecords
    from kafka.record.default_records import DefaultRecordBatchBuilder

CREATE_TIME_MS: Final = 1_700_000_000_000
BATCH_BYTES_MAX: Final = 1 << 30
"""The builder's size limit unless told otherwise: far above any batch a test builds."""
_WORDS: Final = (b"order", b"user", b"amount", b"EUR", b"status", b"shipped", b"pending", b"item")


def json_text(rng: random.Random, size: int) -> bytes:
    """`size` bytes of text-like JSON (compressible as real events are), drawn from `rng`."""
    out = bytearray(b'{"event": ')
    while len(out) < size:
        out += b'"%s": %d, ' % (rng.choice(_WORDS), rng.randrange(100_000))
    return bytes(out[:size])


def batch_builder(
    *,
    compression: int = 0,
    transactional: bool = False,
    producer_id: int = -1,
    producer_epoch: int = -1,
    base_sequence: int = -1,
    batch_size: int = BATCH_BYTES_MAX,
) -> DefaultRecordBatchBuilder:
    """kafka-python's builder of one v2 batch (base offset 0) with these header fields; records are
    appended with `append(offset, timestamp, key, value, headers)` and `build()` frames it."""
    return DefaultRecordBatchBuilder(
        magic=2,
        compression_type=compression,
        is_transactional=transactional,
        producer_id=producer_id,
        producer_epoch=producer_epoch,
        base_sequence=base_sequence,
        batch_size=batch_size,
    )


def build_batch(
    values: Sequence[bytes],
    *,
    keys: Sequence[bytes | None] | None = None,
    producer_id: int = -1,
    producer_epoch: int = -1,
    base_sequence: int = -1,
    transactional: bool = False,
    timestamp_ms: int = CREATE_TIME_MS,
    timestamp_step: int = 1,
) -> bytes:
    """A v2 batch, base offset 0, as a Kafka producer sends it; record i is stamped
    `timestamp_ms + i * timestamp_step`."""
    builder = batch_builder(
        transactional=transactional,
        producer_id=producer_id,
        producer_epoch=producer_epoch,
        base_sequence=base_sequence,
    )
    for i, value in enumerate(values):
        key = keys[i] if keys is not None else None
        assert builder.append(
            i, timestamp=timestamp_ms + i * timestamp_step, key=key, value=value, headers=[]
        )
    return bytes(builder.build())


@dataclass(frozen=True)
class Record:
    offset: int
    timestamp: int
    timestamp_type: int
    key: bytes | None
    value: bytes | None


@dataclass(frozen=True)
class Batch:
    base_offset: int
    last_offset: int
    is_control: bool
    is_transactional: bool
    producer_id: int
    producer_epoch: int
    timestamp_type: int
    records: list[Record]
    compression: int = 0


def decode(data: bytes) -> list[Batch]:
    """Every batch of a fetch response, CRC checked by kafka-python."""
    batches: list[Batch] = []
    total = 0
    memory = MemoryRecords(data)
    while (batch := memory.next_batch()) is not None:
        assert batch.validate_crc(), "kafka-python rejects the CRC"
        total += batch.size_in_bytes
        records = [Record(r.offset, r.timestamp, r.timestamp_type, r.key, r.value) for r in batch]
        batches.append(
            Batch(
                base_offset=batch.base_offset,
                last_offset=batch.last_offset,
                is_control=batch.is_control_batch,
                is_transactional=batch.is_transactional,
                producer_id=batch.producer_id,
                producer_epoch=batch.producer_epoch,
                timestamp_type=batch.timestamp_type,
                records=records,
                compression=batch.compression_type,
            )
        )
    assert total == len(data), "trailing bytes that frame no batch"
    return batches


def records_of(data: bytes) -> list[Record]:
    return [r for b in decode(data) for r in b.records]
