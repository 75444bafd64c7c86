"""The commit planner: what committing one object's batches does, as a pure function.

A backend loads a snapshot of the partitions and producers a commit touches, calls `plan_commit`,
then stores the plan's mutations in one atomic step. Since the rules run here and only here, every
backend gives the same results for the same operations by construction.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import msgspec

from diskless._types import NO_PRODUCER_ID, ErrorCode, TimestampType, TopicPartition
from diskless.coordinator._api import CommitBatch, CommitBatchResult
from diskless.coordinator._rows import PartitionState, StoredBatch
from diskless.txn import (
    Duplicate,
    ProducerEntry,
    RetainedBatch,
    check_append,
    is_expired,
    last_sequence_of,
    record_append,
)

ProducerKey = tuple[TopicPartition, int]
"""(partition, producer id): the key of a producer entry."""


class CommitPlan(msgspec.Struct):
    """The results of a commit and the mutations that persist it."""

    results: list[CommitBatchResult]
    new_batches: list[StoredBatch]
    """Appended batches, in commit order (hence in offset order within each partition)."""
    producers: dict[ProducerKey, ProducerEntry]
    """Every producer entry the commit changed, in its new state."""
    partitions: dict[TopicPartition, PartitionState]
    """Every partition the commit appended to, in its new state (copies; inputs are untouched)."""


def producer_keys(batches: Sequence[CommitBatch]) -> set[ProducerKey]:
    """The producer entries a backend must load before planning a commit of `batches`."""
    return {(b.topic_partition, b.producer_id) for b in batches if b.producer_id != NO_PRODUCER_ID}


def plan_commit(
    object_key: str,
    batches: Sequence[CommitBatch],
    partitions: Mapping[TopicPartition, PartitionState],
    producers: Mapping[ProducerKey, ProducerEntry],
    now_ms: int,
    producer_id_expiration_ms: int,
) -> CommitPlan:
    """Check and sequence `batches` in order against a snapshot of the state they touch.

    `partitions` holds every existing partition the batches name (absent ones are unknown);
    `producers` holds the stored entry of every key in `producer_keys(batches)` that has one.
    """
    results: list[CommitBatchResult] = []
    new_batches: list[StoredBatch] = []
    working: dict[TopicPartition, PartitionState] = {}
    entries: dict[ProducerKey, ProducerEntry | None] = {}
    changed: set[ProducerKey] = set()
    for batch in batches:
        tp = batch.topic_partition
        state = working.get(tp)
        if state is None:
            original = partitions.get(tp)
            if original is None:
                results.append(
                    CommitBatchResult(
                        ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
                        error_message=f"unknown partition {tp}",
                    )
                )
                continue
            state = working[tp] = msgspec.structs.replace(original)
        log_append = state.config.timestamp_type == TimestampType.LOG_APPEND_TIME
        assert batch.record_count > 0, batch
        pid = batch.producer_id
        entry: ProducerEntry | None = None
        pkey = (tp, pid)
        if pid != NO_PRODUCER_ID:
            if pkey in entries:
                entry = entries[pkey]
            else:
                entry = producers.get(pkey)
                if entry is not None and is_expired(entry, now_ms, producer_id_expiration_ms):
                    entry = None
                entries[pkey] = entry
            last_seq = last_sequence_of(batch.base_sequence, batch.record_count)
            verdict = check_append(
                entry, batch.producer_epoch, batch.base_sequence, last_seq, batch.is_transactional
            )
            if verdict is not None:
                if isinstance(verdict, Duplicate):
                    original_batch = verdict.original
                    results.append(
                        CommitBatchResult(
                            ErrorCode.NONE,
                            base_offset=original_batch.first_offset,
                            log_append_time=original_batch.timestamp if log_append else -1,
                            log_start_offset=state.log_start_offset,
                            duplicate=True,
                        )
                    )
                else:
                    results.append(
                        CommitBatchResult(
                            verdict.error,
                            log_start_offset=state.log_start_offset,
                            error_message=verdict.message,
                        )
                    )
                continue
        base_offset = state.high_watermark
        last_offset = base_offset + batch.record_count - 1
        timestamp = now_ms if log_append else batch.max_timestamp
        running_max = max(state.ts_running_max, timestamp)
        new_batches.append(
            StoredBatch(
                partition_key=state.key,
                base_offset=base_offset,
                last_offset=last_offset,
                object_key=object_key,
                byte_offset=batch.byte_offset,
                size=batch.size,
                max_timestamp=batch.max_timestamp,
                log_append_time=now_ms if log_append else -1,
                timestamp=timestamp,
                ts_running_max=running_max,
                producer_id=pid,
                producer_epoch=batch.producer_epoch,
            )
        )
        state.high_watermark = last_offset + 1
        state.size_bytes += batch.size
        state.ts_running_max = running_max
        if pid != NO_PRODUCER_ID:
            entries[pkey] = record_append(
                entry,
                pid,
                batch.producer_epoch,
                RetainedBatch(batch.base_sequence, last_seq, base_offset, last_offset, timestamp),
                now_ms,
                batch.is_transactional,
            )
            changed.add(pkey)
        results.append(
            CommitBatchResult(
                ErrorCode.NONE,
                base_offset=base_offset,
                log_append_time=now_ms if log_append else -1,
                log_start_offset=state.log_start_offset,
            )
        )
    assert len(results) == len(batches)
    changed_entries: dict[ProducerKey, ProducerEntry] = {}
    for key in changed:
        changed_entry = entries[key]
        assert changed_entry is not None
        changed_entries[key] = changed_entry
    touched = {b.partition_key for b in new_batches}
    return CommitPlan(
        results=results,
        new_batches=new_batches,
        producers=changed_entries,
        partitions={tp: s for tp, s in working.items() if s.key in touched},
    )
