"""Control batches (transaction markers) built exactly as Kafka writes them."""

from __future__ import annotations

import struct
from typing import Final

import crc32c

from diskless._types import NO_SEQUENCE, ControlType
from diskless.records._header import (
    CONTROL_BIT,
    HEADER_SIZE,
    LOG_OVERHEAD,
    MAGIC,
    TRANSACTIONAL_BIT,
)
from diskless.records._varint import zigzag

CONTROL_RECORD_VERSION: Final = 0
END_TXN_MARKER_VERSION: Final = 0


def build_control_batch(
    *,
    base_offset: int,
    producer_id: int,
    producer_epoch: int,
    control_type: ControlType,
    coordinator_epoch: int,
    timestamp: int,
    partition_leader_epoch: int = -1,
) -> bytes:
    """A transaction marker exactly as Kafka writes it: one control record, no compression.

    Mirrors `MemoryRecords.withEndTransactionMarker`: attributes transactional + control,
    CreateTime, base sequence -1, key = (version, type), value = (version, coordinatorEpoch).
    """
    key = struct.pack(">hh", CONTROL_RECORD_VERSION, int(control_type))
    value = struct.pack(">hi", END_TXN_MARKER_VERSION, coordinator_epoch)
    body = (
        b"\x00"  # record attributes
        + zigzag(0)  # timestamp delta
        + zigzag(0)  # offset delta
        + zigzag(len(key))
        + key
        + zigzag(len(value))
        + value
        + zigzag(0)  # header count
    )
    record = zigzag(len(body)) + body
    attributes = TRANSACTIONAL_BIT | CONTROL_BIT
    after_crc = (
        struct.pack(
            ">hiqqqhii",
            attributes,
            0,  # last offset delta
            timestamp,
            timestamp,
            producer_id,
            producer_epoch,
            NO_SEQUENCE,
            1,  # records count
        )
        + record
    )
    length = HEADER_SIZE - LOG_OVERHEAD + len(record)
    prefix = struct.pack(
        ">qiibI", base_offset, length, partition_leader_epoch, MAGIC, crc32c.crc32c(after_crc)
    )
    return prefix + after_crc
