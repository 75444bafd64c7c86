"""The group coordinator: one owner per group, recorded in the batch coordinator.

A consumer group has one coordinator at a time, as in Kafka. Which broker incarnation owns a
group lives in the batch coordinator (`BatchCoordinator.claim_group`), so every broker process
agrees on it; the group's membership lives in the owner's memory (`group_state.GroupState`).
- **FindCoordinator** names the owner while its registration is live. Otherwise it claims the
  group for the broker the group's id hashes to among the live brokers; the claim takes effect
  only if the owner's registration is no longer live, so a broker joining the cluster never
  takes a group from a live owner, and two processes can never both own one.
- **Every group request** (JoinGroup, SyncGroup, Heartbeat, LeaveGroup, OffsetCommit,
  OffsetFetch, TxnOffsetCommit) is served only by the owner; any other broker answers
  NOT_COORDINATOR, and the client looks the coordinator up again. The owner serves a group only
  within the term of its own registration in which it took the group
  (`ClusterView.registration_term`): a process paused past its registration, even one that
  renews it afterwards, no longer answers for groups that may have moved meanwhile.
- **Generations outlive owners.** Each rebalance stores the next generation before handing it
  out (`store_group_generation`, refused once the group has moved), and a new owner continues
  from the stored one. Its members, unknown to it, get UNKNOWN_MEMBER_ID and join again.
- **Offsets** are committed by the owner only, fenced in the very step that stores them by the
  owner's epoch and the member's generation (`commit_offsets`, `txn_commit_offsets`): a process
  that lost the group cannot move a committed offset backwards.
- **The admin APIs** read a group, of either protocol, through its description
  (`owned_group.OwnedGroup.describe`, `group_description`): DescribeGroups, DeleteGroups and
  OffsetDelete at the group's owner only, as the other group requests; ListGroups at every
  broker, each listing the groups it coordinates (`lists`; a group it holds no state of is read
  from what is stored of it), so that an admin client that asks every broker and merges their
  answers sees each group once. A deletion is decided on the membership here, then done in one
  step fenced by the owner (its offsets and its stored consumer-protocol state together), so
  that a process that lost the group deletes nothing.
- **The membership decides; this carries it out.** Each step of a group's state machine returns
  its decisions (`group_state.Step`), and `_carry_out` does them in one straight line: it
  answers the requests waiting for them, arms or cancels the group's rebalance timer, and
  stores a generation that is due, then tells the state machine it is stored. The state
  machine never calls back up.
- **Consumer-protocol groups (KIP-848)** are served by the same owner: ConsumerGroupHeartbeat
  and ConsumerGroupDescribe (`consumer_group_state.ConsumerGroupState`), their steps taking
  turns and each stored before it is answered (`consumer_steps`); the owner that takes a group
  over loads its stored state, so members keep their epochs and partitions across an ownership
  move. A group is of one protocol at a time: an empty one may change; a heartbeat to a classic
  group with members gets GROUP_ID_NOT_FOUND, a JoinGroup to a consumer group with members
  INCONSISTENT_GROUP_PROTOCOL (Kafka's answers without online migration).
- **Share groups (KIP-932)** are served by the same owner, the same way (`share_groups`); a
  JoinGroup or a consumer heartbeat to a share group is refused as Kafka refuses it.
A failure of the batch coordinator propagates as `DisklessError`; the handlers answer it with
the library's `group_error` code.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Mapping, Set
from typing import Final

from kio.schema.errors import ErrorCode as WireError

from diskless._types import CommittedOffset, ErrorCode, GroupOwnership, TopicPartition
from diskless.clock import Clock, SystemClock
from diskless.coordinator import BatchCoordinator
from diskless.errors import DisklessError
from diskless.kafka_server._coordination.cluster_view import BrokerAddress, ClusterView
from diskless.kafka_server._coordination.consumer_group_state import (
    DEFAULT_CONFIG,
    ConsumerGroupConfig,
    Description,
    HeartbeatAnswer,
    HeartbeatRequest,
)
from diskless.kafka_server._coordination.consumer_steps import ConsumerConfigOf, ConsumerSteps
from diskless.kafka_server._coordination.group_description import (
    DEAD,
    GroupDescription,
    GroupType,
    delete_group_refusal,
    describe_groups_answer,
    offset_delete_refusal,
    subscribed,
)
from diskless.kafka_server._coordination.group_state import GroupState, JoinOutcome, Step, Wait
from diskless.kafka_server._coordination.member_ids import fresh_member_id
from diskless.kafka_server._coordination.owned_group import (
    OwnedGroup,
    answer_later,
    answer_waiter,
    at_rest_description,
    same_broker,
)
from diskless.kafka_server._coordination.share_group_state import decode_group_state
from diskless.kafka_server._coordination.share_groups import (
    ShareConfigOf,
    ShareGroups,
    default_share_configs,
)
from diskless.kafka_server._protocol.fields import wire

_log = logging.getLogger(__name__)

SESSION_CHECK_INTERVAL_S: Final = 0.5
"""How often members' sessions, and this process's own ownerships, are checked."""


def default_group_configs(group_id: str) -> ConsumerGroupConfig:
    return DEFAULT_CONFIG


class GroupCoordinator:
    """The groups owned by this process's brokers; each call names the broker it came to
    (its id and epoch), which must own the group."""

    def __init__(
        self,
        coordinator: BatchCoordinator,
        view: ClusterView,
        *,
        clock: Clock | None = None,
        group_configs: ConsumerConfigOf = default_group_configs,
        share_configs: ShareConfigOf = default_share_configs,
    ) -> None:
        self._coordinator = coordinator
        self._view = view
        self._clock = clock or SystemClock()
        self._consumers = ConsumerSteps(coordinator, self._clock, group_configs)
        self._groups: dict[str, OwnedGroup] = {}
        self.shares = ShareGroups(coordinator, self._clock, share_configs, self._owned, self._lose)
        """The share groups (KIP-932) among them."""
        self._expiry_task: asyncio.Task[None] | None = None
        self._completions: set[asyncio.Task[None]] = set()

    async def start(self) -> None:
        if self._expiry_task is None:
            self._expiry_task = asyncio.create_task(self._expire_forever())

    async def close(self) -> None:
        task, self._expiry_task = self._expiry_task, None
        if task is not None:
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)
        for group in self._groups.values():
            group.gone = True
            self._carry_out(group, group.state.fail_all(WireError.coordinator_not_available))
        self._groups.clear()
        await asyncio.gather(*self._completions, return_exceptions=True)

    # --- ownership ----------------------------------------------------------------------------
    def group_ids(self) -> list[str]:
        """The groups this process coordinates now (whose lag its metrics report)."""
        return list(self._groups)

    async def locate(self, group_id: str) -> BrokerAddress | None:
        """FindCoordinator: the live owner of the group, claimed for the broker its id hashes
        to when it has none; None when no live broker can take it now (retriable)."""
        stored = await self._coordinator.group_ownership(group_id)
        if stored is not None and self._view.epoch_of(stored.broker_id) == stored.broker_epoch:
            return self._view.get(stored.broker_id)
        preferred = self._view.coordinator_for(group_id)
        epoch = None if preferred is None else self._view.epoch_of(preferred.broker_id)
        if preferred is None or epoch is None:
            return None
        owner = await self._coordinator.claim_group(group_id, preferred.broker_id, epoch)
        if owner is None:
            return None
        if owner != stored:
            _log.info(
                "group %s: coordinated by broker %d (epoch %d) from generation %d",
                group_id,
                owner.broker_id,
                owner.broker_epoch,
                owner.generation,
            )
        return self._view.get(owner.broker_id)

    async def _owned(self, me: GroupOwnership, group_id: str) -> OwnedGroup | WireError:
        """The group's state if broker `me` (id, epoch) coordinates it now, else
        NOT_COORDINATOR. It is taken, and kept, within one term of the broker's registration
        (`ClusterView.registration_term`): once that lapsed, the group may have moved."""
        term = self._view.registration_term(me.broker_id)
        group = self._groups.get(group_id)
        if group is not None and same_broker(group.owner, me) and group.term != term:
            self._lose(group, "its registration lapsed")
            group = None
        if term is None:
            return WireError.not_coordinator
        if group is not None:
            return group if same_broker(group.owner, me) else WireError.not_coordinator
        stored = await self._coordinator.group_ownership(group_id)
        if stored is None or not same_broker(stored, me):
            return WireError.not_coordinator
        encoded = await self._coordinator.group_state(group_id)
        if self._view.registration_term(me.broker_id) != term:  # re-validate after the awaits
            return WireError.not_coordinator
        group = self._groups.get(group_id)
        if group is None:
            state = GroupState(group_id, stored.generation)
            snapshot = None if encoded is None else decode_group_state(encoded)
            now = self._clock.monotonic()
            group = self._groups[group_id] = OwnedGroup(state, stored, term, snapshot, now)
        if not same_broker(group.owner, me) or group.term != term:
            return WireError.not_coordinator
        return group

    def _lose(self, group: OwnedGroup, why: str) -> None:
        """This process no longer coordinates the group: its members look the coordinator up
        again (NOT_COORDINATOR) and join wherever it is now."""
        group_id = group.state.group_id
        if self._groups.get(group_id) is not group:
            return
        _log.warning(
            "group %s: broker %d no longer coordinates it: %s",
            group_id,
            group.owner.broker_id,
            why,
        )
        del self._groups[group_id]
        group.gone = True
        self._carry_out(group, group.state.fail_all(WireError.not_coordinator))

    def refused(self, me: GroupOwnership, group_id: str) -> None:
        """The batch coordinator answered NOT_COORDINATOR to a step of this group's owner."""
        group = self._groups.get(group_id)
        if group is not None and same_broker(group.owner, me):
            self._lose(group, "the batch coordinator refused a step of its owner")

    def forget_broker(self, broker_id: int) -> None:
        """The broker stopped serving (fenced, say): the groups it owned are no longer here."""
        for group in [g for g in self._groups.values() if g.owner.broker_id == broker_id]:
            self._lose(group, f"broker {broker_id} stopped")

    # --- the admin APIs -----------------------------------------------------------------------
    def lists(self, me: GroupOwnership, group_id: str, owner: GroupOwnership | None) -> bool:
        """Whether broker `me` lists the group in ListGroups: its owner while the owner's
        registration is live, else the broker FindCoordinator would give it to (the same rule,
        so that a group is listed once across brokers whose views agree)."""
        if owner is not None and self._view.epoch_of(owner.broker_id) == owner.broker_epoch:
            return same_broker(owner, me)
        preferred = self._view.coordinator_for(group_id)
        return preferred is not None and preferred.broker_id == me.broker_id

    async def listed(self, me: GroupOwnership) -> list[GroupDescription] | WireError:
        """ListGroups at broker `me`: the groups it lists (`lists`) that exist, by group id;
        COORDINATOR_NOT_AVAILABLE (retriable) while its own registration is not live, since
        which groups it coordinates is not known then."""
        term = self._view.registration_term(me.broker_id)
        if term is None:
            return WireError.coordinator_not_available
        listed = []
        for group_id, record in (await self._coordinator.group_records()).items():
            if not self.lists(me, group_id, record.owner):
                continue
            group = self._groups.get(group_id)
            if group is not None and same_broker(group.owner, me) and group.term == term:
                described = group.describe(record)
            else:
                stored = (
                    None if record.owner is None else await self._coordinator.group_state(group_id)
                )
                described = at_rest_description(group_id, record, stored)
            if described.state != DEAD:
                listed.append(described)
        return listed

    async def describe(self, me: GroupOwnership, group_id: str) -> GroupDescription | WireError:
        """DescribeGroups, at the group's owner only (NOT_COORDINATOR elsewhere): a group that
        does not exist, or is not a classic group, is described as Dead, with no members."""
        group = await self._owned(me, group_id)
        if isinstance(group, WireError):
            return group
        records = await self._coordinator.group_records([group_id])
        return describe_groups_answer(group.describe(records.get(group_id)))

    async def delete(self, me: GroupOwnership, group_id: str) -> WireError:
        """DeleteGroups, at the group's owner only: an empty group's committed offsets, its
        stored state and a share group's share-partition states go and its generation starts
        again from 0; it stays coordinated here, and a new group of the same id starts afresh.
        It takes its turn with the group's steps, so that none stores the group after it."""
        group = await self._owned(me, group_id)
        if isinstance(group, WireError):
            return group
        async with group.lock:
            records = await self._coordinator.group_records([group_id])
            if self._groups.get(group_id) is not group:  # re-validate after the await
                return WireError.not_coordinator
            described = group.describe(records.get(group_id))
            refusal = delete_group_refusal(described)
            if refusal is not WireError.none:
                return refusal
            if described.group_type is GroupType.SHARE:  # its records' states first, as Kafka
                await self._coordinator.delete_share_group(group_id)
            error = await self._coordinator.delete_group(group_id, group.fence())
            if error is ErrorCode.NOT_COORDINATOR:
                self.refused(me, group_id)
                return WireError.not_coordinator
            assert error is ErrorCode.NONE, error
            if self._groups.get(group_id) is group:
                if group.state.members:  # joined meanwhile: they join the group anew, wherever
                    self._lose(group, "it was deleted")
                else:
                    del self._groups[group_id]
                    group.gone = True
                    self._carry_out(group, group.state.fail_all(WireError.not_coordinator))
        _log.info("group %s: deleted", group_id)
        return WireError.none

    async def delete_offsets(
        self, me: GroupOwnership, group_id: str, partitions: list[TopicPartition]
    ) -> tuple[WireError, dict[TopicPartition, WireError]]:
        """OffsetDelete, at the group's owner only: the error for the whole group, else each
        partition's (GROUP_SUBSCRIBED_TO_TOPIC while a member is subscribed to its topic; the
        others' offsets go)."""
        group = await self._owned(me, group_id)
        if isinstance(group, WireError):
            return group, {}
        records = await self._coordinator.group_records([group_id])
        if self._groups.get(group_id) is not group:  # re-validate after the await
            return WireError.not_coordinator, {}
        described = group.describe(records.get(group_id))
        refusal = offset_delete_refusal(described)
        if refusal is not WireError.none:
            return refusal, {}
        answers = {
            tp: WireError.group_subscribed_to_topic
            if subscribed(described, tp.topic)
            else WireError.none
            for tp in partitions
        }
        deleted = [tp for tp, answer in answers.items() if answer is WireError.none]
        if deleted:
            error = await self._coordinator.delete_offsets(group_id, deleted, group.fence())
            if error is ErrorCode.NOT_COORDINATOR:
                self.refused(me, group_id)
                return WireError.not_coordinator, {}
            assert error is ErrorCode.NONE, error
        return WireError.none, answers

    # --- membership ---------------------------------------------------------------------------
    async def join(
        self,
        me: GroupOwnership,
        *,
        group_id: str,
        member_id: str,
        instance_id: str | None = None,
        protocol_type: str,
        protocols: list[tuple[str, bytes]],
        session_timeout_ms: int,
        rebalance_timeout_ms: int,
        require_known_member_id: bool = False,
        client_id: str = "",
        client_host: str = "",
    ) -> JoinOutcome:
        """JoinGroup; `require_known_member_id` from v4 on (a client may send its first join
        twice, and each anonymous join would otherwise become a member of its own)."""
        group = await self._owned(me, group_id)
        if isinstance(group, WireError):
            return JoinOutcome(group, member_id=member_id)
        if not group.consumer.is_empty() or group.share.exists():
            return JoinOutcome(WireError.inconsistent_group_protocol, member_id=member_id)
        step = group.state.join(
            member_id=member_id,
            instance_id=instance_id,
            protocol_type=protocol_type,
            protocols=protocols,
            session_timeout_ms=session_timeout_ms,
            rebalance_timeout_ms=rebalance_timeout_ms,
            fresh_member_id="" if member_id else fresh_member_id(client_id, instance_id),
            require_known_member_id=require_known_member_id,
            now=self._clock.monotonic(),
            client_id=client_id,
            client_host=client_host,
        )
        self._carry_out(group, step)
        if isinstance(step.response, Wait):
            return await answer_later(group, group.joins, step.response)
        return step.response

    async def sync(
        self,
        me: GroupOwnership,
        group_id: str,
        generation: int,
        member_id: str,
        assignments: Mapping[str, bytes],
        instance_id: str | None = None,
    ) -> tuple[WireError, bytes]:
        group = await self._owned(me, group_id)
        if isinstance(group, WireError):
            return group, b""
        step = group.state.sync(
            generation, member_id, instance_id, assignments, now=self._clock.monotonic()
        )
        self._carry_out(group, step)
        if isinstance(step.response, Wait):
            return await answer_later(group, group.syncs, step.response)
        return step.response

    async def heartbeat(
        self,
        me: GroupOwnership,
        group_id: str,
        generation: int,
        member_id: str,
        instance_id: str | None = None,
    ) -> WireError:
        group = await self._owned(me, group_id)
        if isinstance(group, WireError):
            return group
        return group.state.heartbeat(
            generation, member_id, instance_id, now=self._clock.monotonic()
        )

    async def leave(
        self, me: GroupOwnership, group_id: str, member_id: str, instance_id: str | None = None
    ) -> WireError:
        group = await self._owned(me, group_id)
        if isinstance(group, WireError):
            return group
        step = group.state.leave(member_id, instance_id)
        self._carry_out(group, step)
        return step.response

    async def _expire_forever(self) -> None:
        while True:
            await self._clock.sleep(SESSION_CHECK_INTERVAL_S)
            for group in list(self._groups.values()):
                if self._view.registration_term(group.owner.broker_id) != group.term:
                    self._lose(group, "its registration lapsed")
                    continue
                self._carry_out(group, group.state.expire(self._clock.monotonic()))
                try:
                    error = await self._consumers.expire(group)
                except DisklessError as e:
                    _log.debug("group %s: storing its expiry failed: %r", group.group_id, e)
                    continue
                if error is WireError.not_coordinator:
                    self._lose(group, "storing its state answered NOT_COORDINATOR")
                    continue
                await self.shares.expire(group)

    # --- carrying out the decisions -----------------------------------------------------------
    def _carry_out(self, group: OwnedGroup, step: Step[object]) -> None:
        """Do what a step of the group's state machine decided, in one straight line: answer
        the requests it answers, arm or cancel the rebalance timer, and start storing the
        generation that is due (the request's own answer is the caller's)."""
        for outcome in step.joins:
            answer_waiter(group.joins.pop(outcome.member_id, None), outcome)
        for member_id, answer in step.syncs:
            answer_waiter(group.syncs.pop(member_id, None), answer)
        if step.disarm or step.arm_ms is not None:
            if group.timer is not None:
                group.timer.cancel()
                group.timer = None
            if step.arm_ms is not None:
                loop = asyncio.get_running_loop()
                group.timer = loop.call_later(step.arm_ms / 1000, self._rebalance_due, group)
        if step.store_generation is not None:
            stored = self._store_generation(group, step.store_generation)
            task = asyncio.get_running_loop().create_task(stored)
            self._completions.add(task)
            task.add_done_callback(self._completions.discard)

    def _rebalance_due(self, group: OwnedGroup) -> None:
        group.timer = None
        self._carry_out(group, group.state.rebalance_due())

    async def _store_generation(self, group: OwnedGroup, generation: int) -> None:
        """A generation is due: it is stored first, so that it survives this process and no
        later owner hands out the same one; then the state machine hands it out."""
        group_id, owner = group.state.group_id, group.owner
        try:
            error = await self._coordinator.store_group_generation(
                group_id, GroupOwnership(owner.broker_id, owner.broker_epoch, generation)
            )
        except DisklessError as e:
            _log.debug("group %s: storing generation %d failed: %r", group_id, generation, e)
            step = group.state.generation_not_stored(WireError.coordinator_not_available)
        else:
            if error is not ErrorCode.NONE:
                self._lose(group, f"storing generation {generation} answered {error.name}")
                return
            step = group.state.generation_stored(generation)
        self._carry_out(group, step)

    # --- offsets ------------------------------------------------------------------------------
    async def commit_offsets(
        self,
        me: GroupOwnership,
        group_id: str,
        generation: int,
        member_id: str,
        offsets: Mapping[TopicPartition, CommittedOffset],
        instance_id: str | None = None,
    ) -> dict[TopicPartition, WireError]:
        """OffsetCommit: the answer per partition (UNKNOWN_TOPIC_OR_PARTITION for a partition
        that does not exist); raises `DisklessError` when the batch coordinator fails."""
        group = await self._owned(me, group_id)
        if isinstance(group, WireError):
            return dict.fromkeys(offsets, group)
        now = self._clock.monotonic()
        if not group.consumer.is_empty():  # a member epoch, not a generation
            error = group.consumer.check_commit(generation, member_id, now=now)
            generation = -1
        else:
            error = group.state.check_member(generation, member_id, instance_id, now=now)
        if error is not WireError.none:
            return dict.fromkeys(offsets, error)
        if not offsets:
            return {}
        claimed = group.state.generation if generation >= 0 else -1
        fence = GroupOwnership(group.owner.broker_id, group.owner.broker_epoch, claimed)
        codes = await self._coordinator.commit_offsets(group_id, offsets, fence)
        answers = {tp: wire(codes[tp]) for tp in offsets}
        if WireError.not_coordinator in answers.values():
            self.refused(me, group_id)
        return answers

    async def committed_offsets(
        self, me: GroupOwnership, group_id: str
    ) -> tuple[WireError, dict[TopicPartition, CommittedOffset]]:
        """OffsetFetch, from the group's coordinator only: its offsets, as every broker
        process sees them."""
        group = await self._owned(me, group_id)
        if isinstance(group, WireError):
            return group, {}
        return WireError.none, await self._coordinator.fetch_offsets(group_id)

    async def txn_fence(
        self,
        me: GroupOwnership,
        group_id: str,
        generation: int,
        member_id: str,
        instance_id: str | None = None,
    ) -> GroupOwnership | WireError:
        """TxnOffsetCommit's checks at the group's coordinator (KIP-447): the fence its
        offsets are staged under, or the error to answer."""
        group = await self._owned(me, group_id)
        if isinstance(group, WireError):
            return group
        now = self._clock.monotonic()
        if not group.consumer.is_empty():  # a member epoch, not a generation
            error = WireError.none
            if member_id or generation >= 0:  # older versions name no member
                error = group.consumer.check_commit(generation, member_id, now=now)
            generation = -1
        else:
            error = group.state.check_member(
                generation, member_id, instance_id, now=now, transactional=True
            )
        if error is not WireError.none:
            return error
        claimed = group.state.generation if generation >= 0 else -1
        return GroupOwnership(group.owner.broker_id, group.owner.broker_epoch, claimed)

    # --- the consumer group protocol (KIP-848) ------------------------------------------------
    async def consumer_heartbeat(
        self,
        me: GroupOwnership,
        group_id: str,
        request: HeartbeatRequest,
        *,
        topics: Mapping[str, int],
        describable: Set[str],
    ) -> HeartbeatAnswer:
        """ConsumerGroupHeartbeat (`consumer_steps`). `topics`: every topic's partition count;
        `describable`: the topics a regular expression may match."""
        group = await self._owned(me, group_id)
        if isinstance(group, WireError):
            return HeartbeatAnswer(group)
        answered = await self._consumers.heartbeat(
            group, request, topics=topics, describable=describable
        )
        if answered.error is WireError.not_coordinator:
            self._lose(group, "storing its state answered NOT_COORDINATOR")
        return answered

    async def consumer_describe(
        self, me: GroupOwnership, group_id: str
    ) -> Description | GroupDescription | WireError:
        """ConsumerGroupDescribe: the consumer-protocol group, else the group as the admin APIs
        see it (Dead, or classic): its answer is GROUP_ID_NOT_FOUND."""
        group = await self._owned(me, group_id)
        if isinstance(group, WireError):
            return group
        described = group.consumer_group()
        if described is not None:
            return described
        records = await self._coordinator.group_records([group_id])
        return group.describe(records.get(group_id))

    def consumer_group(self, group_id: str) -> Description | None:
        """The consumer-protocol group as this process coordinates it (None: not a consumer
        group here)."""
        group = self._groups.get(group_id)
        return None if group is None else group.consumer_group()
