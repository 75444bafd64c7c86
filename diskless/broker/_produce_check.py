"""A produce request's per-partition checks against its topics' descriptions: the part of
produce that needs no waiting, so the broker can run it in the caller's step; and what the broker
reads off a request on its way (its bytes made its own, its failures, its size)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Final, TypeAlias, cast

from diskless._kafka_errors import produce_error
from diskless._results import ProduceResult
from diskless._types import ErrorCode, TopicPartition
from diskless.compaction import UncleanableBatch, first_unkeyed
from diskless.coordinator import TopicDescription, read_only_refusal
from diskless.records import (
    TRANSACTIONAL_BIT,
    BatchHeader,
    InvalidBatch,
    RecordRules,
    parse_produce_payload,
)
from diskless.wal import WalEntry

Checked: TypeAlias = tuple[dict[TopicPartition, ProduceResult], dict[TopicPartition, BatchHeader]]
"""A checked request: the errors found, and the valid batches (before transaction leases)."""


def check_produce(
    partitions: Mapping[TopicPartition, bytes | bytearray | memoryview],
    topics: Mapping[str, TopicDescription],
    unavailable: Mapping[str, Exception],
    now_ms: int,
    *,
    allow_zstd: bool = True,
) -> Checked:
    """Validate every partition on its own (framing, CRC, every record, size, timestamps at
    `now_ms`, zstd only if `allow_zstd`, a key on every record of a compacted topic, no batch
    to a mirrored topic),
    recompressing a batch whose topic stores another codec, then Kafka's
    one-transactional-producer-per-request rule.

    A topic missing from `topics` is unknown, or fails with produce's error for the failure in
    `unavailable` that kept its description from being read.
    """
    results: dict[TopicPartition, ProduceResult] = {}
    valid: dict[TopicPartition, BatchHeader] = {}
    transactional = False
    for tp, data in partitions.items():
        description = topics.get(tp.topic)
        if description is None:
            failure = unavailable.get(tp.topic)
            if failure is not None:
                results[tp] = ProduceResult(
                    produce_error(failure),
                    error_message=f"topic metadata unavailable: {failure}",
                )
            else:
                results[tp] = _unknown(tp)
            continue
        if not 0 <= tp.partition < description.partitions:
            results[tp] = _unknown(tp)
            continue
        config = description.config
        read_only = read_only_refusal(config) if config.inapplicable_configs else None
        if read_only is not None:  # a mirrored topic (KIP-1279), as Kafka an internal topic
            results[tp] = ProduceResult(ErrorCode.INVALID_TOPIC_EXCEPTION, error_message=read_only)
            continue
        compression = config.compression_type
        rules = RecordRules(
            now_ms,
            config.timestamp_type,
            config.message_timestamp_before_max_ms,
            config.message_timestamp_after_max_ms,
            compression,
            config.compression_level if compression >= 0 else 0,
        )
        parsed = parse_produce_payload(data, config.max_message_bytes, rules, allow_zstd=allow_zstd)
        if isinstance(parsed, InvalidBatch):
            results[tp] = ProduceResult(parsed.error, error_message=parsed.message)
        elif config.compacted and _unkeyed(parsed):
            results[tp] = ProduceResult(
                ErrorCode.INVALID_RECORD,
                error_message=(
                    f"Compacted topic cannot accept message without key in topic partition {tp}."
                ),
            )
        else:
            valid[tp] = parsed
            transactional = transactional or parsed.is_transactional
    if transactional:
        _one_transactional_producer(results, valid)
    return results, valid


def _unkeyed(header: BatchHeader) -> bool:
    """Whether a valid batch holds a record without a key (Kafka's LogValidator refuses the
    batch on a compacted topic)."""
    try:
        return first_unkeyed(header) is not None
    except UncleanableBatch:
        return True  # validated already: cannot happen, and would not be cleanable


def _one_transactional_producer(
    results: dict[TopicPartition, ProduceResult], valid: dict[TopicPartition, BatchHeader]
) -> None:
    """KIP-890: one request carries transactional batches of at most one (producer, epoch)."""
    producers = {(h.producer_id, h.producer_epoch) for h in valid.values() if h.is_transactional}
    if len(producers) > 1:
        message = f"transactional batches of {len(producers)} producer ids/epochs"
        for tp, header in list(valid.items()):
            if header.is_transactional:
                results[tp] = ProduceResult(
                    ErrorCode.INVALID_PRODUCER_ID_MAPPING, error_message=message
                )
                del valid[tp]


def recompresses(topics: Mapping[str, TopicDescription]) -> bool:
    """Whether a topic of `topics` stores its batches in a codec of its own. Recompressing
    costs milliseconds per megabyte (gzip at its default level some 40, zstd at level 19 over a
    second), so the broker checks such requests in a worker thread, off its event loop."""
    for description in topics.values():  # noqa: SIM110 (no generator on the produce path)
        if description.config.compression_type >= 0:
            return True
    return False


def has_transactional(valid: Mapping[TopicPartition, BatchHeader]) -> bool:
    for header in valid.values():  # noqa: SIM110 (no generator on the produce path)
        if header.attributes & TRANSACTIONAL_BIT:
            return True
    return False


def _unknown(tp: TopicPartition) -> ProduceResult:
    return ProduceResult(
        ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, error_message=f"unknown partition {tp}"
    )


TIMED_OUT: Final = ProduceResult(
    ErrorCode.REQUEST_TIMED_OUT,
    error_message="the request timed out before reaching the WAL; it may still be written",
)


def errors_in(results: dict[TopicPartition, ProduceResult]) -> int:
    failed = 0
    for result in results.values():
        if result.error != ErrorCode.NONE:
            failed += 1
    return failed


def size_of(entries: list[WalEntry]) -> int:
    size = 0
    for entry in entries:
        size += entry.header.size
    return size


def has_lease(entries: list[WalEntry]) -> bool:
    return any(entry.lease_id is not None for entry in entries)


def owned_partitions(
    partitions: Mapping[TopicPartition, bytes | bytearray | memoryview],
) -> Mapping[TopicPartition, bytes | memoryview]:
    """`partitions` with every batch `owned_bytes`: the mapping itself when all already are (no
    copy made per request), else a new dict."""
    for data in partitions.values():
        if owned_bytes(data) is not data:
            return {tp: owned_bytes(data) for tp, data in partitions.items()}
    return cast("Mapping[TopicPartition, bytes | memoryview]", partitions)  # all owned already


def owned_bytes(data: bytes | bytearray | memoryview) -> bytes | memoryview:
    """`data`, copied unless immutable: the write may outlive the call (acks=0, a timeout)."""
    if isinstance(data, bytes) or (isinstance(data, memoryview) and isinstance(data.obj, bytes)):
        return data
    return bytes(data)
