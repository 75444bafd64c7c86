"""One share group (KIP-932) in the process that coordinates it, as a state machine that returns
its decisions.

ShareGroupHeartbeat and ShareGroupDescribe. As `consumer_group_state.ConsumerGroupState` for
KIP-848, nothing here reads or writes the batch coordinator, waits, keeps a timer or knows who
owns it. Each step returns its answer and, when it changed what must survive this process, the
group's new state to store (`ShareStep.store`), which the owner stores (fenced by its ownership)
before it answers; and the members that left or were removed (`ShareStep.departed`), whose
share sessions release what they hold.

The rules are Kafka's (`GroupMetadataManager.shareGroupHeartbeat`):
- **Epochs.** The group epoch is bumped when a member joins or leaves, a subscription changes,
  or a subscribed topic's partition count changes; the target assignment is then computed again
  by the `simple` assignor (`share_assignor`) and takes the group epoch as its own.
- **No revocation.** A share member owns no partition (records are acquired one at a time), so
  a member moves to its target at once, in its next heartbeat: its epoch becomes the target's
  and its assignment the target's, sent when it changed (or when the member joins).
- **Fencing.** A heartbeat of an unknown member: UNKNOWN_MEMBER_ID. An epoch other than the
  member's: FENCED_MEMBER_EPOCH, unless it is the member's previous one (the answer that gave it
  the new one was lost). Epoch 0 (re)joins, a known member id included (a fenced member rejoins
  so). A new member beyond `group.share.max.size`: GROUP_MAX_SIZE_REACHED.
- **Leaving.** Epoch -1 leaves. A member not heard from within `share.session.timeout.ms` is
  removed.
- **State.** Kafka's `ShareGroupState`: Empty without members, else Stable (the target never
  waits for anyone).
Times (`now`) are seconds of a monotonic clock; sessions are not stored: a new owner starts
them afresh when it loads the group.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Final

import msgspec
from kio.schema.errors import ErrorCode as WireError

from diskless._types import TopicPartition
from diskless.kafka_server._coordination.consumer_group_state import (
    HeartbeatAnswer,
    Snapshot,
    decode_snapshot,
)
from diskless.kafka_server._coordination.share_assignor import SIMPLE, simple

_log = logging.getLogger(__name__)

LEAVE_EPOCH: Final = -1
JOIN_EPOCH: Final = 0
SHARE_MAX_SIZE: Final = 200
"""Kafka's default `group.share.max.size`."""
SHARE_PROTOCOL_TYPE: Final = "share"
"""The protocol type ListGroups and DescribeGroups give a share group."""
_MARK: Final = b"S"
"""The first byte of a stored share group state: a consumer group's (a msgpack map) never has
it, so one group's stored value says which kind of group it is."""


class ShareGroupConfig(msgspec.Struct, frozen=True):
    """A share group's settings, with Kafka's defaults (`group.share.session.timeout.ms`,
    `group.share.heartbeat.interval.ms`, `group.share.max.size`); a group's own
    `share.session.timeout.ms` and `share.heartbeat.interval.ms` override the first two."""

    session_timeout_ms: int = 45_000
    heartbeat_interval_ms: int = 5_000
    max_size: int = SHARE_MAX_SIZE


DEFAULT_SHARE_CONFIG: Final = ShareGroupConfig()


class ShareMember(msgspec.Struct):
    """A member, as stored: its epochs, subscription and partitions."""

    member_id: str
    member_epoch: int = 0
    previous_member_epoch: int = 0
    rack_id: str | None = None
    client_id: str = ""
    client_host: str = ""
    subscribed_topic_names: tuple[str, ...] = ()
    assigned: tuple[TopicPartition, ...] = ()
    """The partitions it may fetch from, sorted."""


class ShareSnapshot(msgspec.Struct, frozen=True):
    """What survives the owner: the whole state of the share group, stored as one value."""

    group_epoch: int
    assignment_epoch: int
    members: tuple[ShareMember, ...]
    target: tuple[tuple[str, tuple[TopicPartition, ...]], ...]
    partition_counts: tuple[tuple[str, int], ...]


_encoder: Final = msgspec.msgpack.Encoder()
_decoder: Final = msgspec.msgpack.Decoder(ShareSnapshot)


def encode_share_snapshot(snapshot: ShareSnapshot) -> bytes:
    return _MARK + _encoder.encode(snapshot)


def decode_group_state(data: bytes) -> Snapshot | ShareSnapshot:
    """A group's stored state, whichever kind of group stored it."""
    if data[:1] == _MARK:
        return _decoder.decode(data[1:])
    return decode_snapshot(data)


