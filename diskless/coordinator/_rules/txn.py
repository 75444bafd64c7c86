"""Transaction rules of the partitions' side, shared by every backend (which only stores).

The batch coordinator plays the partition leader's transactional role (DESIGN §4):

- **Verification** (KIP-890): `add_partitions_to_txn` registers (producer, epoch) as having an
  ongoing transaction on a partition; only a registered pair may write transactional batches.
- **Stale epochs first**: a transactional batch older than the newest epoch the partition knows
  of its producer (its entry, or a registration of a later transaction) belongs to a transaction
  that has ended, and is refused as INVALID_PRODUCER_EPOCH before its sequence is looked at, at
  AddPartitionsToTxn, at the lease and at the commit alike (`stored_epoch`). Kafka's verification
  asks the transaction coordinator before the log checks sequences; checked after them, a late
  batch newer than the entry (the partition had no part in the transactions in between) would
  be answered OUT_OF_ORDER_SEQUENCE_NUMBER, which librdkafka treats as fatal.
- **Leases** (the commit barrier): a broker takes a lease for each transactional batch before the
  batch enters a WAL segment. A lease is granted only while the registration is ONGOING, and it
  expires `ttl` later on the coordinator's clock; the commit of the batch releases it. A commit
  whose lease expired, or which arrives after the marker, is rejected: never merged behind it.
- **Ending** (`CoordinatorEngine.write_txn_markers`):
  1. atomically mark the registration ENDING: from now on no new lease is granted;
  2. wait, through the injected clock, until no live lease of (producer, epoch) remains on those
     partitions (each is released by its commit or expires; none can be added), so every batch
     still on its way has landed or can no longer land;
  3. atomically write the markers (`plan_marker`): one offset at the high watermark, the producer
     entry moves to the marker epoch with no retained batches (TV2: the next transaction starts
     at sequence 0), the ongoing transaction leaves the LSO index, an ABORT enters the
     aborted-transaction index, and the registration and any expired leases are dropped.
- **LSO**: ongoing transactions are indexed per partition by first offset; the LSO is the
  earliest one (`first_ongoing`, then `PartitionState.last_stable_offset`).
- **Deleted topics**: deleting a topic drops its registrations and leases with its partitions, and
  an end answers UNKNOWN_TOPIC_OR_PARTITION for a partition that no longer exists (the
  transaction coordinator then skips it, as Kafka's does). The partition key stands for Kafka's
  topic id: a topic re-created under the same name has no registration of a transaction begun
  before, so `plan_marker` writes it no marker and its LSO is untouched.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Final

import msgspec

from diskless._types import ControlType, ErrorCode, TimestampType
from diskless.coordinator._rules.rows import (
    AbortedTxn,
    PartitionState,
    StoredBatch,
    TxnLease,
    TxnRegistration,
)
from diskless.records import build_control_batch
from diskless.txn import ProducerEntry, Rejected

CONTROL_BATCH_BYTES: Final = len(
    build_control_batch(
        base_offset=0,
        producer_id=0,
        producer_epoch=0,
        control_type=ControlType.COMMIT,
        coordinator_epoch=0,
        timestamp=0,
    )
)
"""The size of a synthesized marker: what it counts for fetch budgets and size retention."""


def first_ongoing(ongoing: Iterable[tuple[int, int]], other_than: int | None = None) -> int | None:
    """The basis of the LSO: the first offset of a partition's earliest ongoing transaction
    (None: none is open), from its ongoing-transaction index given as (first offset, producer
    id) in first-offset order. With `other_than`, the earliest of another producer's (the LSO
    an ABORT marker of that producer records: `plan_marker`).

    The SQL stores ask the same of their index in one subquery (`sql_rows.first_ongoing`)."""
    return next((first for first, producer in ongoing if producer != other_than), None)


def stored_epoch(entry: ProducerEntry | None, registration: TxnRegistration | None) -> int:
    """The newest epoch the partition knows of the producer."""
    return max(
        -1 if entry is None else entry.producer_epoch,
        -1 if registration is None else registration.producer_epoch,
    )


def check_registration(
    entry: ProducerEntry | None, registration: TxnRegistration | None, producer_epoch: int
) -> tuple[ErrorCode, TxnRegistration | None]:
    """AddPartitionsToTxn on one partition: the error, and the registration to store (if new)."""
    if producer_epoch < stored_epoch(entry, registration):
        return ErrorCode.INVALID_PRODUCER_EPOCH, None
    if registration is not None and registration.producer_epoch == producer_epoch:
        if registration.ending:
            return ErrorCode.CONCURRENT_TRANSACTIONS, None
        return ErrorCode.NONE, None  # already registered
    return ErrorCode.NONE, TxnRegistration(producer_epoch)


def check_lease_grant(
    entry: ProducerEntry | None, registration: TxnRegistration | None, producer_epoch: int
) -> ErrorCode:
    """May a transactional batch of (producer, epoch) enter a WAL segment now?"""
    if producer_epoch < stored_epoch(entry, registration):
        return ErrorCode.INVALID_PRODUCER_EPOCH
    if registration is None or registration.producer_epoch != producer_epoch:
        return ErrorCode.INVALID_TXN_STATE
    if registration.ending:
        return ErrorCode.INVALID_TXN_STATE
    return ErrorCode.NONE


def check_txn_epoch(
    entry: ProducerEntry | None, registration: TxnRegistration | None, producer_epoch: int
) -> Rejected | None:
    """The first check of a transactional batch at its commit: is its epoch still current?"""
    stored = stored_epoch(entry, registration)
    if producer_epoch < stored:
        return Rejected(
            ErrorCode.INVALID_PRODUCER_EPOCH,
            f"epoch {producer_epoch} is older than the current epoch {stored}",
        )
    return None


def check_txn_commit(
    registration: TxnRegistration | None,
    lease_id: int | None,
    lease: TxnLease | None,
    partition_key: int,
    producer_id: int,
    producer_epoch: int,
    now_ms: int,
) -> Rejected | None:
    """The transactional part of committing a batch, after the producer checks passed."""
    if registration is None or registration.producer_epoch != producer_epoch:
        return Rejected(
            ErrorCode.INVALID_TXN_STATE,
            f"producer {producer_id} epoch {producer_epoch} has no ongoing transaction here",
        )
    if lease_id is None:
        if registration.ending:
            return Rejected(ErrorCode.INVALID_TXN_STATE, "the transaction is ending")
        return None
    if (
        lease is None
        or lease.partition_key != partition_key
        or lease.producer_id != producer_id
        or lease.producer_epoch != producer_epoch
    ):
        return Rejected(ErrorCode.INVALID_TXN_STATE, f"lease {lease_id} is not held")
    if lease.expires_ms <= now_ms:
        return Rejected(ErrorCode.INVALID_TXN_STATE, f"lease {lease_id} expired")
    return None


class MarkerPlan(msgspec.Struct):
    """What writing one marker changes; `marker` None means nothing to write."""

    error: ErrorCode
    marker: StoredBatch | None = None
    state: PartitionState | None = None
    """The partition after the marker (a copy)."""
    entry: ProducerEntry | None = None
    closed_txn_first_offset: int | None = None
    """The ongoing transaction that leaves the LSO index."""
    aborted: AbortedTxn | None = None


def plan_marker(
    state: PartitionState,
    entry: ProducerEntry | None,
    registration: TxnRegistration | None,
    producer_id: int,
    producer_epoch: int,
    marker_epoch: int,
    commit: bool,
    coordinator_epoch: int,
    now_ms: int,
    next_ongoing_first_offset: int | None,
) -> MarkerPlan:
    """The marker of (producer, epoch) on one partition, as Kafka's partition leader writes it.

    `next_ongoing_first_offset` is the first offset of the earliest ongoing transaction of
    another producer on the partition (None if none): the LSO recorded for an abort. A partition
    with neither a registration of (producer, epoch) nor an open transaction of the producer gets
    no marker: it holds no part of the transaction.
    """
    assert marker_epoch > producer_epoch, (marker_epoch, producer_epoch)
    if entry is not None and coordinator_epoch < entry.coordinator_epoch:
        return MarkerPlan(ErrorCode.TRANSACTION_COORDINATOR_FENCED)
    registered = registration is not None and registration.producer_epoch == producer_epoch
    if not registered:
        if registration is not None and registration.producer_epoch > producer_epoch:
            return MarkerPlan(ErrorCode.INVALID_PRODUCER_EPOCH)
        if entry is not None and entry.producer_epoch >= marker_epoch:
            return MarkerPlan(ErrorCode.NONE)  # written already: a retried end
        if entry is None or entry.current_txn_first_offset is None:
            # Nothing of the transaction is here: the partition it touched was deleted (and
            # perhaps re-created under its name). A marker would be a stray batch.
            return MarkerPlan(ErrorCode.NONE)
    if entry is not None and entry.producer_epoch > marker_epoch:
        return MarkerPlan(ErrorCode.INVALID_PRODUCER_EPOCH)
    offset = state.high_watermark
    log_append = state.config.timestamp_type == TimestampType.LOG_APPEND_TIME
    running_max = max(state.ts_running_max, now_ms)
    marker = StoredBatch(
        state.key,
        offset,
        offset,
        "",
        0,
        CONTROL_BATCH_BYTES,
        now_ms,  # max timestamp
        now_ms if log_append else -1,
        now_ms,  # timestamp
        running_max,
        producer_id,
        marker_epoch,
        int(ControlType.COMMIT if commit else ControlType.ABORT),
        coordinator_epoch,
    )
    new_state = PartitionState(
        state.key,
        state.topic_partition,
        state.config,
        offset + 1,
        state.log_start_offset,
        state.size_bytes + CONTROL_BATCH_BYTES,
        running_max,
    )
    first = None if entry is None else entry.current_txn_first_offset
    aborted = None
    if not commit and first is not None:
        lso = next_ongoing_first_offset if next_ongoing_first_offset is not None else offset + 1
        aborted = AbortedTxn(producer_id, first, offset, lso)
    new_entry = ProducerEntry(
        producer_id,
        marker_epoch,
        (),
        -1 if entry is None else entry.last_timestamp,
        now_ms,
        coordinator_epoch,
        None,
    )
    return MarkerPlan(ErrorCode.NONE, marker, new_state, new_entry, first, aborted)
