"""A group this process coordinates, whichever protocol it speaks, and what it is to the admin
APIs.

`group_coordinator.GroupCoordinator` keeps one `OwnedGroup` per group its brokers own: the
classic protocol's state machine (`group_state.GroupState`), the consumer protocol's
(`consumer_group_state.ConsumerGroupState`, KIP-848) and the share group's
(`share_group_state.ShareGroupState`, KIP-932) side by side, since a group's id names one group
whichever protocol its members speak, and an empty group may change protocol. A group is of one
protocol at a time: a share group is one that has had a share group epoch (until it is
deleted), with no classic or consumer-protocol members; a consumer-protocol group one that has
had a group epoch and has no classic members; any other is classic. One state is stored per
group (`store_group_state`), a consumer group's or a share group's, and says which it is.

The admin APIs read either through one description (`group_description`), decided here
(`OwnedGroup.describe`): a consumer-protocol group is described as Kafka's `ConsumerGroup`
lists itself (type and protocol type `consumer`, its state under Kafka's name: Empty,
Assigning, Reconciling, Stable), its members with no classic metadata or assignment (those are
ConsumerGroupDescribe's), and the topics its members are subscribed to, by name or through
their resolved regular expressions (what OffsetDelete refuses). A group exists, in either
protocol, while it has members, has completed a rebalance (a stored generation, or a group
epoch) or has committed offsets (`group_description.exists`).
"""

from __future__ import annotations

import asyncio
from typing import TypeVar

from diskless._types import GroupOwnership, GroupRecord
from diskless.kafka_server._coordination.consumer_group_state import (
    ConsumerGroupState,
    Description,
    Snapshot,
)
from diskless.kafka_server._coordination.group_description import (
    CONSUMER_PROTOCOL_TYPE,
    DescribedMember,
    GroupDescription,
    GroupType,
    at_rest,
    dead,
    exists,
)
from diskless.kafka_server._coordination.group_state import (
    GroupState,
    JoinOutcome,
    SyncOutcome,
    Wait,
)
from diskless.kafka_server._coordination.share_group_state import (
    SHARE_PROTOCOL_TYPE,
    ShareDescription,
    ShareGroupState,
    ShareSnapshot,
    decode_group_state,
)

_Outcome = TypeVar("_Outcome", JoinOutcome, SyncOutcome)


class OwnedGroup:
    """A group this process coordinates: its state machines, the broker incarnation that took it
    in which term of its registration, and what carries out the state machines' decisions: the
    requests waiting for their answer, by member id, and the rebalance timer."""

    __slots__ = (
        "consumer",
        "gone",
        "joins",
        "lock",
        "owner",
        "share",
        "state",
        "stored",
        "syncs",
        "term",
        "timer",
    )

    def __init__(
        self,
        state: GroupState,
        owner: GroupOwnership,
        term: int,
        stored: Snapshot | ShareSnapshot | None,
        now: float,
    ) -> None:
        self.state = state
        self.stored = stored
        """The consumer-protocol or share group state stored last: what a step that failed to
        store undoes to."""
        self.consumer = ConsumerGroupState(state.group_id)
        """The group's consumer-protocol state (KIP-848), as stored last by its owners."""
        self.share = ShareGroupState(state.group_id)
        """The group's share group state (KIP-932), as stored last by its owners."""
        self.undo(now)
        self.lock = asyncio.Lock()
        """Consumer-protocol steps, and deletions, take turns, each stored before the next."""
        self.owner = owner
        """The broker incarnation coordinating the group here, with the generation it found."""
        self.term = term
        """The term of the owner's registration in which it took the group over."""
        self.joins: dict[str, asyncio.Future[JoinOutcome]] = {}
        self.syncs: dict[str, asyncio.Future[SyncOutcome]] = {}
        self.timer: asyncio.TimerHandle | None = None
        self.gone = False
        """This process no longer coordinates the group (its steps answer NOT_COORDINATOR)."""

    @property
    def group_id(self) -> str:
        return self.state.group_id

    def consumer_group(self) -> Description | None:
        """The group as ConsumerGroupDescribe shows it; None unless it is a consumer-protocol
        group."""
        if self.state.members or self.consumer.group_epoch == 0:
            return None
        return self.consumer.describe()

    def describe(self, record: GroupRecord | None) -> GroupDescription:
        """The group as the admin APIs see it, Dead if it does not exist. (A generation is
        stored before it is handed out: the stored one is the classic group's.)"""
        generation = 0 if record is None or record.owner is None else record.owner.generation
        has_offsets = record is not None and record.has_offsets
        consumer = self.consumer_group()
        if self.share.exists() and not self.state.members and self.consumer.is_empty():
            described = share_description(self.share.describe())
            generation = max(generation, self.share.group_epoch)
        elif consumer is None:
            described = self.state.describe()
        else:
            described = consumer_description(consumer)
            generation = max(generation, consumer.group_epoch)
        return described if exists(described, generation, has_offsets) else dead(self.group_id)

    def undo(self, now: float) -> None:
        """Take back the consumer-protocol and share group steps since the state stored last."""
        stored = self.stored
        consumer = stored if isinstance(stored, Snapshot) else None
        share = stored if isinstance(stored, ShareSnapshot) else None
        self.consumer = ConsumerGroupState(self.group_id, consumer, now=now)
        self.share = ShareGroupState(self.group_id, share, now=now)

    def fence(self) -> GroupOwnership:
        """The fence of a step of the group's owner that claims no generation."""
        return GroupOwnership(self.owner.broker_id, self.owner.broker_epoch, -1)