class ShareHeartbeatRequest(msgspec.Struct, frozen=True):
    """A ShareGroupHeartbeat. None: unchanged since the member's last heartbeat."""

    member_id: str
    member_epoch: int
    rack_id: str | None = None
    subscribed_topic_names: tuple[str, ...] | None = None
    client_id: str = ""
    client_host: str = ""


ShareHeartbeatAnswer = HeartbeatAnswer
"""A share member's answer is a consumer member's: its `assignment`, the partitions it may fetch
from (None when unchanged since its last answer)."""


@dataclass(frozen=True, slots=True)
class ShareStep:
    """An answer, the group's new state for its owner to store before sending it (None:
    nothing that must survive changed), and the members that left or were removed."""

    answer: ShareHeartbeatAnswer | None = None
    store: ShareSnapshot | None = None
    departed: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class ShareDescription:
    """What ShareGroupDescribe, and the admin APIs, say of the group."""

    group_id: str
    state: str
    group_epoch: int
    assignment_epoch: int
    members: tuple[ShareMember, ...]
    assignor: str = SIMPLE


def _invalid(message: str) -> ShareHeartbeatAnswer:
    return ShareHeartbeatAnswer(WireError.invalid_request, message=message)


def _sorted(partitions: Iterable[TopicPartition]) -> tuple[TopicPartition, ...]:
    return tuple(sorted(partitions))


