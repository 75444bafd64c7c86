"""What the read path decides per batch: isolation, aborted transactions, markers, the write
path's checks repeated on the bytes read back, and the buffers a served batch is sent as."""

from __future__ import annotations

import struct
from collections.abc import Sequence
from typing import Final

from diskless._results import FetchResult
from diskless._types import ErrorCode, IsolationLevel, TimestampType
from diskless.coordinator import BatchInfo, FindBatchesResponse
from diskless.records import (
    HEADER_SIZE,
    InvalidBatch,
    build_control_batch,
    log_append_time_header,
    parse_batch,
    set_base_offset,
    set_log_append_time,
)

Buffer = bytes | bytearray | memoryview
_BASE_OFFSET: Final = struct.Struct(">q")
"""A batch's first field, outside its CRC: the one a fetch always sets."""


class CorruptBatch(Exception):
    """A stored batch failed the read-back check; its partition gets KAFKA_STORAGE_ERROR."""


def within_isolation(
    response: FindBatchesResponse, isolation_level: IsolationLevel
) -> list[BatchInfo]:
    """READ_COMMITTED stops before the last stable offset; READ_UNCOMMITTED at the high watermark.

    The LSO is always the first offset of a batch (the open transaction's first batch), so the
    cut falls between batches.
    """
    if isolation_level == IsolationLevel.READ_COMMITTED:
        return [b for b in response.batches if b.base_offset < response.last_stable_offset]
    return list(response.batches)


def aborted_transactions(
    response: FindBatchesResponse,
    batches: Sequence[BatchInfo],
    isolation_level: IsolationLevel,
) -> list[tuple[int, int]]:
    """(producer id, first offset) of aborted transactions overlapping the returned batches.

    Only READ_COMMITTED fetches carry the list. The coordinator's index answers it (aborted
    transactions whose marker is at or after the fetch offset and whose first offset is below the
    end of the returned batches); this keeps those overlapping what is actually returned.
    """
    if isolation_level != IsolationLevel.READ_COMMITTED or not batches:
        return []
    first_offset, last_offset = batches[0].base_offset, batches[-1].last_offset
    # Below the LSO, except a batch straddling a log start offset that moved past an open
    # transaction's first offset (the LSO is then the log start, inside that batch).
    assert first_offset <= last_offset, (first_offset, last_offset)
    return [
        (producer_id, txn_first_offset)
        for producer_id, txn_first_offset in response.aborted_transactions
        if txn_first_offset <= last_offset
    ]


def synthesize_marker(info: BatchInfo) -> bytes:
    """The control batch of a transaction marker that exists only as coordinator metadata."""
    assert info.control is not None, info
    assert info.base_offset == info.last_offset, info
    return build_control_batch(
        base_offset=info.base_offset,
        producer_id=info.producer_id,
        producer_epoch=info.producer_epoch,
        control_type=info.control,
        coordinator_epoch=info.coordinator_epoch,
        timestamp=info.max_timestamp if info.max_timestamp >= 0 else info.log_append_time,
    )


def check_stored_batch(batch: Buffer, info: BatchInfo) -> None:
    """The write path's checks, repeated on the bytes read back: one whole batch, valid CRC,
    holding exactly the offsets the coordinator assigned to it."""
    header = parse_batch(batch)
    where = f"{info.object_key} [{info.byte_offset}, {info.byte_offset + info.size})"
    if isinstance(header, InvalidBatch):
        raise CorruptBatch(f"{where}: {header.message}")
    if header.size != len(batch):
        raise CorruptBatch(f"{where}: holds a batch of {header.size} bytes, not {len(batch)}")
    if not header.crc_valid():
        raise CorruptBatch(f"{where}: CRC-32C mismatch")
    if header.last_offset_delta != info.last_offset - info.base_offset:
        raise CorruptBatch(
            f"{where}: batch holds {header.last_offset_delta + 1} offsets, "
            f"the coordinator assigned {info.last_offset - info.base_offset + 1}"
        )


def served_parts(
    info: BatchInfo, stored: memoryview | None, *, checked: bool = False
) -> tuple[bytes | memoryview, ...]:
    """The batch a fetch returns for `info`, as buffers that follow each other on the wire:
    the stored bytes (checked, unless `checked` says they already were) or, for a marker, its
    control batch; base offset set, and the append time stamped on LOG_APPEND_TIME topics.
    Raises CorruptBatch when the stored bytes fail the checks.

    Only what changes is copied. The base offset (bytes 0..7, outside the CRC) goes in an
    8-byte buffer of its own before a view of the rest; a LogAppendTime batch gets a stamped
    copy of its header (the CRC computed over it and the records) before a view of its records.
    `stored` must be a view of bytes that never change (a cache block, a written segment): the
    buffers returned refer to them until they are sent."""
    if not info.object_key:
        return (_marker(info),)
    assert stored is not None, info
    if not checked:
        check_stored_batch(stored, info)
    if info.timestamp_type == TimestampType.LOG_APPEND_TIME:
        header = log_append_time_header(stored, info.log_append_time)
        set_base_offset(header, info.base_offset)
        return (bytes(header), stored[HEADER_SIZE:])
    (base_offset,) = _BASE_OFFSET.unpack_from(stored)
    if base_offset == info.base_offset:
        return (stored,)
    return (_BASE_OFFSET.pack(info.base_offset), stored[_BASE_OFFSET.size :])


def _marker(info: BatchInfo) -> bytes:
    batch = bytearray(synthesize_marker(info))
    if info.timestamp_type == TimestampType.LOG_APPEND_TIME:
        set_log_append_time(batch, info.log_append_time)
    return bytes(batch)


def as_served(info: BatchInfo, stored: Buffer | None) -> bytearray:
    """`served_parts` as one batch of its own (consolidation copies it into a new object)."""
    view = None if stored is None else memoryview(stored).toreadonly()
    return bytearray(b"").join(served_parts(info, view))


def empty_result(
    response: FindBatchesResponse, error: ErrorCode, message: str | None = None
) -> FetchResult:
    return FetchResult(
        error,
        high_watermark=response.high_watermark,
        last_stable_offset=response.last_stable_offset,
        log_start_offset=response.log_start_offset,
        error_message=message,
    )
