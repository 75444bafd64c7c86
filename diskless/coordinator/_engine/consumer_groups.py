"""The engine's consumer groups: who coordinates each group, and its committed offsets.

Kafka keeps both in `__consumer_offsets`, whose partition leader is the group's coordinator.
Here the batch coordinator keeps them, so that every broker process sees one owner per group
(`_rules.ownership`): membership lives in the owner's memory, and the owner's epoch and the
group's generation fence every offset commit in the same step that stores it. A consumer-protocol
group (KIP-848) stores its whole state too, fenced alike, whenever it changes. A process that
lost a group learns it here (NOT_COORDINATOR), never from a clock of its own. The deletions
of DeleteGroups (its offsets, its generation and its stored state together; it keeps its
coordinator, as a Kafka group keeps the partition of `__consumer_offsets` its id hashes to) and
OffsetDelete are fenced by the owner the same way; whether a group may be deleted (its members,
its subscriptions) is the owner's to decide, from its membership.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Final

from diskless._types import CommittedOffset, ErrorCode, GroupOwnership, GroupRecord, TopicPartition
from diskless.coordinator._engine.base import EngineBase
from diskless.coordinator._rules.ownership import check_group_fence, group_owner_after_claim
from diskless.coordinator._store import Changes, Needs, Operation, StoreStep

GROUP_STATE_BYTES_MAX: Final = 4 << 20
"""The largest state a consumer-protocol group may store: some thousands of members."""


class GroupOperations(EngineBase):
    async def claim_group(
        self, group_id: str, broker_id: int, broker_epoch: int
    ) -> GroupOwnership | None:
        needs = Needs(groups=(group_id,))

        async def claim(db: StoreStep) -> GroupOwnership | None:
            now = self._clock.now_ms()
            current = (await db.load(needs)).groups.get(group_id)
            brokers = {broker_id} if current is None else {broker_id, current.broker_id}
            loaded = await db.load(Needs(broker_registrations=brokers))
            registrations = loaded.broker_registrations
            owner = group_owner_after_claim(current, registrations, broker_id, broker_epoch, now)
            if owner is not None and owner != current:
                await db.apply(Changes(groups={group_id: owner}))
            return owner

        return await self._write(Operation.CLAIM_GROUP, claim)

    async def group_ownership(self, group_id: str) -> GroupOwnership | None:
        return await self._read(lambda view: view.group_ownership(group_id))

    async def store_group_generation(self, group_id: str, owner: GroupOwnership) -> ErrorCode:
        needs = Needs(groups=(group_id,))

        async def store(db: StoreStep) -> ErrorCode:
            stored = (await db.load(needs)).groups.get(group_id)
            fence = GroupOwnership(owner.broker_id, owner.broker_epoch, -1)
            error = check_group_fence(stored, fence)
            if error is ErrorCode.NONE:
                assert stored is not None
                if owner.generation <= stored.generation:
                    return ErrorCode.ILLEGAL_GENERATION
                await db.apply(Changes(groups={group_id: owner}))
            return error

        return await self._write(Operation.STORE_GROUP_GENERATION, store)

    async def store_group_state(
        self, group_id: str, owner: GroupOwnership, state: bytes
    ) -> ErrorCode:
        if len(state) > GROUP_STATE_BYTES_MAX:
            return ErrorCode.MESSAGE_TOO_LARGE
        needs = Needs(groups=(group_id,))
        fence = GroupOwnership(owner.broker_id, owner.broker_epoch, -1)

        async def store(db: StoreStep) -> ErrorCode:
            error = check_group_fence((await db.load(needs)).groups.get(group_id), fence)
            if error is ErrorCode.NONE:
                await db.apply(Changes(group_states={group_id: state}))
            return error

        return await self._write(Operation.STORE_GROUP_STATE, store)

    async def group_state(self, group_id: str) -> bytes | None:
        return await self._read(lambda view: view.group_state(group_id))

    async def commit_offsets(
        self,
        group_id: str,
        offsets: Mapping[TopicPartition, CommittedOffset],
        fence: GroupOwnership | None = None,
    ) -> dict[TopicPartition, ErrorCode]:
        needs = Needs(partitions=set(offsets), groups=(group_id,) if fence is not None else ())

        async def commit(db: StoreStep) -> dict[TopicPartition, ErrorCode]:
            snapshot = await db.load(needs)
            if fence is not None:
                error = check_group_fence(snapshot.groups.get(group_id), fence)
                if error is not ErrorCode.NONE:
                    return dict.fromkeys(offsets, error)
            known = snapshot.partitions
            stored = {(group_id, tp): value for tp, value in offsets.items() if tp in known}
            await db.apply(Changes(group_offsets=stored))
            return {
                tp: ErrorCode.NONE if tp in known else ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
                for tp in offsets
            }

        return await self._write(Operation.COMMIT_OFFSETS, commit)

    async def fetch_offsets(self, group_id: str) -> dict[TopicPartition, CommittedOffset]:
        return await self._read(lambda view: view.group_offsets(group_id))

    async def group_records(self, group_ids: Sequence[str] | None = None) -> dict[str, GroupRecord]:
        named = None if group_ids is None else list(group_ids)
        return await self._read(lambda view: view.group_records(named))

    async def delete_offsets(
        self, group_id: str, partitions: Sequence[TopicPartition], fence: GroupOwnership
    ) -> ErrorCode:
        needs = Needs(groups=(group_id,))
        gone = [(group_id, tp) for tp in dict.fromkeys(partitions)]

        async def delete(db: StoreStep) -> ErrorCode:
            stored = (await db.load(needs)).groups.get(group_id)
            error = check_group_fence(stored, fence._replace(generation=-1))
            if error is ErrorCode.NONE and gone:
                await db.apply(Changes(group_offsets_deleted=gone))
            return error

        return await self._write(Operation.DELETE_OFFSETS, delete)

    async def delete_group(self, group_id: str, fence: GroupOwnership) -> ErrorCode:
        needs = Needs(groups=(group_id,))

        async def delete(db: StoreStep) -> ErrorCode:
            stored = (await db.load(needs)).groups.get(group_id)
            error = check_group_fence(stored, fence._replace(generation=-1))
            if error is ErrorCode.NONE:
                assert stored is not None
                restarted = {group_id: stored._replace(generation=0)}
                cleared = (group_id,)
                await db.apply(
                    Changes(
                        groups=restarted,
                        group_states_deleted=cleared,
                        group_offsets_cleared=cleared,
                    )
                )
            return error

        return await self._write(Operation.DELETE_GROUP, delete)