class ShareGroupState:
    """The members, epochs and target assignment of one share group."""

    def __init__(
        self, group_id: str, snapshot: ShareSnapshot | None = None, *, now: float = 0
    ) -> None:
        self.group_id = group_id
        self.group_epoch = 0
        self.assignment_epoch = 0
        self.members: dict[str, ShareMember] = {}
        self.target: dict[str, frozenset[TopicPartition]] = {}
        self.partition_counts: dict[str, int] = {}
        self._seen: dict[str, float] = {}
        """Member id -> when it was last heard from (its session)."""
        if snapshot is not None:
            self.group_epoch = snapshot.group_epoch
            self.assignment_epoch = snapshot.assignment_epoch
            self.members = {m.member_id: m for m in snapshot.members}
            self.target = {member: frozenset(tps) for member, tps in snapshot.target}
            self.partition_counts = dict(snapshot.partition_counts)
            self._seen = dict.fromkeys(self.members, now)  # a new owner starts sessions afresh
        self._stored = self.snapshot()

    # --- what is stored and described ---------------------------------------------------------
    def snapshot(self) -> ShareSnapshot:
        return ShareSnapshot(
            self.group_epoch,
            self.assignment_epoch,
            tuple(msgspec.structs.replace(self.members[m]) for m in sorted(self.members)),
            tuple((member, _sorted(tps)) for member, tps in sorted(self.target.items())),
            tuple(sorted(self.partition_counts.items())),
        )

    def _step(
        self, answer: ShareHeartbeatAnswer | None, departed: tuple[str, ...] = ()
    ) -> ShareStep:
        snapshot = self.snapshot()
        if snapshot == self._stored:
            return ShareStep(answer, None, departed)
        self._stored = snapshot
        return ShareStep(answer, snapshot, departed)

    def exists(self) -> bool:
        """Whether the group is a share group: one member joined it once (and it was not
        deleted since)."""
        return self.group_epoch > 0

    def is_empty(self) -> bool:
        return not self.members

    def state_name(self) -> str:
        return "Stable" if self.members else "Empty"

    def describe(self) -> ShareDescription:
        members = tuple(msgspec.structs.replace(self.members[m]) for m in sorted(self.members))
        return ShareDescription(
            self.group_id, self.state_name(), self.group_epoch, self.assignment_epoch, members
        )

    def assignment(self, member_id: str) -> frozenset[TopicPartition] | None:
        """The partitions the member may fetch from now; None when it is not a member."""
        member = self.members.get(member_id)
        return None if member is None else frozenset(member.assigned)

    # --- heartbeat ----------------------------------------------------------------------------
    def heartbeat(
        self,
        request: ShareHeartbeatRequest,
        *,
        topics: Mapping[str, int],
        config: ShareGroupConfig,
        now: float,
    ) -> ShareStep:
        """ShareGroupHeartbeat. `topics`: the partition count of every topic."""
        invalid = _validate(request)
        if invalid is not None:
            return ShareStep(invalid)
        if request.member_epoch == LEAVE_EPOCH:
            return self._leave(request)
        member = self.members.get(request.member_id)
        joined = False
        if member is None:
            if request.member_epoch != JOIN_EPOCH:
                message = (
                    f"Member {request.member_id} is not a member of share group {self.group_id}."
                )
                return ShareStep(ShareHeartbeatAnswer(WireError.unknown_member_id, message=message))
            if len(self.members) >= config.max_size:
                size = config.max_size
                message = f"The share group has reached its maximum capacity of {size} members."
                return ShareStep(
                    ShareHeartbeatAnswer(WireError.group_max_size_reached, message=message)
                )
            member = self.members[request.member_id] = ShareMember(request.member_id)
            joined = True
            _log.info("share group %s: member %s joined", self.group_id, member.member_id)
        elif request.member_epoch not in (
            JOIN_EPOCH,
            member.member_epoch,
            member.previous_member_epoch,
        ):
            return ShareStep(_fenced(request.member_epoch, member.member_epoch))
        self._seen[member.member_id] = now
        before = member.assigned
        changed = joined
        member.client_id, member.client_host = request.client_id, request.client_host
        if request.rack_id is not None:
            member.rack_id = request.rack_id
        if request.subscribed_topic_names is not None:
            names = tuple(sorted(set(request.subscribed_topic_names)))
            changed |= names != member.subscribed_topic_names
            member.subscribed_topic_names = names
        counts = {
            t: topics[t]
            for m in self.members.values()
            for t in m.subscribed_topic_names
            if t in topics
        }
        if counts != self.partition_counts:
            self.partition_counts = counts
            changed = True
        if changed:
            self.group_epoch += 1
        if self.group_epoch > self.assignment_epoch:
            self._compute_target()
        target = _sorted(self.target.get(member.member_id, ()))
        if member.member_epoch != self.assignment_epoch or member.assigned != target:
            member.previous_member_epoch = member.member_epoch
            member.member_epoch = self.assignment_epoch
            member.assigned = target
        send = request.member_epoch == JOIN_EPOCH or member.assigned != before
        answer = ShareHeartbeatAnswer(
            WireError.none,
            member.member_id,
            member.member_epoch,
            config.heartbeat_interval_ms,
            frozenset(member.assigned) if send else None,
        )
        return self._step(answer)

    def _compute_target(self) -> None:
        subscriptions = {
            m.member_id: frozenset(m.subscribed_topic_names) for m in self.members.values()
        }
        self.target = simple(subscriptions, self.partition_counts, self.target)
        self.assignment_epoch = self.group_epoch
        _log.info("share group %s: epoch %d", self.group_id, self.group_epoch)

    def _leave(self, request: ShareHeartbeatRequest) -> ShareStep:
        member = self.members.get(request.member_id)
        if member is None:
            error = WireError.unknown_member_id
            return ShareStep(ShareHeartbeatAnswer(error, request.member_id, request.member_epoch))
        self._remove(member.member_id, "left")
        answer = ShareHeartbeatAnswer(WireError.none, request.member_id, LEAVE_EPOCH)
        return self._step(answer, (member.member_id,))

    def _remove(self, member_id: str, why: str) -> None:
        _log.info("share group %s: member %s %s", self.group_id, member_id, why)
        del self.members[member_id]
        self._seen.pop(member_id, None)
        self.target.pop(member_id, None)
        self.group_epoch += 1
        if not self.members:
            self.partition_counts = {}

    def expire(self, now: float, config: ShareGroupConfig) -> ShareStep:
        """Remove the members not heard from within the session timeout."""
        expired = tuple(
            m
            for m in sorted(self.members)
            if now - self._seen.get(m, now) > config.session_timeout_ms / 1000
        )
        for member_id in expired:
            self._remove(member_id, "expired")
        return self._step(None, expired)


def _validate(request: ShareHeartbeatRequest) -> ShareHeartbeatAnswer | None:
    """Kafka's `throwIfShareGroupHeartbeatRequestIsInvalid`."""
    if not request.member_id.strip():
        return _invalid("MemberId can't be empty.")
    if request.rack_id is not None and not request.rack_id.strip():
        return _invalid("RackId can't be empty.")
    if request.member_epoch == JOIN_EPOCH:
        if not request.subscribed_topic_names:
            return _invalid("SubscribedTopicNames must be set in first request.")
    elif request.member_epoch < LEAVE_EPOCH:
        return _invalid("MemberEpoch is invalid.")
    return None


def _fenced(received: int, epoch: int) -> ShareHeartbeatAnswer:
    side = "greater" if received > epoch else "smaller"
    message = (
        f"The share group member has a {side} member epoch ({received}) than the one known by"
        f" the group coordinator ({epoch}). The member must abandon all its partitions and rejoin."
    )
    return ShareHeartbeatAnswer(WireError.fenced_member_epoch, message=message)
