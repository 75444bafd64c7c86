"""One consumer group of Kafka 4's consumer group protocol (KIP-848), in the process that
coordinates it, as a state machine that returns its decisions.

ConsumerGroupHeartbeat and ConsumerGroupDescribe, and the member checks of OffsetCommit. As
`group_state.GroupState` for the classic protocol, nothing here reads or writes the batch
coordinator, waits, keeps a timer or knows who owns it. Each step returns its answer and, when
it changed what must survive this process, the group's new state to store (`Step.store`): the
owner stores it (fenced by its ownership, as the classic generation is) before it sends the
answer, so that a new owner continues from it, with every member's epoch and partitions, and
no partition is handed out twice across an ownership move.

The rules are Kafka's (`GroupMetadataManager.consumerGroupHeartbeat`, `CurrentAssignmentBuilder`):
- **Epochs.** The group epoch is bumped whenever what the target assignment depends on changes:
  a member joins or leaves, a subscription, the assignor, or the partition counts of the
  subscribed topics. The target assignment is then computed again (`assignors`) and takes the
  group epoch as its own. Each member has its own epoch: the target epoch it has reconciled to.
- **Reconciliation.** A member moves toward its target in its own heartbeats. Partitions it
  must give up are revoked first: it keeps its epoch, is told only the partitions it keeps, and
  until it heartbeats without the revoked ones they stay its own. A partition is given to its
  new owner only once no other member holds it (assigned or pending revocation), so no partition
  is ever owned by two members in any epoch. A member that does not revoke within its rebalance
  timeout is removed.
- **Fencing.** A heartbeat of an unknown member: UNKNOWN_MEMBER_ID. An epoch above the
  member's, or below it unless it is the previous one and the partitions it reports are among
  its own (a lost answer): FENCED_MEMBER_EPOCH. A new member beyond the group's maximum size:
  GROUP_MAX_SIZE_REACHED.
- **Leaving.** Epoch -1 leaves. A static member (`instance_id`) leaving with -2 keeps its
  partitions, and its place in the target, for its session timeout: rejoining with the same
  instance id within it, under a new member id, it takes them back with its epoch, without a
  rebalance. Another member joining with an instance id still in use gets
  UNRELEASED_INSTANCE_ID; a static member whose instance id is held by another member id,
  FENCED_INSTANCE_ID. A member not heard from within the session timeout is removed.
- **Regular expressions** (`subscribed_topic_regex`) are matched against the topic names the
  requesting member may describe, as a whole (`re.fullmatch`): Python's `re` approximates the
  RE2/J syntax Kafka uses (a pattern valid in one may be refused, or read differently, by the
  other). The resolved names are kept with the member and resolved again at each of its
  heartbeats that carries topics.
Times (`now`) are seconds of a monotonic clock; sessions and revocation deadlines are not
stored: a new owner starts them afresh when it loads the group.
"""

from __future__ import annotations

import enum
import logging
import re
from collections import Counter
from collections.abc import Iterable, Mapping, Set
from dataclasses import dataclass
from typing import Final

import msgspec
from kio.schema.errors import ErrorCode as WireError

from diskless._types import TopicPartition
from diskless.kafka_server._coordination.assignors import ASSIGNORS, DEFAULT_ASSIGNOR

_log = logging.getLogger(__name__)

LEAVE_EPOCH: Final = -1
STATIC_LEAVE_EPOCH: Final = -2
JOIN_EPOCH: Final = 0
INT32_MAX: Final = 2**31 - 1


class ConsumerGroupConfig(msgspec.Struct, frozen=True):
    """A consumer group's settings, with Kafka's defaults (`consumer.session.timeout.ms`,
    `consumer.heartbeat.interval.ms`, `group.consumer.max.size`); a group's own configs
    (IncrementalAlterConfigs on the GROUP resource) override them."""

    session_timeout_ms: int = 45_000
    heartbeat_interval_ms: int = 5_000
    max_size: int = INT32_MAX


