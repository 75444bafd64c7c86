"""The commit planner: what committing one object's batches does, as a pure function.

A backend loads a snapshot of the partitions and producers a commit touches, calls `plan_commit`,
then stores the plan's mutations in one atomic step. Since the rules run here and only here, every
backend gives the same results for the same operations by construction.

This is the hottest code of the coordinator (every committed batch passes through it once), so
the loop keeps its state in locals and plain lists; the rules themselves are those of
`diskless.txn`, called per batch.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol, TypeVar

import msgspec

from diskless._types import NO_PRODUCER_ID, ErrorCode, TimestampType, TopicPartition
from diskless.coordinator._api import CommitBatch, CommitBatchResult
from diskless.coordinator._rows import PartitionState, StoredBatch
from diskless.txn import (
    SEQUENCE_MAX,
    Duplicate,
    ProducerEntry,
    RetainedBatch,
    check_append,
    is_expired,
    record_append,
)

ProducerKey = tuple[int, int]
"""(partition key, producer id): the key of a producer entry."""

K_contra = TypeVar("K_contra", contravariant=True)
V_co = TypeVar("V_co", covariant=True)


class Lookup(Protocol[K_contra, V_co]):
    """What the planner needs of a snapshot: a dict, or a backend's own view of its state."""

    def get(self, key: K_contra, /) -> V_co | None: ...


_SEQUENCE_MODULUS = SEQUENCE_MAX + 1
_NONE = ErrorCode.NONE
_LOG_APPEND_TIME = TimestampType.LOG_APPEND_TIME
_UNLOADED = ProducerEntry(-1, -1)
"""Marks a producer entry not looked up yet (None means looked up and absent)."""


class CommitPlan(msgspec.Struct):
    """The results of a commit and the mutations that persist it."""

    results: list[CommitBatchResult]
    new_batches: list[StoredBatch]
    """Appended batches, in commit order (hence in offset order within each partition)."""
    producers: dict[ProducerKey, ProducerEntry]
    """Every producer entry the commit changed, in its new state."""
    partitions: dict[TopicPartition, PartitionState]
    """Every partition the commit appended to, in its new state (copies; inputs are untouched)."""


def producer_keys(
    batches: Sequence[CommitBatch], partitions: Lookup[TopicPartition, PartitionState]
) -> set[ProducerKey]:
    """The producer entries a backend must load before planning a commit of `batches`."""
    keys = set()
    for b in batches:
        if b.producer_id != NO_PRODUCER_ID:
            state = partitions.get(b.topic_partition)
            if state is not None:
                keys.add((state.key, b.producer_id))
    return keys


def plan_commit(
    object_key: str,
    batches: Sequence[CommitBatch],
    partitions: Lookup[TopicPartition, PartitionState],
    producers: Lookup[ProducerKey, ProducerEntry],
    now_ms: int,
    producer_id_expiration_ms: int,
) -> CommitPlan:
    """Check and sequence `batches` in order against a snapshot of the state they touch.

    `partitions` holds every existing partition the batches name (absent ones are unknown);
    `producers` holds the stored entry of every key in `producer_keys(...)` that has one. Both
    are only read, once per key, and never while the plan is being applied.
    """
    results: list[CommitBatchResult] = []
    new_batches: list[StoredBatch] = []
    # Copies of the touched partitions, advanced batch by batch; the inputs stay untouched.
    working: dict[TopicPartition, PartitionState] = {}
    appended: set[TopicPartition] = set()
    entries: dict[ProducerKey, ProducerEntry | None] = {}
    changed: set[ProducerKey] = set()
    append_result = results.append
    append_batch = new_batches.append
    for batch in batches:
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
            assert 0 <= first_seq <= SEQUENCE_MAX, batch
            last_seq = (first_seq + count - 1) % _SEQUENCE_MODULUS
            verdict = check_append(entry, epoch, first_seq, last_seq, batch.is_transactional)
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
            StoredBatch(
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
            )
        )
        state.high_watermark = last_offset + 1
        state.size_bytes += batch.size
        appended.add(tp)
        if pid != NO_PRODUCER_ID:
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
    new_states = {tp: working[tp] for tp in appended}
    return CommitPlan(results, new_batches, changed_entries, new_states)
