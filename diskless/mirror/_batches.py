"""Fetched source bytes as mirrored batches: framed, checked, and described for the coordinator.

A fetch answers whole batches and perhaps a truncated last one (Kafka's fetch stops at its byte
limit mid-batch); only whole batches are kept, from the first that starts at or after the
partition's mirrored end (an earlier one is mirrored already). Every batch's CRC is checked
before it is written anywhere.

One header field changes: the partition leader epoch (outside the CRC) is set to -1, as a
producer sends it and as the destination stores its own producers' batches. The source's value
is kept beside the batch (`Mirrored.leader_epoch`): the mirror raises the destination's leader
epoch to at least it before the batch lands (KIP-1279's invariant, `Mirror`). The records,
their offsets, producer fields and timestamps stay byte for byte.
"""

from __future__ import annotations

import struct
from typing import Final, NamedTuple

import msgspec

from diskless._types import ControlType, TopicPartition
from diskless.coordinator import MirrorBatch
from diskless.records import (
    HEADER_SIZE,
    VARINT_BYTES_MAX,
    VARLONG_BYTES_MAX,
    BatchHeader,
    InvalidBatch,
    MalformedVarint,
    parse_batch,
    read_varint,
)
from diskless.wal import WalEntry

_LEADER_EPOCH_AT: Final = 12
_NO_EPOCH: Final = struct.pack(">i", -1)
_CONTROL_KEY: Final = struct.Struct(">hh")


class SourceBatchError(Exception):
    """Fetched bytes that are not valid batches (a CRC mismatch, a bad control record)."""


class Mirrored(NamedTuple):
    entry: WalEntry
    batch: MirrorBatch
    """Its `byte_offset` is set once the object is laid out (`placed`)."""
    leader_epoch: int
    """The partition leader epoch the source wrote in the batch (-1: none)."""


def mirrored_batches(
    tp: TopicPartition, records: bytes, end: int, position: int | None = None
) -> list[Mirrored]:
    """The whole batches of `records` that start at or after `end` (the mirrored end) and reach
    `position` (the fetch's offset, beyond the end when the source no longer has the offsets
    between: its log start may lie inside a batch, which is then mirrored whole, as a Kafka
    follower copies it), in order, ready to upload."""
    reach = end if position is None else position
    data = bytearray(records)
    found: list[Mirrored] = []
    position = 0
    while position < len(data):
        parsed = parse_batch(data, position)
        if isinstance(parsed, InvalidBatch):
            break  # the fetch's byte limit cut the last batch: the next fetch gets it whole
        size = parsed.size
        if parsed.base_offset >= end and parsed.last_offset >= reach:
            if not parsed.crc_valid():
                raise SourceBatchError(f"{tp}: batch at {parsed.base_offset} fails its CRC")
            leader_epoch = parsed.partition_leader_epoch
            data[position + _LEADER_EPOCH_AT : position + _LEADER_EPOCH_AT + 4] = _NO_EPOCH
            found.append(_described(tp, data, position, size, leader_epoch))
            end = found[-1].batch.last_offset + 1
        position += size
    return found


def _described(
    tp: TopicPartition, data: bytearray, position: int, size: int, leader_epoch: int
) -> Mirrored:
    header = BatchHeader(memoryview(data)[position : position + size])  # a view: no copy
    control = _control_type(header) if header.is_control else None
    # A control record other than a transaction marker touches no producer's state.
    producer_id = -1 if header.is_control and control is None else header.producer_id
    batch = MirrorBatch(
        tp,
        header.base_offset,
        header.last_offset,
        0,
        size,
        max(1, header.records_count),
        header.max_timestamp,
        producer_id,
        header.producer_epoch,
        header.base_sequence,
        header.is_transactional,
        control,
        _coordinator_epoch(header) if control is not None else 0,
    )
    return Mirrored(WalEntry(tp, header), batch, leader_epoch)


def _control_record(header: BatchHeader) -> tuple[memoryview, int, int, int]:
    """The key's and value's places in a control batch's one record."""
    buffer = header.bytes_view()
    end = len(buffer)
    try:
        _, at = read_varint(buffer, HEADER_SIZE, end, VARINT_BYTES_MAX)  # record length
        at += 1  # attributes
        _, at = read_varint(buffer, at, end, VARLONG_BYTES_MAX)  # timestamp delta
        _, at = read_varint(buffer, at, end, VARINT_BYTES_MAX)  # offset delta
        key_length, at = read_varint(buffer, at, end, VARINT_BYTES_MAX)
        key_at = at
        at += max(0, key_length)
        value_length, at = read_varint(buffer, at, end, VARINT_BYTES_MAX)
    except MalformedVarint as error:
        raise SourceBatchError(f"the control record at {header.base_offset}: {error}") from None
    if key_length < _CONTROL_KEY.size or value_length > end - at:
        raise SourceBatchError(f"the control record at {header.base_offset} is malformed")
    return buffer, key_at, at, value_length


def _control_type(header: BatchHeader) -> ControlType | None:
    """COMMIT or ABORT; None for another control record (not a transaction marker)."""
    buffer, key_at, _, _ = _control_record(header)
    _, kind = _CONTROL_KEY.unpack_from(buffer, key_at)
    return ControlType(kind) if kind in (0, 1) else None


def _coordinator_epoch(header: BatchHeader) -> int:
    buffer, _, value_at, value_length = _control_record(header)
    if value_length < 6:  # version (int16), coordinator epoch (int32)
        raise SourceBatchError(f"the marker at {header.base_offset} has no coordinator epoch")
    (epoch,) = struct.unpack_from(">i", buffer, value_at + 2)
    return int(epoch)


def placed(mirrored: list[Mirrored], offsets: list[int]) -> list[MirrorBatch]:
    """The batches as laid out in their object: `offsets[i]` is where batch i starts."""
    assert len(offsets) == len(mirrored)
    return [
        msgspec.structs.replace(m.batch, byte_offset=at)
        for m, at in zip(mirrored, offsets, strict=True)
    ]