def consumer_description(consumer: Description) -> GroupDescription:
    """A consumer-protocol group, as the admin APIs read it (Kafka's `ConsumerGroup`)."""
    members = tuple(
        DescribedMember(
            m.member.member_id,
            m.member.instance_id,
            m.member.client_id,
            m.member.client_host,
            b"",
            b"",
        )
        for m in consumer.members
    )
    topics = frozenset(topic for m in consumer.members for topic in m.member.topics())
    return GroupDescription(
        consumer.group_id,
        GroupType.CONSUMER,
        consumer.state,
        CONSUMER_PROTOCOL_TYPE,
        "",
        members,
        topics,
    )


def share_description(share: ShareDescription) -> GroupDescription:
    """A share group, as the admin APIs read it (Kafka's `ShareGroup`)."""
    members = tuple(
        DescribedMember(m.member_id, None, m.client_id, m.client_host, b"", b"")
        for m in share.members
    )
    topics = frozenset(topic for m in share.members for topic in m.subscribed_topic_names)
    return GroupDescription(
        share.group_id, GroupType.SHARE, share.state, SHARE_PROTOCOL_TYPE, "", members, topics
    )


def at_rest_description(
    group_id: str, record: GroupRecord, stored: bytes | None
) -> GroupDescription:
    """An existing group that no state machine holds here (its owner is gone, or has not served
    it since it took it), from what is stored of it: a consumer-protocol group as its stored
    state describes it, any other empty and classic; Dead if it does not exist."""
    generation = 0 if record.owner is None else record.owner.generation
    described = at_rest(group_id)
    decoded = None if stored is None else decode_group_state(stored)
    if isinstance(decoded, ShareSnapshot) and decoded.group_epoch > 0:
        described = share_description(ShareGroupState(group_id, decoded).describe())
        generation = max(generation, decoded.group_epoch)
    elif isinstance(decoded, Snapshot):
        consumer = ConsumerGroupState(group_id, decoded).describe()
        if consumer.group_epoch > 0:
            described = consumer_description(consumer)
            generation = max(generation, consumer.group_epoch)
    return described if exists(described, generation, record.has_offsets) else dead(group_id)


def same_broker(owner: GroupOwnership, me: GroupOwnership) -> bool:
    return owner.broker_id == me.broker_id and owner.broker_epoch == me.broker_epoch


def answer_waiter(waiter: asyncio.Future[_Outcome] | None, outcome: _Outcome) -> None:
    """Answer a waiting request. One that is gone (cancelled, or never registered) waits for
    nothing: the answer is dropped, and the rest of the step is still carried out, so that no
    other member's request is left unanswered."""
    if waiter is not None and not waiter.done():
        waiter.set_result(outcome)


async def answer_later(
    group: OwnedGroup, waiters: dict[str, asyncio.Future[_Outcome]], wait: Wait
) -> _Outcome:
    """The answer a later step of the group's state machine gives the member's request. A
    request cancelled before (its connection closed) no longer waits."""
    waiter: asyncio.Future[_Outcome] = asyncio.get_running_loop().create_future()
    waiters[wait.member_id] = waiter
    try:
        return await waiter
    except asyncio.CancelledError:
        if waiters.get(wait.member_id) is waiter:
            del waiters[wait.member_id]
            group.state.withdraw(wait.member_id)
        raise
