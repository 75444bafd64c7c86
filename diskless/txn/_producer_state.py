"""Per-producer state on one partition and Kafka's idempotent-producer checks.

This is the equivalent of Kafka's ProducerStateEntry / ProducerAppendInfo: pure functions over
immutable entries, so that every coordinator backend applies exactly the same rules and only
stores the resulting entries.

Checks, in Kafka's order, for a batch with producer id >= 0:
1. duplicate: same epoch and the exact (first_seq, last_seq) of one of the retained batches;
2. stale epoch: INVALID_PRODUCER_EPOCH;
3. sequence: an epoch bump must start at sequence 0; within an epoch the first sequence must follow
   the last one, wrapping from 2147483647 to 0; otherwise OUT_OF_ORDER_SEQUENCE_NUMBER;
4. a non-transactional batch while a transaction is open: INVALID_TXN_STATE.

A producer without state (new, or expired) is accepted at *any* first sequence: Kafka's classic
rule. The newer rule (sequence 0 on a partition that never held data) would also reject a producer
whose state expired and then came back, and gives no extra safety here because a diskless
partition never loses producer state except by expiry.

Expiry uses the coordinator's clock at the last append (`last_update_ms`), not the batch's client
timestamp as Kafka does: a producer with a skewed clock must not expire early or live forever.
A producer with an open transaction never expires.
"""

from __future__ import annotations

from typing import NamedTuple

import msgspec

from diskless._types import NO_PRODUCER_EPOCH, NO_SEQUENCE, ErrorCode
from diskless.records import SEQUENCE_MAX

PRODUCER_BATCHES_RETAINED_MAX = 5
"""How many recent batches per producer are kept for duplicate detection (Kafka's value)."""

PRODUCER_ID_EXPIRATION_MS_DEFAULT = 24 * 60 * 60 * 1000
"""Kafka's `producer.id.expiration.ms` default: producer state lives a day after its last write."""


class RetainedBatch(msgspec.Struct, frozen=True, array_like=True, gc=False):
    """A recent batch of a producer, as needed to answer a retried (duplicate) send."""

    first_seq: int
    last_seq: int
    first_offset: int
    last_offset: int
    timestamp: int


class ProducerEntry(msgspec.Struct, frozen=True, gc=False):
    """The state of one producer on one partition. Immutable: updates return a new entry."""

    producer_id: int
    producer_epoch: int
    batches: tuple[RetainedBatch, ...] = ()
    """The most recent batches of the current epoch, oldest first."""
    last_timestamp: int = -1
    """The max timestamp of the last appended batch (the append time on LOG_APPEND_TIME topics)."""
    last_update_ms: int = -1
    """The coordinator's clock when this producer last appended; drives expiry."""
    coordinator_epoch: int = -1
    current_txn_first_offset: int | None = None

    @property
    def last_sequence(self) -> int:
        return self.batches[-1].last_seq if self.batches else NO_SEQUENCE


def last_sequence_of(base_sequence: int, record_count: int) -> int:
    """The sequence of a batch's last record: base + count - 1, wrapping after SEQUENCE_MAX."""
    assert 0 <= base_sequence <= SEQUENCE_MAX, base_sequence
    assert record_count > 0, record_count
    return (base_sequence + record_count - 1) % (SEQUENCE_MAX + 1)


def in_sequence(last_seq: int, next_seq: int) -> bool:
    """Whether `next_seq` directly follows `last_seq`, including the wrap to 0."""
    return next_seq == last_seq + 1 or (next_seq == 0 and last_seq == SEQUENCE_MAX)


def is_expired(entry: ProducerEntry, now_ms: int, expiration_ms: int) -> bool:
    """Whether the entry has been idle for `expiration_ms`; never while a transaction is open."""
    return entry.current_txn_first_offset is None and now_ms - entry.last_update_ms >= expiration_ms


class Duplicate(NamedTuple):
    """The batch was already appended: answer with the original batch."""

    original: RetainedBatch


class Rejected(NamedTuple):
    """The batch breaks a producer rule and is not appended."""

    error: ErrorCode
    message: str


def check_append(
    entry: ProducerEntry | None,
    producer_epoch: int,
    first_seq: int,
    last_seq: int,
    is_transactional: bool,
) -> Duplicate | Rejected | None:
    """Apply the idempotence checks to one batch; None means the batch may be appended.

    `entry` is the producer's current state on the partition, including earlier batches of the
    same commit, or None when there is none (never seen, or expired).
    """
    if entry is None:
        return None
    if producer_epoch == entry.producer_epoch:
        for batch in entry.batches:
            if batch.first_seq == first_seq and batch.last_seq == last_seq:
                return Duplicate(batch)
    if producer_epoch < entry.producer_epoch:
        return Rejected(
            ErrorCode.INVALID_PRODUCER_EPOCH,
            f"epoch {producer_epoch} is older than the current epoch {entry.producer_epoch}",
        )
    if producer_epoch != entry.producer_epoch:
        if first_seq != 0 and entry.producer_epoch != NO_PRODUCER_EPOCH:
            return Rejected(
                ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER,
                f"a new epoch {producer_epoch} must start at sequence 0, not {first_seq}",
            )
    elif not in_sequence(entry.last_sequence, first_seq):
        return Rejected(
            ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER,
            f"sequence {first_seq} does not follow {entry.last_sequence} (epoch {producer_epoch})",
        )
    if not is_transactional and entry.current_txn_first_offset is not None:
        return Rejected(
            ErrorCode.INVALID_TXN_STATE,
            "a non-transactional batch while the producer has an ongoing transaction",
        )
    return None


def record_append(
    entry: ProducerEntry | None,
    producer_id: int,
    producer_epoch: int,
    batch: RetainedBatch,
    now_ms: int,
    is_transactional: bool,
) -> ProducerEntry:
    """The producer's entry after appending `batch` (which `check_append` accepted)."""
    if entry is None or entry.producer_epoch != producer_epoch:
        retained: tuple[RetainedBatch, ...] = (batch,)
    elif len(entry.batches) < PRODUCER_BATCHES_RETAINED_MAX:
        retained = (*entry.batches, batch)
    else:
        retained = (*entry.batches[1 - PRODUCER_BATCHES_RETAINED_MAX :], batch)
    assert len(retained) <= PRODUCER_BATCHES_RETAINED_MAX
    txn_first_offset = None if entry is None else entry.current_txn_first_offset
    if is_transactional and txn_first_offset is None:
        txn_first_offset = batch.first_offset
    return ProducerEntry(
        producer_id,
        producer_epoch,
        retained,
        batch.timestamp,  # last_timestamp
        now_ms,  # last_update_ms
        -1 if entry is None else entry.coordinator_epoch,
        txn_first_offset,
    )
