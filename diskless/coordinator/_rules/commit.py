"""The commit planner: what committing one object's batches does, as a pure function.

The engine loads a snapshot of the partitions and producers a commit touches, calls
`plan_commit`, then has the store apply the plan's mutations in the same atomic step. Since the
rules run here and only here, every backend gives the same results for the same operations by
construction.

This is the hottest code of the coordinator (every committed batch passes through it once), so
the loop keeps its state in locals and plain lists; the rules themselves are those of
`diskless.txn`, called per batch.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol, TypeVar

import msgspec

from diskless._types import NO_PRODUCER_ID, ErrorCode, TimestampType, TopicPartition
from diskless.coordinator._rules.rows import PartitionState, StoredBatch, TxnLease, TxnRegistration
from diskless.coordinator._rules.txn import check_txn_commit, check_txn_epoch
from diskless.coordinator._values import CommitBatch, CommitBatchResult
from diskless.txn import (
    Duplicate,
    ProducerEntry,
    Rejected,
    RetainedBatch,
    check_append,
    is_expired,
    last_sequence_of,
    record_append,
)

ProducerKey = tuple[int, int]
"""(partition key, producer id): the key of a producer entry."""

K_contra = TypeVar("K_contra", contravariant=True)
V_co = TypeVar("V_co", covariant=True)


class Lookup(Protocol[K_contra, V_co]):
    """What the planner needs of a snapshot: a dict, or a backend's own view of its state."""

    def get(self, key: K_contra, /) -> V_co | None: ...


_NONE = ErrorCode.NONE
_DATA = -1
"""`StoredBatch.control` of a data batch."""
_LOG_APPEND_TIME = TimestampType.LOG_APPEND_TIME
_UNLOADED = ProducerEntry(-1, -1)
"""Marks a producer entry not looked up yet (None means looked up and absent)."""
_NO_REGISTRATIONS: dict[ProducerKey, TxnRegistration] = {}
_NO_LEASES: dict[int, TxnLease] = {}


class CommitPlan(msgspec.Struct):
    """The results of a commit and the mutations that persist it."""

    results: list[CommitBatchResult]
    new_batches: list[StoredBatch]
    """Appended batches, in commit order (hence in offset order within each partition)."""
    producers: dict[ProducerKey, ProducerEntry]
    """Every producer entry the commit changed, in its new state."""
    partitions: dict[TopicPartition, PartitionState]
    """Every partition the commit appended to, in its new state (copies; inputs are untouched)."""
    opened_txns: list[tuple[int, int, int]] = msgspec.field(default_factory=list)
    """(partition key, first offset, producer id) of the transactions the commit opened: the
    ongoing-transaction index (the LSO) gains them."""
    released_leases: list[int] = msgspec.field(default_factory=list)
    """Lease ids the commit's batches carried: released whatever each batch's outcome."""


