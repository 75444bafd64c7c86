"""The broker's entry point: one partition's produce payload to a validated batch or an error."""

from __future__ import annotations

from typing import NamedTuple

from diskless._types import ErrorCode, TimestampType
from diskless.records._header import (
    BatchHeader,
    InvalidBatch,
    _byte_view,
    parse_batch,
    split_batches,
    validate_client_batch,
)
from diskless.records._walk import validate_records

TIMESTAMP_BEFORE_MAX_MS_DEFAULT = 2**63 - 1
"""Kafka's message.timestamp.before.max.ms default (Long.MAX_VALUE: no lower bound)."""
TIMESTAMP_AFTER_MAX_MS_DEFAULT = 3_600_000
"""Kafka's message.timestamp.after.max.ms default since 4.0 (KIP-1030): one hour."""


class RecordRules(NamedTuple):
    """What record-level validation needs from the topic and the broker's clock."""

    now_ms: int
    timestamp_type: TimestampType = TimestampType.CREATE_TIME
    timestamp_before_max_ms: int = TIMESTAMP_BEFORE_MAX_MS_DEFAULT
    timestamp_after_max_ms: int = TIMESTAMP_AFTER_MAX_MS_DEFAULT


def _validate(
    header: BatchHeader, max_message_bytes: int, rules: RecordRules | None
) -> BatchHeader | InvalidBatch:
    invalid = validate_client_batch(header, max_message_bytes)
    if invalid is not None:
        return invalid
    if rules is None:
        return header
    return validate_records(
        header,
        max_message_bytes=max_message_bytes,
        timestamp_type=rules.timestamp_type,
        now_ms=rules.now_ms,
        timestamp_before_max_ms=rules.timestamp_before_max_ms,
        timestamp_after_max_ms=rules.timestamp_after_max_ms,
    )


def parse_produce_payload(
    data: bytes | bytearray | memoryview,
    max_message_bytes: int,
    rules: RecordRules | None = None,
) -> BatchHeader | InvalidBatch:
    """The single valid batch of one partition's produce data, or the error for that partition.

    Produce v3+ carries exactly one batch per partition; anything else is INVALID_RECORD. With
    `rules` every record is decoded and checked too (`validate_records`), and the batch returned
    may be a fixed copy (its maxTimestamp); without, only the framing, header and CRC are checked
    (for callers that re-read batches the broker already accepted).
    """
    buffer = _byte_view(data)
    first = parse_batch(buffer)
    if isinstance(first, BatchHeader) and first.size == len(buffer):  # the common case
        return _validate(first, max_message_bytes, rules)
    batches = split_batches(buffer)
    if isinstance(batches, InvalidBatch):
        return batches
    if len(batches) != 1:
        return InvalidBatch(
            ErrorCode.INVALID_RECORD,
            f"a produce request must carry exactly one batch per partition, not {len(batches)}",
        )
    return _validate(batches[0], max_message_bytes, rules)
