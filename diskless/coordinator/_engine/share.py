"""The engine's share-partitions (KIP-932): every broker acquires and acknowledges any of them.

A share-partition's state is one value (`_rules.share.SharePartitionState`) per share group and
partition, which each step loads, decides on with the rules and stores again, in one atomic unit:
two brokers acquiring from the same share-partition queue behind each other, and neither can
hand out a record the other holds. A step touches only the share-partitions it names (not the
partitions themselves: what it needs of them, their end and log start, the caller read and passes
in, as a committed read that may lag but never leads), so acquisitions never wait on produce
commits. Every partition of a request is decided in the same step, as a commit carries every
batch of its object.

Why one value and not one row per range: `benchmarks/bench_share_state` (three members taking
turns, half a MB acquired per step, one record in fifty released) measured both on the same rules.
On PostgreSQL the value took a third of the time per acquired MB (2 statements a step against 4
or 5: load the head, load the ranges, delete, insert, update); on SQLite, where the commit's
fsync dominates, they were within 10% of each other. The value is rewritten whole by each step,
so its cost grows with the ranges in flight, which `max_record_locks` bounds.

A lock's deadline is on the coordinator's clock, read inside the step: whichever broker runs the
next step of a share-partition finds the locks that ran out and returns their records, so a lock
expires even when the broker that granted it died.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from diskless._types import ErrorCode, TopicPartition
from diskless.coordinator._engine.base import EngineBase
from diskless.coordinator._rules.share import (
    NEW_STATE,
    AcknowledgeBatch,
    ShareAcquired,
    ShareFetchPartition,
    ShareLimits,
    ShareOffset,
    SharePartitionState,
    acknowledge,
    acquire,
    decode_state,
    deleted,
    encode_state,
    initialized,
    release_member,
    restarted,
    trimmed,
)
from diskless.coordinator._store import Changes, Needs, Operation, StoreStep

ShareKey = tuple[str, TopicPartition]


def _loaded(stored: Mapping[ShareKey, bytes], key: ShareKey) -> SharePartitionState:
    blob = stored.get(key)
    return NEW_STATE if blob is None else decode_state(blob)


def _changed(
    before: Mapping[ShareKey, bytes], after: Mapping[ShareKey, SharePartitionState]
) -> dict[ShareKey, bytes]:
    """The states a step changed, encoded (an unchanged one is not written again)."""
    out = {}
    for key, state in after.items():
        blob = encode_state(state)
        if before.get(key) != blob:
            out[key] = blob
    return out


class ShareOperations(EngineBase):
    async def acquire_share_records(
        self,
        group_id: str,
        member_id: str,
        partitions: Sequence[ShareFetchPartition],
        limits: ShareLimits,
    ) -> dict[TopicPartition, ShareAcquired]:
        wanted = {p.topic_partition: p for p in partitions}
        needs = Needs(share_partitions=[(group_id, tp) for tp in wanted])

        async def step(db: StoreStep) -> dict[TopicPartition, ShareAcquired]:
            now = self._clock.now_ms()
            stored = (await db.load(needs)).share_states
            after: dict[ShareKey, SharePartitionState] = {}
            answers = {}
            for tp, p in wanted.items():
                key = (group_id, tp)
                state = initialized(_loaded(stored, key), p.initial_start)
                state = trimmed(state, p.log_start)
                got = acquire(
                    state,
                    member_id,
                    max_records=p.max_records,
                    fetchable_end=p.fetchable_end,
                    aborted=p.aborted,
                    now_ms=now,
                    limits=limits,
                )
                after[key] = got.state
                answers[tp] = ShareAcquired(got.acquired, got.state.state_epoch, got.state.start)
            if changed := _changed(stored, after):
                await db.apply(Changes(share_states=changed))
            return answers

        return await self._write(Operation.SHARE_ACQUIRE, step)

    async def acknowledge_share_records(
        self,
        group_id: str,
        member_id: str,
        acknowledgements: Mapping[TopicPartition, Sequence[AcknowledgeBatch]],
        limits: ShareLimits,
        state_epochs: Mapping[TopicPartition, int] | None = None,
    ) -> dict[TopicPartition, ErrorCode]:
        needs = Needs(share_partitions=[(group_id, tp) for tp in acknowledgements])
        epochs = state_epochs or {}

        async def step(db: StoreStep) -> dict[TopicPartition, ErrorCode]:
            now = self._clock.now_ms()
            stored = (await db.load(needs)).share_states
            after: dict[ShareKey, SharePartitionState] = {}
            answers = {}
            for tp, batches in acknowledgements.items():
                key = (group_id, tp)
                state = _loaded(stored, key)
                epoch = epochs.get(tp)
                if epoch is not None and epoch != state.state_epoch:
                    answers[tp] = ErrorCode.FENCED_STATE_EPOCH
                    continue
                done = acknowledge(state, member_id, batches, now_ms=now, limits=limits)
                if state.initialized:
                    after[key] = done.state
                answers[tp] = done.error
            if changed := _changed(stored, after):
                await db.apply(Changes(share_states=changed))
            return answers

        return await self._write(Operation.SHARE_ACKNOWLEDGE, step)

    async def release_share_member(
        self,
        group_id: str,
        member_id: str,
        partitions: Sequence[TopicPartition],
        limits: ShareLimits,
    ) -> None:
        needs = Needs(share_partitions=[(group_id, tp) for tp in dict.fromkeys(partitions)])

        async def step(db: StoreStep) -> None:
            now = self._clock.now_ms()
            stored = (await db.load(needs)).share_states
            after = {
                key: release_member(decode_state(blob), member_id, now_ms=now, limits=limits)
                for key, blob in stored.items()
            }
            if changed := _changed(stored, after):
                await db.apply(Changes(share_states=changed))

        await self._write(Operation.SHARE_RELEASE, step)

    async def share_offsets(
        self, group_id: str, partitions: Sequence[TopicPartition] | None = None
    ) -> dict[TopicPartition, ShareOffset]:
        states = await self.share_partition_states(group_id, partitions)
        return {tp: ShareOffset(s.start, s.state_epoch) for tp, s in states.items()}

    async def share_partition_states(
        self, group_id: str, partitions: Sequence[TopicPartition] | None = None
    ) -> dict[TopicPartition, SharePartitionState]:
        named = None if partitions is None else list(partitions)
        stored = await self._read(lambda view: view.share_states(group_id, named))
        return {tp: decode_state(blob) for tp, blob in stored.items()}

    async def alter_share_offsets(
        self, group_id: str, offsets: Mapping[TopicPartition, int]
    ) -> dict[TopicPartition, ErrorCode]:
        return await self._restart(Operation.SHARE_ALTER_OFFSETS, group_id, offsets)

    async def delete_share_offsets(
        self, group_id: str, partitions: Sequence[TopicPartition]
    ) -> dict[TopicPartition, ErrorCode]:
        return await self._restart(
            Operation.SHARE_DELETE_OFFSETS, group_id, dict.fromkeys(partitions)
        )

    async def _restart(
        self, operation: Operation, group_id: str, offsets: Mapping[TopicPartition, int | None]
    ) -> dict[TopicPartition, ErrorCode]:
        """Each share-partition starts over at its offset (None: with no state), in a new state
        epoch; a partition that does not exist answers UNKNOWN_TOPIC_OR_PARTITION."""
        needs = Needs(partitions=list(offsets), share_partitions=[(group_id, tp) for tp in offsets])

        async def step(db: StoreStep) -> dict[TopicPartition, ErrorCode]:
            snapshot = await db.load(needs)
            stored = snapshot.share_states
            after = {}
            answers = {}
            for tp, offset in offsets.items():
                if tp not in snapshot.partitions:
                    answers[tp] = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
                    continue
                if offset is not None and offset < 0:
                    answers[tp] = ErrorCode.INVALID_REQUEST
                    continue
                key = (group_id, tp)
                state = _loaded(stored, key)
                after[key] = deleted(state) if offset is None else restarted(state, offset)
                answers[tp] = ErrorCode.NONE
            if changed := _changed(stored, after):
                await db.apply(Changes(share_states=changed))
            return answers

        return await self._write(operation, step)

    async def delete_share_group(self, group_id: str) -> None:
        async def step(db: StoreStep) -> None:
            await db.apply(Changes(share_groups_deleted=(group_id,)))

        await self._write(Operation.SHARE_DELETE_GROUP, step)