def plan_commit(
    object_key: str,
    batches: Sequence[CommitBatch],
    partitions: Lookup[TopicPartition, PartitionState],
    producers: Lookup[ProducerKey, ProducerEntry],
    now_ms: int,
    producer_id_expiration_ms: int,
    registrations: Lookup[ProducerKey, TxnRegistration] = _NO_REGISTRATIONS,
    leases: Lookup[int, TxnLease] = _NO_LEASES,
    object_size: int = -1,
) -> CommitPlan:
    """Check and sequence `batches` in order against a snapshot of the state they touch.

    `partitions` holds every existing partition the batches name (absent ones are unknown);
    `producers` the stored entry of each (partition, producer) of the batches that has one;
    `registrations` and `leases` those of the transactional batches. All are only read.
    """
    results: list[CommitBatchResult] = []
    new_batches: list[StoredBatch] = []
    # Copies of the touched partitions, advanced batch by batch; the inputs stay untouched.
    working: dict[TopicPartition, PartitionState] = {}
    appended: set[TopicPartition] = set()
    entries: dict[ProducerKey, ProducerEntry | None] = {}
    changed: set[ProducerKey] = set()
    opened_txns: list[tuple[int, int, int]] = []
    released_leases: list[int] = []
    append_result = results.append
    append_batch = new_batches.append
    for batch in batches:
        if batch.lease_id is not None:
            released_leases.append(batch.lease_id)
        tp = batch.topic_partition
        state = working.get(tp)
        if state is None:
            original = partitions.get(tp)
            if original is None:
                append_result(
                    CommitBatchResult(
                        ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
                        error_message=f"unknown partition {tp}",
                    )
                )
                continue
            state = working[tp] = PartitionState(
                original.key,
                tp,
                original.config,
                original.high_watermark,
                original.log_start_offset,
                original.size_bytes,
                original.ts_running_max,
            )
        high_watermark = state.high_watermark
        log_append = state.config.timestamp_type == _LOG_APPEND_TIME
        count = batch.record_count
        assert count > 0, batch
        pid = batch.producer_id
        epoch = batch.producer_epoch
        entry: ProducerEntry | None = None
        if pid != NO_PRODUCER_ID:
            pkey = (state.key, pid)
            entry = entries.get(pkey, _UNLOADED)
            if entry is _UNLOADED:
                entry = producers.get(pkey)
                if entry is not None and is_expired(entry, now_ms, producer_id_expiration_ms):
                    entry = None
                entries[pkey] = entry
            first_seq = batch.base_sequence
            last_seq = last_sequence_of(first_seq, count)
            verdict: Duplicate | Rejected | None
            if batch.is_transactional:
                registration = registrations.get(pkey)
                verdict = check_txn_epoch(entry, registration, epoch)  # before the sequence
                if verdict is None:
                    verdict = check_append(entry, epoch, first_seq, last_seq, True)
                if verdict is None:
                    lease_id = batch.lease_id
                    verdict = check_txn_commit(
                        registration,
                        lease_id,
                        None if lease_id is None else leases.get(lease_id),
                        state.key,
                        pid,
                        epoch,
                        now_ms,
                    )
            else:
                verdict = check_append(entry, epoch, first_seq, last_seq, False)
            if verdict is not None:
                if isinstance(verdict, Duplicate):
                    original_batch = verdict.original
                    append_result(
                        CommitBatchResult(
                            _NONE,
                            base_offset=original_batch.first_offset,
                            log_append_time=original_batch.timestamp if log_append else -1,
                            log_start_offset=state.log_start_offset,
                            duplicate=True,
                        )
                    )
                else:
                    append_result(
                        CommitBatchResult(
                            verdict.error,
                            log_start_offset=state.log_start_offset,
                            error_message=verdict.message,
                        )
                    )
                continue
        last_offset = high_watermark + count - 1
        timestamp = now_ms if log_append else batch.max_timestamp
        running_max = state.ts_running_max
        if timestamp > running_max:
            running_max = state.ts_running_max = timestamp
        append_batch(
            StoredBatch(  # positional, as a keyword costs more than a field once per batch
                state.key,
                high_watermark,
                last_offset,
                object_key,
                batch.byte_offset,
                batch.size,
                batch.max_timestamp,
                now_ms if log_append else -1,
                timestamp,
                running_max,
                pid,
                epoch,
                _DATA,  # control
                0,  # coordinator_epoch
                -1,  # index_byte_offset: a batch row, not an extent
                -1,  # index_size
                object_size,
            )
        )
        state.high_watermark = last_offset + 1
        state.size_bytes += batch.size
        appended.add(tp)
        if pid != NO_PRODUCER_ID:
            if batch.is_transactional and (entry is None or entry.current_txn_first_offset is None):
                opened_txns.append((state.key, high_watermark, pid))
            entries[pkey] = record_append(
                entry,
                pid,
                epoch,
                RetainedBatch(first_seq, last_seq, high_watermark, last_offset, timestamp),
                now_ms,
                batch.is_transactional,
            )
            changed.add(pkey)
        append_result(
            CommitBatchResult(
                _NONE,
                high_watermark,  # base offset
                now_ms if log_append else -1,  # log-append time
                state.log_start_offset,
            )
        )
    assert len(results) == len(batches)
    changed_entries: dict[ProducerKey, ProducerEntry] = {}
    for key in changed:
        changed_entry = entries[key]
        assert changed_entry is not None
        changed_entries[key] = changed_entry
    new_states = {}
    for tp in appended:  # a loop: a comprehension would make `working` a cell for every batch
        new_states[tp] = working[tp]
    return CommitPlan(
        results, new_batches, changed_entries, new_states, opened_txns, released_leases
    )
