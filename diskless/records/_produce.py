"""The broker's entry point: one partition's produce payload to a validated batch or an error."""

from __future__ import annotations

from typing import NamedTuple

from diskless._types import CompressionType, ErrorCode, TimestampType
from diskless.records._compression import CODEC_ZSTD
from diskless.records._header import (
    COMPRESSION_MASK,
    BatchHeader,
    InvalidBatch,
    _byte_view,
    parse_batch,
    split_batches,
    validate_client_batch,
)
from diskless.records._walk import check_records

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
    compression: int = CompressionType.PRODUCER
    """The topic's codec, which every batch is stored in (PRODUCER: the batch's own)."""
    compression_level: int = 0
    """The topic's level for that codec."""


def _validate(
    header: BatchHeader, max_message_bytes: int, rules: RecordRules | None
) -> BatchHeader | InvalidBatch:
    invalid = validate_client_batch(header, max_message_bytes)
    if invalid is not None:
        return invalid
    if rules is None:
        return header
    return check_records(
        header,
        max_message_bytes,
        rules.timestamp_type,
        rules.now_ms,
        rules.timestamp_before_max_ms,
        rules.timestamp_after_max_ms,
        rules.compression,
        rules.compression_level,
    )


def parse_produce_payload(
    data: bytes | bytearray | memoryview,
    max_message_bytes: int,
    rules: RecordRules | None = None,
    *,
    allow_zstd: bool = True,
) -> BatchHeader | InvalidBatch:
    """The single valid batch of one partition's produce data, or the error for that partition.

    Produce v3+ carries exactly one batch per partition; anything else is INVALID_RECORD. With
    `rules` every record is decoded and checked too (`validate_records`), and the batch returned
    may be a fixed copy (its maxTimestamp, or its records in the topic's codec); without, only
    the framing, header and CRC are checked (for callers that re-read batches the broker already
    accepted).

    `allow_zstd` False (a request below Produce v7, whose client could not read zstd back) makes
    a zstd batch UNSUPPORTED_COMPRESSION_TYPE. Kafka checks this with the request's own rules
    (`ProduceRequest.validateRecords`), on the first batch, before its CRC and every other rule.
    """
    buffer = _byte_view(data)
    first = parse_batch(buffer)
    if isinstance(first, BatchHeader):
        if not allow_zstd and first.attributes & COMPRESSION_MASK == CODEC_ZSTD:
            return InvalidBatch(
                ErrorCode.UNSUPPORTED_COMPRESSION_TYPE,
                "zstd batches need Produce v7 or later",
            )
        if first.size == len(buffer):  # the common case
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
