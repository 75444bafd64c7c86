"""Batches built and decoded by an independent codec (kafka-python), and small WAL fixtures."""

from __future__ import annotations

from kafka.record.default_records import DefaultRecordBatch

from diskless import TopicPartition
from diskless.records import BatchHeader, parse_batch
from diskless.wal import WalEntry
from testkit import batches

TIMESTAMP_MS = 1_700_000_000_000


def build_batch(
    values: list[bytes],
    *,
    producer_id: int = -1,
    producer_epoch: int = -1,
    base_sequence: int = -1,
    timestamp_ms: int = TIMESTAMP_MS,
) -> bytes:
    """A client batch (base offset 0) holding `values`, every record stamped `timestamp_ms`."""
    return batches.build_batch(
        values,
        producer_id=producer_id,
        producer_epoch=producer_epoch,
        base_sequence=base_sequence,
        timestamp_ms=timestamp_ms,
        timestamp_step=0,
    )


def header_of(data: bytes | bytearray) -> BatchHeader:
    parsed = parse_batch(data)
    assert isinstance(parsed, BatchHeader), parsed
    return parsed


def entry(topic_partition: TopicPartition, data: bytes | bytearray) -> WalEntry:
    return WalEntry(topic_partition, header_of(data))


def sized_batch(size: int, *, tag: int = 0, **producer: int) -> bytes:
    """A one-record batch of exactly `size` bytes (size >= 80)."""
    overhead = len(build_batch([b""], **producer))
    value_len = size - overhead
    for _ in range(4):  # the record's varint lengths grow with the value; converge
        data = build_batch([bytes([tag % 256]) * value_len], **producer)
        if len(data) == size:
            return data
        value_len += size - len(data)
    raise AssertionError(f"cannot build a batch of exactly {size} bytes")


def decode_values(data: bytes) -> tuple[int, list[bytes | None]]:
    """(base offset, record values) of one batch, decoded by kafka-python."""
    batch = DefaultRecordBatch(data)
    assert batch.validate_crc()
    return batch.base_offset, [record.value for record in batch]