DEFAULT_CONFIG: Final = ConsumerGroupConfig()


class MemberState(enum.Enum):
    """Kafka's `MemberState` of a member's reconciliation."""

    STABLE = "stable"
    UNREVOKED_PARTITIONS = "unrevoked_partitions"
    """It must first give up `revoking`; it keeps its epoch until it has."""
    UNRELEASED_PARTITIONS = "unreleased_partitions"
    """It is at the target epoch, but some of its target partitions are still held by others."""


class Member(msgspec.Struct):
    """A member, as stored: its epochs, subscription and partitions."""

    member_id: str
    member_epoch: int = 0
    previous_member_epoch: int = -1
    state: MemberState = MemberState.STABLE
    instance_id: str | None = None
    rack_id: str | None = None
    client_id: str = ""
    client_host: str = ""
    subscribed_topic_names: tuple[str, ...] = ()
    subscribed_topic_regex: str | None = None
    regex_topics: tuple[str, ...] = ()
    """The topics `subscribed_topic_regex` resolved to, last time."""
    server_assignor: str | None = None
    rebalance_timeout_ms: int = 300_000
    assigned: tuple[TopicPartition, ...] = ()
    """The partitions it owns and may consume, sorted."""
    revoking: tuple[TopicPartition, ...] = ()
    """Partitions it still owns and must give up, sorted."""

    def topics(self) -> frozenset[str]:
        return frozenset(self.subscribed_topic_names) | frozenset(self.regex_topics)

    def owned(self) -> frozenset[TopicPartition]:
        return frozenset(self.assigned) | frozenset(self.revoking)


class Snapshot(msgspec.Struct, frozen=True):
    """What survives the owner: the whole state of the group, stored as one value."""

    group_epoch: int
    assignment_epoch: int
    members: tuple[Member, ...]
    target: tuple[tuple[str, tuple[TopicPartition, ...]], ...]
    partition_counts: tuple[tuple[str, int], ...]
    """The partition counts of the subscribed topics that the target was computed from."""


_encoder: Final = msgspec.msgpack.Encoder()
_decoder: Final = msgspec.msgpack.Decoder(Snapshot)


def encode_snapshot(snapshot: Snapshot) -> bytes:
    return _encoder.encode(snapshot)


def decode_snapshot(data: bytes) -> Snapshot:
    return _decoder.decode(data)


class HeartbeatRequest(msgspec.Struct, frozen=True):
    """A ConsumerGroupHeartbeat, with topic ids already translated to names. None: unchanged
    since the member's last heartbeat."""

    member_id: str
    member_epoch: int
    instance_id: str | None = None
    rack_id: str | None = None
    rebalance_timeout_ms: int = -1
    subscribed_topic_names: tuple[str, ...] | None = None
    subscribed_topic_regex: str | None = None
    server_assignor: str | None = None
    owned: frozenset[TopicPartition] | None = None
    client_id: str = ""
    client_host: str = ""


@dataclass(frozen=True, slots=True)
class HeartbeatAnswer:
    error: WireError
    member_id: str = ""
    member_epoch: int = -1
    heartbeat_interval_ms: int = 0
    assignment: frozenset[TopicPartition] | None = None
    """The partitions the member owns now; None when unchanged since its last answer."""
    message: str | None = None


@dataclass(frozen=True, slots=True)
class Step:
    """An answer, and the group's new state for its owner to store before sending it (None:
    nothing that must survive changed)."""

    answer: HeartbeatAnswer | None = None
    store: Snapshot | None = None


@dataclass(frozen=True, slots=True)
class DescribedMember:
    member: Member
    target: tuple[TopicPartition, ...]


