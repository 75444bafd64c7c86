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
On PostgreSQL the value took a quarter to a third of the time per acquired MB (2 statements a
step against 4 or 5: load the head, load the ranges, delete, insert, update); on SQLite, where
the commit's fsync dominates, they were within 20% of each other, either way from run to run.
The value is rewritten whole by each step, so its cost grows with the ranges in flight, which
`max_record_locks` bounds.

A lock's deadline is on the coordinator's clock, read inside the step: whichever broker runs the
next step of a share-partition finds the locks that ran out and returns their records, so a lock
expires even when the broker that granted it died.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import cast

from diskless._types import ErrorCode, TopicPartition
from diskless.coordinator._engine.base import EngineBase
from diskless.coordinator._rules.share import (
    NEW_STATE,
    AcknowledgeBatch,
    ShareAcknowledge,
    ShareAcquire,
    ShareAcquired,
    ShareAnswer,
    ShareFetchPartition,
    ShareLimits,
    ShareOffset,
    SharePartitionState,
    ShareRelease,
    ShareRequest,
    acknowledge,
    acquire,
    decode_state,
    deleted,
    encode_state,
    initialized,
    next_deadline,
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


class _States:
    """The share-partition states a step works on: decoded once when first needed, changed in
    place by each request in turn, and those changed encoded at the end."""

    def __init__(self, stored: Mapping[ShareKey, bytes]) -> None:
        self.stored = stored
        self.states: dict[ShareKey, SharePartitionState] = {}

    def get(self, key: ShareKey) -> SharePartitionState:
        state = self.states.get(key)
        if state is None:
            state = self.states[key] = _loaded(self.stored, key)
        return state

    def changes(self) -> dict[ShareKey, bytes]:
        kept = {key: s for key, s in self.states.items() if s.initialized or key in self.stored}
        return _changed(self.stored, kept)


def _keys(request: ShareRequest) -> list[ShareKey]:
    if isinstance(request, ShareAcquire):
        return [(request.group_id, p.topic_partition) for p in request.partitions]
    if isinstance(request, ShareAcknowledge):
        return [(request.group_id, tp) for tp in request.acknowledgements]
    return [(request.group_id, tp) for tp in request.partitions]


def _acquired(
    request: ShareAcquire, states: _States, now: int
) -> dict[TopicPartition, ShareAcquired]:
    answers = {}
    for p in request.partitions:
        key = (request.group_id, p.topic_partition)
        state = initialized(states.get(key), p.initial_start)
        got = acquire(
            trimmed(state, p.log_start),
            request.member_id,
            max_records=p.max_records,
            fetchable_end=p.fetchable_end,
            aborted=p.aborted,
            aborted_from=p.aborted_from,
            now_ms=now,
            limits=request.limits,
        )
        states.states[key] = got.state
        deadline = next_deadline(got.state)
        answers[p.topic_partition] = ShareAcquired(
            got.acquired,
            got.state.state_epoch,
            got.state.start,
            got.state.end,
            None if deadline is None else max(0, deadline - now),
        )
    return answers


def _acknowledged(
    request: ShareAcknowledge, states: _States, now: int
) -> dict[TopicPartition, ErrorCode]:
    answers = {}
    epochs = request.state_epochs or {}
    for tp, batches in request.acknowledgements.items():
        key = (request.group_id, tp)
        state = states.get(key)
        epoch = epochs.get(tp)
        if epoch is not None and epoch != state.state_epoch:
            answers[tp] = ErrorCode.FENCED_STATE_EPOCH
            continue
        done = acknowledge(state, request.member_id, batches, now_ms=now, limits=request.limits)
        states.states[key] = done.state
        answers[tp] = done.error
    return answers


def _released(request: ShareRelease, states: _States, now: int) -> None:
    for tp in request.partitions:
        key = (request.group_id, tp)
        state = states.get(key)
        if state.initialized:
            states.states[key] = release_member(
                state, request.member_id, now_ms=now, limits=request.limits
            )


class ShareOperations(EngineBase):
    async def share_steps(self, requests: Sequence[ShareRequest]) -> list[ShareAnswer]:
        needs = Needs(share_partitions=list(dict.fromkeys(k for r in requests for k in _keys(r))))

        async def step(db: StoreStep) -> list[ShareAnswer]:
            now = self._clock.now_ms()
            states = _States((await db.load(needs)).share_states)
            answers: list[ShareAnswer] = []
            for request in requests:
                if isinstance(request, ShareAcquire):
                    answers.append(_acquired(request, states, now))
                elif isinstance(request, ShareAcknowledge):
                    answers.append(_acknowledged(request, states, now))
                else:
                    _released(request, states, now)
                    answers.append(None)
            if changed := states.changes():
                await db.apply(Changes(share_states=changed))
            return answers

        return await self._write(Operation.SHARE_STEPS, step)

    async def acquire_share_records(
        self,
        group_id: str,
        member_id: str,
        partitions: Sequence[ShareFetchPartition],
        limits: ShareLimits,
    ) -> dict[TopicPartition, ShareAcquired]:
        (answer,) = await self.share_steps([ShareAcquire(group_id, member_id, partitions, limits)])
        return cast("dict[TopicPartition, ShareAcquired]", answer)

    async def acknowledge_share_records(
        self,
        group_id: str,
        member_id: str,
        acknowledgements: Mapping[TopicPartition, Sequence[AcknowledgeBatch]],
        limits: ShareLimits,
        state_epochs: Mapping[TopicPartition, int] | None = None,
    ) -> dict[TopicPartition, ErrorCode]:
        request = ShareAcknowledge(group_id, member_id, acknowledgements, limits, state_epochs)
        (answer,) = await self.share_steps([request])
        return cast("dict[TopicPartition, ErrorCode]", answer)

    async def release_share_member(
        self,
        group_id: str,
        member_id: str,
        partitions: Sequence[TopicPartition],
        limits: ShareLimits,
    ) -> None:
        await self.share_steps([ShareRelease(group_id, member_id, partitions, limits)])

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
