"""kafka-python as the independent record codec: build batches, patch them, compare headers.

Nothing here imports `diskless.records`: the expected values come from kafka-python's own
builder and decoder, and the CRC of a patched batch from kafka-python's CRC-32C helper.
"""

from __future__ import annotations

import struct
from collections.abc import Sequence
from typing import Any

import kafka.codec
from kafka.record.default_records import DefaultRecordBatch
from kafka.record.util import calc_crc32c

from testkit.batches import batch_builder

# Header field offsets, written out from the v2 layout table rather than taken from our module.
BASE_OFFSET_AT = 0
LENGTH_AT = 8
LEADER_EPOCH_AT = 12
MAGIC_AT = 16
CRC_AT = 17
ATTRIBUTES_AT = 21
LAST_OFFSET_DELTA_AT = 23
BASE_TIMESTAMP_AT = 27
MAX_TIMESTAMP_AT = 35
PRODUCER_ID_AT = 43
PRODUCER_EPOCH_AT = 51
BASE_SEQUENCE_AT = 53
RECORDS_COUNT_AT = 57

CODECS: dict[str, tuple[int, Any]] = {
    "none": (DefaultRecordBatch.CODEC_NONE, lambda: True),
    "gzip": (DefaultRecordBatch.CODEC_GZIP, kafka.codec.has_gzip),
    "snappy": (DefaultRecordBatch.CODEC_SNAPPY, kafka.codec.has_snappy),
    "lz4": (DefaultRecordBatch.CODEC_LZ4, kafka.codec.has_lz4),
    "zstd": (DefaultRecordBatch.CODEC_ZSTD, kafka.codec.has_zstd),
}

Record = tuple[int, bytes | None, bytes | None, list[tuple[str, bytes | None]]]
"""(timestamp, key, value, headers) of one record to append."""

BATCH_BYTES_MAX = 16 * 1024 * 1024


def build_batch(
    records: Sequence[Record],
    *,
    compression: int = 0,
    transactional: bool = False,
    producer_id: int = -1,
    producer_epoch: int = -1,
    base_sequence: int = -1,
) -> bytes:
    """A v2 batch exactly as kafka-python's producer would frame it (base offset 0)."""
    builder = batch_builder(
        compression=compression,
        transactional=transactional,
        producer_id=producer_id,
        producer_epoch=producer_epoch,
        base_sequence=base_sequence,
        batch_size=BATCH_BYTES_MAX,
    )
    for offset, (timestamp, key, value, headers) in enumerate(records):
        assert builder.append(offset, timestamp, key, value, headers) is not None
    return bytes(builder.build())


def simple_records(count: int, timestamp: int = 1_700_000_000_000) -> list[Record]:
    return [
        (timestamp + i, f"key-{i}".encode(), f"value-{i}".encode() * 3, []) for i in range(count)
    ]


def recompute_crc(batch: bytearray) -> bytearray:
    """Restore a valid CRC after a header patch, using kafka-python's CRC-32C."""
    struct.pack_into(">I", batch, CRC_AT, calc_crc32c(bytes(batch[ATTRIBUTES_AT:])))
    return batch


def patch(data: bytes, fmt: str, at: int, value: int, *, fix_crc: bool = True) -> bytes:
    """`data` with one big-endian field replaced; the CRC is recomputed unless told otherwise."""
    batch = bytearray(data)
    struct.pack_into(fmt, batch, at, value)
    if fix_crc:
        recompute_crc(batch)
    return bytes(batch)


def attributes_of(data: bytes) -> int:
    return int(struct.unpack_from(">h", data, ATTRIBUTES_AT)[0])


def oracle(data: bytes) -> DefaultRecordBatch:
    batch = DefaultRecordBatch(data)
    assert batch.magic == 2
    return batch


def assert_header_matches(header: Any, data: bytes) -> None:
    """Every field of our header view equals what kafka-python decodes from the same bytes."""
    kb = oracle(data)
    assert header.base_offset == kb.base_offset
    assert header.size == kb.size_in_bytes == len(data)
    assert header.length == kb.size_in_bytes - 12
    assert header.partition_leader_epoch == kb.leader_epoch
    assert header.magic == kb.magic
    assert header.crc == kb.crc
    assert header.attributes == kb.attributes
    assert header.last_offset_delta == kb.last_offset_delta
    assert header.last_offset == kb.last_offset
    assert header.base_timestamp == kb.first_timestamp
    assert header.max_timestamp == kb.max_timestamp
    assert header.producer_id == kb.producer_id
    assert header.has_producer_id == kb.has_producer_id()
    assert header.producer_epoch == kb.producer_epoch
    assert header.base_sequence == kb.base_sequence
    assert header.records_count == kb.records_count
    assert header.last_sequence == kb.last_sequence
    assert header.is_transactional == kb.is_transactional
    assert header.is_control == kb.is_control_batch
    assert header.compression == kb.compression_type
    assert int(header.timestamp_type) == kb.timestamp_type
    assert header.crc_valid() == oracle(data).validate_crc()
    assert bytes(header.bytes_view()) == data