@dataclass(frozen=True, slots=True)
class Description:
    """What ConsumerGroupDescribe, DescribeGroups and ListGroups say of the group."""

    group_id: str
    state: str
    """Kafka's `ConsumerGroup.ConsumerGroupState`: Empty, Assigning, Reconciling, Stable."""
    group_epoch: int
    assignment_epoch: int
    assignor: str
    members: tuple[DescribedMember, ...]
    protocol_type: str = "consumer"


def _invalid(message: str) -> HeartbeatAnswer:
    return HeartbeatAnswer(WireError.invalid_request, message=message)


def _sorted(partitions: Iterable[TopicPartition]) -> tuple[TopicPartition, ...]:
    return tuple(sorted(partitions))


class ConsumerGroupState:
    """The members, epochs and target assignment of one consumer group."""

    def __init__(self, group_id: str, snapshot: Snapshot | None = None, *, now: float = 0) -> None:
        self.group_id = group_id
        self.group_epoch = 0
        self.assignment_epoch = 0
        self.members: dict[str, Member] = {}
        self.target: dict[str, frozenset[TopicPartition]] = {}
        self.partition_counts: dict[str, int] = {}
        self._seen: dict[str, float] = {}
        """Member id -> when it was last heard from (its session)."""
        self._revoke_by: dict[str, float] = {}
        """Member id -> when it must have revoked what it gives up."""
        if snapshot is not None:
            self.group_epoch = snapshot.group_epoch
            self.assignment_epoch = snapshot.assignment_epoch
            self.members = {m.member_id: m for m in snapshot.members}
            self.target = {member: frozenset(tps) for member, tps in snapshot.target}
            self.partition_counts = dict(snapshot.partition_counts)
            for member in self.members.values():  # a new owner starts sessions afresh
                self._seen[member.member_id] = now
                if member.state is MemberState.UNREVOKED_PARTITIONS:
                    self._revoke_by[member.member_id] = now + member.rebalance_timeout_ms / 1000
        self._stored = self.snapshot()

    # --- what is stored and described ---------------------------------------------------------
    def snapshot(self) -> Snapshot:
        return Snapshot(
            self.group_epoch,
            self.assignment_epoch,
            tuple(msgspec.structs.replace(m) for m in sorted(self.members.values(), key=_by_id)),
            tuple((member, _sorted(tps)) for member, tps in sorted(self.target.items())),
            tuple(sorted(self.partition_counts.items())),
        )

    def _step(self, answer: HeartbeatAnswer | None) -> Step:
        snapshot = self.snapshot()
        if snapshot == self._stored:
            return Step(answer)
        self._stored = snapshot
        return Step(answer, snapshot)

    def is_empty(self) -> bool:
        return not self.members

    def state_name(self) -> str:
        if not self.members:
            return "Empty"
        if self.group_epoch != self.assignment_epoch:
            return "Assigning"
        if any(
            m.member_epoch != self.assignment_epoch or m.state is not MemberState.STABLE
            for m in self.members.values()
        ):
            return "Reconciling"
        return "Stable"

    def assignor(self) -> str:
        """Kafka's choice: the assignor most members ask for, else the default."""
        asked = Counter(m.server_assignor for m in self.members.values() if m.server_assignor)
        if not asked:
            return DEFAULT_ASSIGNOR
        return min(asked, key=lambda name: (-asked[name], name))

    def describe(self) -> Description:
        return Description(
            self.group_id,
            self.state_name(),
            self.group_epoch,
            self.assignment_epoch,
            self.assignor(),
            tuple(
                DescribedMember(m, _sorted(self.target.get(m.member_id, ())))
                for m in sorted(self.members.values(), key=_by_id)
            ),
        )

    # --- offsets ------------------------------------------------------------------------------
    def check_commit(self, member_epoch: int, member_id: str, *, now: float) -> WireError:
        """Kafka's `ConsumerGroup.validateOffsetCommit`: no epoch and no member while the group
        is empty: anyone may (an admin tool); else the member must exist (UNKNOWN_MEMBER_ID)
        and name its current epoch (STALE_MEMBER_EPOCH)."""
        if member_epoch < 0 and not self.members and not member_id:
            return WireError.none
        member = self.members.get(member_id)
        if member is None:
            return WireError.unknown_member_id
        if member_epoch != member.member_epoch:
            return WireError.stale_member_epoch
        self._seen[member_id] = now
        return WireError.none

    # --- heartbeat ----------------------------------------------------------------------------
    def heartbeat(
        self,
        request: HeartbeatRequest,
        *,
        topics: Mapping[str, int],
        describable: Set[str],
        config: ConsumerGroupConfig,
        now: float,
    ) -> Step:
        """ConsumerGroupHeartbeat. `topics`: the partition count of every topic; `describable`:
        the topic names the member may describe (those a regular expression may match)."""
        invalid = self._validate(request)
        if invalid is not None:
            return Step(invalid)
        if request.member_epoch in (LEAVE_EPOCH, STATIC_LEAVE_EPOCH):
            return self._leave(request, now=now)
        member_or_error = self._member_for(request, config)
        if isinstance(member_or_error, HeartbeatAnswer):
            return Step(member_or_error)
        member, joined, replaced = member_or_error
        self._seen[member.member_id] = now
        before = (member.member_epoch, member.assigned)
        changed = joined
        changed |= self._update_subscription(member, request, describable)
        counts = {t: topics[t] for m in self.members.values() for t in m.topics() if t in topics}
        if counts != self.partition_counts:
            self.partition_counts = counts
            changed = True
        if changed:
            self.group_epoch += 1
            _log.info(
                "group %s: epoch %d (member %s%s)",
                self.group_id,
                self.group_epoch,
                member.member_id,
                " joined" if joined else "",
            )
        if self.group_epoch > self.assignment_epoch:
            self._compute_target()
        self._reconcile(member, request.owned, now=now)
        send = (
            joined
            or replaced
            or (member.member_epoch, member.assigned) != before
            or (request.owned is not None and request.owned != frozenset(member.assigned))
        )
        answer = HeartbeatAnswer(
            WireError.none,
            member.member_id,
            member.member_epoch,
            config.heartbeat_interval_ms,
            frozenset(member.assigned) if send else None,
        )
        return self._step(answer)

    def _validate(self, request: HeartbeatRequest) -> HeartbeatAnswer | None:
        """Kafka's `throwIfConsumerGroupHeartbeatRequestIsInvalid`."""
        if not request.member_id:
            return _invalid("MemberId can't be empty.")
        if request.member_epoch < STATIC_LEAVE_EPOCH:
            return _invalid(f"MemberEpoch is {request.member_epoch}, but must be >= -2.")
        if request.instance_id == "":
            return _invalid("InstanceId can't be empty.")
        if request.rack_id == "":
            return _invalid("RackId can't be empty.")
        if request.member_epoch == JOIN_EPOCH:
            if request.rebalance_timeout_ms < 0:
                return _invalid("RebalanceTimeoutMs must be provided in first request.")
            if request.owned:
                return _invalid("TopicPartitions must be empty when (re-)joining.")
            if request.subscribed_topic_names is None and request.subscribed_topic_regex is None:
                return _invalid(
                    "SubscribedTopicNames or SubscribedTopicRegex must be set in first request."
                )
        if request.server_assignor is not None and request.server_assignor not in ASSIGNORS:
            return HeartbeatAnswer(
                WireError.unsupported_assignor,
                message=f"ServerAssignor {request.server_assignor} is not supported.",
            )
        if request.subscribed_topic_regex:
            try:
                re.compile(request.subscribed_topic_regex)
            except re.error as e:
                return HeartbeatAnswer(
                    WireError.invalid_regular_expression,
                    message=f"SubscribedTopicRegex {request.subscribed_topic_regex!r}: {e}",
                )
        return None

    def _member_for(
        self, request: HeartbeatRequest, config: ConsumerGroupConfig
    ) -> tuple[Member, bool, bool] | HeartbeatAnswer:
        """The member the heartbeat speaks for, whether it just joined, and whether it took a
        static member's place; or the error that fences it."""
        member_id, epoch, instance = request.member_id, request.member_epoch, request.instance_id
        if instance is not None:
            holder = self._holder(instance)
            if epoch == JOIN_EPOCH and holder is not None and holder.member_id != member_id:
                if holder.member_epoch != STATIC_LEAVE_EPOCH:
                    return HeartbeatAnswer(
                        WireError.unreleased_instance_id,
                        message=f"Static member {instance} is still in use by {holder.member_id}.",
                    )
                return self._replace(holder, request), False, True
            if epoch != JOIN_EPOCH:
                if holder is None:
                    return HeartbeatAnswer(WireError.unknown_member_id)
                if holder.member_id != member_id:
                    return HeartbeatAnswer(WireError.fenced_instance_id)
        member = self.members.get(member_id)
        if member is None:
            if epoch != JOIN_EPOCH:
                return HeartbeatAnswer(
                    WireError.unknown_member_id, message=f"Member {member_id} is not known."
                )
            if len(self.members) >= config.max_size:
                return HeartbeatAnswer(
                    WireError.group_max_size_reached,
                    message=f"The group has reached its maximum size ({config.max_size}).",
                )
            member = Member(member_id, instance_id=instance, client_id=request.client_id)
            member.client_host = request.client_host
            self.members[member_id] = member
            return member, True, False
        if epoch != JOIN_EPOCH and epoch != member.member_epoch:
            lost_answer = (
                epoch == member.previous_member_epoch
                and request.owned is not None
                and request.owned <= frozenset(member.assigned)
            )
            if epoch > member.member_epoch or not lost_answer:
                return HeartbeatAnswer(
                    WireError.fenced_member_epoch,
                    message=f"The consumer group member has a greater member epoch "
                    f"({member.member_epoch}) than the one known by the member ({epoch})."
                    if epoch < member.member_epoch
                    else f"The member epoch {epoch} is above the member's ({member.member_epoch}).",
                )
        return member, False, False

    def _holder(self, instance_id: str) -> Member | None:
        return next((m for m in self.members.values() if m.instance_id == instance_id), None)

    def _replace(self, old: Member, request: HeartbeatRequest) -> Member:
        """A static member rejoins under a new member id: it takes the old member's place, epoch
        and partitions, and its place in the target."""
        _log.info(
            "group %s: static member %s rejoined as %s",
            self.group_id,
            old.instance_id,
            request.member_id,
        )
        del self.members[old.member_id]
        self._seen.pop(old.member_id, None)
        deadline = self._revoke_by.pop(old.member_id, None)
        epoch = old.previous_member_epoch if old.member_epoch == STATIC_LEAVE_EPOCH else 0
        member = msgspec.structs.replace(
            old,
            member_id=request.member_id,
            member_epoch=epoch,
            client_id=request.client_id,
            client_host=request.client_host,
        )
        self.members[member.member_id] = member
        if deadline is not None:
            self._revoke_by[member.member_id] = deadline
        if old.member_id in self.target:
            self.target[member.member_id] = self.target.pop(old.member_id)
        return member

    def _update_subscription(
        self, member: Member, request: HeartbeatRequest, describable: Set[str]
    ) -> bool:
        """Take what the heartbeat changed of the member's subscription; whether the target
        depends on what changed."""
        before = (member.topics(), member.server_assignor)
        member.client_id, member.client_host = request.client_id, request.client_host
        if request.rack_id is not None:
            member.rack_id = request.rack_id
        if request.rebalance_timeout_ms >= 0:
            member.rebalance_timeout_ms = request.rebalance_timeout_ms
        if request.subscribed_topic_names is not None:
            member.subscribed_topic_names = tuple(sorted(set(request.subscribed_topic_names)))
        if request.subscribed_topic_regex is not None:
            member.subscribed_topic_regex = request.subscribed_topic_regex or None
        if request.server_assignor is not None:
            member.server_assignor = request.server_assignor or None
        if member.subscribed_topic_regex is not None:
            pattern = re.compile(member.subscribed_topic_regex)
            member.regex_topics = tuple(sorted(t for t in describable if pattern.fullmatch(t)))
        else:
            member.regex_topics = ()
        return (member.topics(), member.server_assignor) != before

    def _compute_target(self) -> None:
        assignor = ASSIGNORS[self.assignor()]
        subscriptions = {m.member_id: m.topics() for m in self.members.values()}
        self.target = assignor(subscriptions, self.partition_counts, self.target)
        self.assignment_epoch = self.group_epoch

    def _reconcile(
        self, member: Member, owned: frozenset[TopicPartition] | None, *, now: float
    ) -> None:
        """Kafka's `CurrentAssignmentBuilder`: move the member one step toward its target."""
        if member.state is MemberState.UNREVOKED_PARTITIONS:
            if owned is None or owned & frozenset(member.revoking):
                return  # still revoking: it keeps its epoch and its partitions
            member.revoking = ()
            self._revoke_by.pop(member.member_id, None)
        elif member.state is MemberState.STABLE and member.member_epoch == self.assignment_epoch:
            return
        target = self.target.get(member.member_id, frozenset())
        assigned = frozenset(member.assigned)
        kept = assigned & target
        revoking = assigned - target
        if revoking:
            member.state = MemberState.UNREVOKED_PARTITIONS
            member.assigned, member.revoking = _sorted(kept), _sorted(revoking)
            self._revoke_by[member.member_id] = now + member.rebalance_timeout_ms / 1000
            return
        held = {
            tp for other in self.members.values() if other is not member for tp in other.owned()
        }
        wanted = target - kept
        released = wanted - held
        member.assigned = _sorted(kept | released)
        if member.member_epoch != self.assignment_epoch:
            member.previous_member_epoch = member.member_epoch
            member.member_epoch = self.assignment_epoch
        member.state = (
            MemberState.UNRELEASED_PARTITIONS if wanted - released else MemberState.STABLE
        )

    def _leave(self, request: HeartbeatRequest, *, now: float) -> Step:
        member = self.members.get(request.member_id)
        if member is None:
            error = WireError.unknown_member_id
            return Step(HeartbeatAnswer(error, request.member_id, request.member_epoch))
        if request.member_epoch == STATIC_LEAVE_EPOCH and member.instance_id is not None:
            # it keeps its partitions and its place for its session timeout
            if member.member_epoch != STATIC_LEAVE_EPOCH:
                member.previous_member_epoch = member.member_epoch
                member.member_epoch = STATIC_LEAVE_EPOCH
            self._seen[member.member_id] = now
        else:
            self._remove(member, "left")
        answer = HeartbeatAnswer(WireError.none, request.member_id, request.member_epoch)
        return self._step(answer)

    def _remove(self, member: Member, why: str) -> None:
        _log.info("group %s: member %s %s", self.group_id, member.member_id, why)
        del self.members[member.member_id]
        self._seen.pop(member.member_id, None)
        self._revoke_by.pop(member.member_id, None)
        self.target.pop(member.member_id, None)
        self.group_epoch += 1
        if not self.members:
            self.partition_counts = {}

    def expire(self, now: float, config: ConsumerGroupConfig) -> Step:
        """Remove the members whose session timed out, and those that did not revoke within
        their rebalance timeout."""
        for member in list(self.members.values()):
            seen = self._seen.get(member.member_id, now)
            if now - seen > config.session_timeout_ms / 1000:
                self._remove(member, "expired")
            elif now > self._revoke_by.get(member.member_id, now):
                self._remove(member, "did not revoke its partitions in time")
        return self._step(None)


def _by_id(member: Member) -> str:
    return member.member_id
