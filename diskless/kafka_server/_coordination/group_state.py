"""One consumer group's membership, in the process that coordinates it: Kafka's classic protocol,
as a state machine that returns its decisions.

JoinGroup, SyncGroup, Heartbeat and LeaveGroup, and the member checks of OffsetCommit and
TxnOffsetCommit. Nothing here reads or writes the batch coordinator, waits, keeps a timer or
knows who owns it. As Kafka's `GroupMetadataManager` returns with each operation the records to
write and the response to send once they are written, each step that can do more than answer
its request returns a `Step`: the answer (or `Wait`: it comes with a later step), the waiting
requests of members that the step answers, the rebalance timer to arm or cancel, and the
generation due to be stored. `group_coordinator.GroupCoordinator` carries the decisions out in
that order; it stores a due generation before this state machine hands it out
(`generation_stored`), tells it when its timer runs out (`rebalance_due`) and when a waiting
request goes away (`withdraw`), and fences offset commits. Heartbeat and the member checks
only answer, and return the answer.

Kafka's rules, and the simplifications (visible to a client only as extra rebalances):
- a join without a member id gets MEMBER_ID_REQUIRED and a fresh id (KIP-394) from JoinGroup v4
  on, unless it is a static member (KIP-345: `group.instance.id`), which gets its id at once;
  older versions get the id with their first answer;
- a static member that joins again without its member id (restarted) goes on under a fresh
  one, and the old id gets FENCED_INSTANCE_ID from then on. In a stable group it is answered at
  once with the current generation and gets its assignment back from SyncGroup, unseen by the
  others, unless the protocol the group would choose changes (then the group rebalances). As
  Kafka's JoinGroup before v9, the answer names the leader as it was, so that a rejoining
  leader does not assign anew (it leads the next rebalance). While the next generation is
  handed out, the leader may be assigning to the old id: the group rebalances;
- a request naming an instance id must come from its holder: else UNKNOWN_MEMBER_ID (none
  holds it) or FENCED_INSTANCE_ID. LeaveGroup may name a static member by instance id alone;
- a rebalance completes as soon as every known member has rejoined, or when the longest
  rebalance timeout of the members runs out (the others are dropped);
- a member whose session times out, static or not, is dropped, and the group rebalances.
Pending member ids are kept, unbounded, for the life of the group's ownership here.
"""

from __future__ import annotations

import enum
import logging
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Final, Generic, NamedTuple, TypeVar

from kio.schema.errors import ErrorCode as WireError

from diskless.kafka_server._coordination.group_description import (
    CONSUMER_PROTOCOL_TYPE,
    DescribedMember,
    GroupDescription,
    GroupType,
    subscriptions,
)

_log = logging.getLogger(__name__)

INITIAL_REBALANCE_DELAY_MS: Final = 100
"""Kafka's `group.initial.rebalance.delay.ms` (3 s by default), shortened for a prototype."""

_Response = TypeVar("_Response", covariant=True)
_T = TypeVar("_T")


class GroupPhase(enum.Enum):
    EMPTY = "Empty"
    PREPARING = "PreparingRebalance"
    COMPLETING = "CompletingRebalance"
    STABLE = "Stable"


class JoinOutcome(NamedTuple):
    error: WireError
    generation: int = -1
    protocol: str | None = None
    leader: str = ""
    member_id: str = ""
    members: list[tuple[str, str | None, bytes]] = []  # noqa: RUF012 - never mutated
    """(member id, group instance id, metadata) of every member: for the leader only."""


class SyncOutcome(NamedTuple):
    error: WireError
    assignment: bytes = b""


class Wait(NamedTuple):
    """The request waits: its answer comes with a later step (`Step.joins`, `Step.syncs`), for
    this member."""

    member_id: str


@dataclass(frozen=True, slots=True)
class Step(Generic[_Response]):
    """What one step of the state machine decided, for its owner to carry out in this order:
    answer the waiting requests (`joins`, `syncs`), arm or cancel the rebalance timer, start
    storing a generation that is due; and answer the request (`response`)."""

    response: _Response
    joins: tuple[JoinOutcome, ...] = ()
    """Answers to waiting JoinGroups, each for the member it names."""
    syncs: tuple[tuple[str, SyncOutcome], ...] = ()
    """Answers to waiting SyncGroups, by member id."""
    arm_ms: int | None = None
    """Arm the rebalance timer to run out in this many ms, in place of any armed before; when it
    does, the owner tells `rebalance_due`."""
    disarm: bool = False
    """Cancel the rebalance timer."""
    store_generation: int | None = None
    """A generation is due: the owner stores it, then tells `generation_stored` (or
    `generation_not_stored`)."""

    def __post_init__(self) -> None:
        assert self.arm_ms is None or (self.arm_ms >= 0 and not self.disarm)


class Member:
    __slots__ = (
        "assignment",
        "awaiting_join",
        "awaiting_sync",
        "client_host",
        "client_id",
        "instance_id",
        "last_seen",
        "member_id",
        "protocols",
        "rebalance_timeout_ms",
        "session_timeout_ms",
    )

    def __init__(self, member_id: str, instance_id: str | None) -> None:
        self.member_id = member_id
        self.instance_id = instance_id
        self.protocols: list[tuple[str, bytes]] = []
        self.session_timeout_ms = 10_000
        self.rebalance_timeout_ms = 10_000
        self.last_seen = 0.0
        self.awaiting_join = False
        """A JoinGroup of the member waits for the rebalance to complete."""
        self.awaiting_sync = False
        """A SyncGroup of the member waits for the leader's."""
        self.assignment = b""
        self.client_id = ""
        """From its latest JoinGroup, as DescribeGroups shows it."""
        self.client_host = ""


class _Decisions:
    """What a step decides, gathered while it runs; `step` freezes it with the response."""

    __slots__ = ("arm_ms", "disarm", "joins", "syncs")

    def __init__(self) -> None:
        self.joins: list[JoinOutcome] = []
        self.syncs: list[tuple[str, SyncOutcome]] = []
        self.arm_ms: int | None = None
        self.disarm = False

    def arm(self, delay_ms: int) -> None:
        self.arm_ms, self.disarm = delay_ms, False

    def cancel_timer(self) -> None:
        self.arm_ms, self.disarm = None, True

    def answer_join(self, member: Member, outcome: JoinOutcome) -> None:
        assert member.awaiting_join and outcome.member_id == member.member_id
        member.awaiting_join = False
        self.joins.append(outcome)

    def answer_sync(self, member: Member, outcome: SyncOutcome) -> None:
        assert member.awaiting_sync
        member.awaiting_sync = False
        self.syncs.append((member.member_id, outcome))

    def fail(self, member: Member, error: WireError) -> None:
        """Answer whatever the member waits for with `error`."""
        if member.awaiting_join:
            self.answer_join(member, JoinOutcome(error, member_id=member.member_id))
        if member.awaiting_sync:
            self.answer_sync(member, SyncOutcome(error))

    def step(self, response: _T, store_generation: int | None = None) -> Step[_T]:
        return Step(
            response,
            tuple(self.joins),
            tuple(self.syncs),
            self.arm_ms,
            self.disarm,
            store_generation,
        )


class GroupState:
    """The members of one group and its rebalances, from the generation stored last. Times
    (`now`) are seconds of a monotonic clock."""

    def __init__(self, group_id: str, generation: int) -> None:
        self.group_id = group_id
        self.generation = generation
        self.phase = GroupPhase.EMPTY
        self.protocol_type: str | None = None
        self.protocol: str | None = None
        self.leader = ""
        self.members: dict[str, Member] = {}
        self.instances: dict[str, str] = {}
        """Static members: group instance id -> the member id it holds now."""
        self.pending: set[str] = set()
        """Member ids handed out with MEMBER_ID_REQUIRED, not yet used to join."""
        self.completing = False
        """Set while the next generation is being stored (from `rebalance_due` until
        `generation_stored` or `generation_not_stored`)."""

    # --- what the admin APIs read -------------------------------------------------------------
    def describe(self) -> GroupDescription:
        """The group as DescribeGroups and ListGroups show it (`group_description`). As Kafka,
        the protocol and each member's metadata and assignment are shown only once the group is
        stable. The topics the members are subscribed to are read from their metadata for the
        group's protocol (for every protocol they offer before one is chosen) when the group
        speaks Kafka's consumer protocol; else they cannot be known (None)."""
        stable = self.phase is GroupPhase.STABLE
        protocol = self.protocol or ""
        members = tuple(
            DescribedMember(
                m.member_id,
                m.instance_id,
                m.client_id,
                m.client_host,
                dict(m.protocols).get(protocol, b"") if stable else b"",
                m.assignment if stable else b"",
            )
            for m in self.members.values()
        )
        subscribed: frozenset[str] | None = None
        if self.protocol_type == CONSUMER_PROTOCOL_TYPE or not self.members:
            subscribed = subscriptions(
                metadata
                for m in self.members.values()
                for name, metadata in m.protocols
                if self.protocol is None or name == self.protocol
            )
        return GroupDescription(
            self.group_id,
            GroupType.CLASSIC,
            self.phase.value,
            self.protocol_type or "",
            protocol if stable else "",
            members,
            subscribed,
        )

    # --- checks -------------------------------------------------------------------------------
    def _identify(self, member_id: str, instance_id: str | None) -> Member | WireError:
        """The member a request speaks for (Kafka's `validateMember`): one that names an
        instance id no member holds is UNKNOWN_MEMBER_ID, one held by another member id
        FENCED_INSTANCE_ID (a static member replaced since); an unknown member id is
        UNKNOWN_MEMBER_ID."""
        if instance_id is not None:
            holder = self.instances.get(instance_id)
            if holder is None:
                return WireError.unknown_member_id
            if holder != member_id:
                return WireError.fenced_instance_id
        member = self.members.get(member_id)
        return WireError.unknown_member_id if member is None else member

    def check_member(
        self,
        generation: int,
        member_id: str,
        instance_id: str | None,
        *,
        now: float,
        transactional: bool = False,
    ) -> WireError:
        """May this member commit offsets now? Kafka's rule for OffsetCommit, and for
        TxnOffsetCommit (`transactional`, KIP-447: the consumer whose offsets a producer
        commits), which checks no rebalance state and lets older versions name no member.

        - No generation and an empty group: anyone may (an admin tool, or a consumer that
          assigns its own partitions).
        - A request that names a generation, a member or an instance must come from a member
          of the current generation: else FENCED_INSTANCE_ID, UNKNOWN_MEMBER_ID or
          ILLEGAL_GENERATION. One that names none is refused by a group with members
          (UNKNOWN_MEMBER_ID), unless transactional.
        - While the group prepares a rebalance, the current generation's members may still
          commit (the usual commit of what they are about to revoke); once the next generation
          is handed out and not yet synced (CompletingRebalance), a member of it gets
          REBALANCE_IN_PROGRESS.
        An accepted OffsetCommit keeps its member's session alive."""
        if generation < 0 and self.phase is GroupPhase.EMPTY:
            return WireError.none
        member: Member | None = None
        if generation >= 0 or member_id or instance_id is not None:
            identified = self._identify(member_id, instance_id)
            if isinstance(identified, WireError):
                return identified
            member = identified
            if generation != self.generation:
                return WireError.illegal_generation
        elif not transactional and self.phase is not GroupPhase.EMPTY:
            return WireError.unknown_member_id
        if transactional:
            return WireError.none
        if self.phase is GroupPhase.COMPLETING:
            return WireError.rebalance_in_progress
        if member is not None:
            member.last_seen = now
        return WireError.none

    # --- membership ---------------------------------------------------------------------------
    def join(
        self,
        *,
        member_id: str,
        instance_id: str | None,
        protocol_type: str,
        protocols: list[tuple[str, bytes]],
        session_timeout_ms: int,
        rebalance_timeout_ms: int,
        fresh_member_id: str,
        require_known_member_id: bool,
        now: float,
        client_id: str = "",
        client_host: str = "",
    ) -> Step[JoinOutcome | Wait]:
        """JoinGroup: an answer now, or `Wait` for the rebalance's completion. A member joining
        without an id (`member_id` empty) is given `fresh_member_id`. `client_id` and
        `client_host` are the joining client's, kept for DescribeGroups."""
        if not protocols or (self.members and self.protocol_type != protocol_type):
            return Step(JoinOutcome(WireError.inconsistent_group_protocol, member_id=member_id))
        decided = _Decisions()
        leader, rejoined = self.leader, False
        if not member_id or member_id in self.pending:
            if member_id:
                self.pending.discard(member_id)
            else:
                assert fresh_member_id, "a member joining without an id needs a fresh one"
                member_id = fresh_member_id
                if instance_id is None and require_known_member_id:
                    self.pending.add(member_id)
                    return Step(JoinOutcome(WireError.member_id_required, member_id=member_id))
            if rejoined := instance_id is not None and instance_id in self.instances:
                self._replace(instance_id, member_id, decided)
            else:
                self._admit(member_id, instance_id, decided)
        else:
            known = self._identify(member_id, instance_id)
            if isinstance(known, WireError):
                return Step(JoinOutcome(known, member_id=member_id))
        member = self.members[member_id]
        self.protocol_type = protocol_type
        member.protocols = protocols
        member.client_id, member.client_host = client_id, client_host
        member.session_timeout_ms = session_timeout_ms
        member.rebalance_timeout_ms = max(rebalance_timeout_ms, session_timeout_ms)
        member.last_seen = now
        if rejoined and self.phase is GroupPhase.STABLE and self._chosen() == self.protocol:
            _log.info(
                "group %s: static member %s rejoined as %s in generation %d without a rebalance",
                self.group_id,
                instance_id,
                member_id,
                self.generation,
            )
            outcome = JoinOutcome(
                WireError.none,
                generation=self.generation,
                protocol=self.protocol,
                leader=leader,
                member_id=member_id,
            )
            return decided.step(outcome)
        if member.awaiting_join:  # this join takes the place of the one still waiting
            outcome = JoinOutcome(WireError.rebalance_in_progress, member_id=member_id)
            decided.answer_join(member, outcome)
        member.awaiting_join = True
        self._prepare(decided)
        if all(m.awaiting_join for m in self.members.values()):
            decided.arm(INITIAL_REBALANCE_DELAY_MS if self.generation == 0 else 0)
        return decided.step(Wait(member_id))

    def _admit(self, member_id: str, instance_id: str | None, decided: _Decisions) -> None:
        """A new member (a static one whose instance id no member holds)."""
        if instance_id is not None:
            assert instance_id not in self.instances, "a held instance id is replaced"
            self.instances[instance_id] = member_id
        self.members[member_id] = Member(member_id, instance_id)

    def _replace(self, instance_id: str, member_id: str, decided: _Decisions) -> None:
        """The static member holding `instance_id` goes on under `member_id`, with its
        assignment and its place as leader; its old id is fenced (FENCED_INSTANCE_ID)."""
        member = self.members.pop(self.instances[instance_id])
        _log.info(
            "group %s: static member %s replaced %s with %s",
            self.group_id,
            instance_id,
            member.member_id,
            member_id,
        )
        decided.fail(member, WireError.fenced_instance_id)
        if self.leader == member.member_id:
            self.leader = member_id
        member.member_id = member_id
        self.members[member_id] = member
        self.instances[instance_id] = member_id

    def _prepare(self, decided: _Decisions) -> None:
        """Start a rebalance: members that are not rejoining learn it from their next call."""
        if self.phase is GroupPhase.PREPARING:
            return
        self.phase = GroupPhase.PREPARING
        for member in self.members.values():
            if member.awaiting_sync:
                decided.answer_sync(member, SyncOutcome(WireError.rebalance_in_progress))
        timeout_ms = max((m.rebalance_timeout_ms for m in self.members.values()), default=0)
        decided.arm(timeout_ms)

    def withdraw(self, member_id: str) -> None:
        """The member's waiting request went away unanswered (its connection closed): it waits
        for nothing now. It stays a member; one that has not joined again when the rebalance
        completes is dropped then."""
        member = self.members.get(member_id)
        if member is not None:
            member.awaiting_join = member.awaiting_sync = False

    # --- rebalance ----------------------------------------------------------------------------
    def rebalance_due(self) -> Step[None]:
        """The rebalance timer ran out: the members that did not rejoin are dropped, and the
        next generation is due to be stored (`Step.store_generation`)."""
        decided = _Decisions()
        if self.phase is not GroupPhase.PREPARING or self.completing:
            return decided.step(None)
        for member_id, member in list(self.members.items()):
            if not member.awaiting_join:
                _log.info("group %s: member %s did not rejoin; removed", self.group_id, member_id)
                self._remove(member, WireError.unknown_member_id, decided)
        self.completing = True
        return decided.step(None, store_generation=self.generation + 1)

    def generation_stored(self, generation: int) -> Step[None]:
        """The next generation is stored: hand it to every member that rejoined."""
        self.completing = False
        self.generation = generation
        decided = _Decisions()
        if self.phase is not GroupPhase.PREPARING:
            return decided.step(None)
        if not self.members:
            self.phase = GroupPhase.EMPTY
            return decided.step(None)
        if self.leader not in self.members:
            self.leader = next(iter(self.members))
        self.protocol = self._chosen()
        if self.protocol is None:
            return self.fail_all(WireError.inconsistent_group_protocol)
        self.phase = GroupPhase.COMPLETING
        listing = [
            (m.member_id, m.instance_id, dict(m.protocols)[self.protocol])
            for m in self.members.values()
        ]
        _log.info("group %s: generation %d of %d members", self.group_id, generation, len(listing))
        for member in self.members.values():
            member.awaiting_sync = False
            if not member.awaiting_join:  # its join went away while the generation was stored
                continue
            outcome = JoinOutcome(
                WireError.none,
                generation=generation,
                protocol=self.protocol,
                leader=self.leader,
                member_id=member.member_id,
                members=listing if member.member_id == self.leader else [],
            )
            decided.answer_join(member, outcome)
        return decided.step(None)

    def _chosen(self) -> str | None:
        """The protocol the group would choose now: the leader's most preferred of those every
        member offers (None if none is)."""
        leader = self.members.get(self.leader)
        if leader is None:
            return None
        offered = [{name for name, _ in m.protocols} for m in self.members.values()]
        common = set.intersection(*offered)
        return next((name for name, _ in leader.protocols if name in common), None)

    def generation_not_stored(self, error: WireError) -> Step[None]:
        """The next generation could not be stored: the members waiting to join learn it and
        join again (a retriable `error`); the rebalance stays under way."""
        self.completing = False
        decided = _Decisions()
        for member in self.members.values():
            if member.awaiting_join:
                decided.fail(member, error)
        return decided.step(None)

    def sync(
        self,
        generation: int,
        member_id: str,
        instance_id: str | None,
        assignments: Mapping[str, bytes],
        *,
        now: float,
    ) -> Step[SyncOutcome | Wait]:
        """SyncGroup: an answer now, or `Wait` for the leader's SyncGroup."""
        member = self._identify(member_id, instance_id)
        if isinstance(member, WireError):
            return Step(SyncOutcome(member))
        if generation != self.generation:
            return Step(SyncOutcome(WireError.illegal_generation))
        if self.phase is GroupPhase.PREPARING:
            return Step(SyncOutcome(WireError.rebalance_in_progress))
        member.last_seen = now
        if self.phase is GroupPhase.STABLE:
            return Step(SyncOutcome(WireError.none, member.assignment))
        if member_id != self.leader:
            member.awaiting_sync = True
            return Step(Wait(member_id))
        decided = _Decisions()
        for other in self.members.values():
            other.assignment = assignments.get(other.member_id, b"")
            if other.awaiting_sync:
                decided.answer_sync(other, SyncOutcome(WireError.none, other.assignment))
        self.phase = GroupPhase.STABLE
        return decided.step(SyncOutcome(WireError.none, member.assignment))

    def heartbeat(
        self, generation: int, member_id: str, instance_id: str | None, *, now: float
    ) -> WireError:
        member = self._identify(member_id, instance_id)
        if isinstance(member, WireError):
            return member
        member.last_seen = now
        if self.phase is GroupPhase.PREPARING:
            return WireError.rebalance_in_progress
        if generation != self.generation:
            return WireError.illegal_generation
        return WireError.none

    def leave(self, member_id: str, instance_id: str | None) -> Step[WireError]:
        """LeaveGroup of one member, by its ids (`_identify`) or its instance id alone: the
        group rebalances. A pending member id (MEMBER_ID_REQUIRED's) is forgotten."""
        if not member_id and instance_id is not None:
            member_id = self.instances.get(instance_id, "")
        elif member_id in self.pending:
            self.pending.discard(member_id)
            return Step(WireError.none)
        member = self._identify(member_id, instance_id)
        if isinstance(member, WireError):
            return Step(member)
        decided = _Decisions()
        self._remove(member, WireError.unknown_member_id, decided)
        self._after_removal(decided)
        return decided.step(WireError.none)

    def expire(self, now: float) -> Step[None]:
        """Drop members whose session timed out (those waiting in a join are not idle)."""
        decided = _Decisions()
        expired = [
            m
            for m in self.members.values()
            if not m.awaiting_join and now - m.last_seen > m.session_timeout_ms / 1000
        ]
        for member in expired:
            _log.info("group %s: member %s expired", self.group_id, member.member_id)
            self._remove(member, WireError.unknown_member_id, decided)
        if expired:
            self._after_removal(decided)
        return decided.step(None)

    def _remove(self, member: Member, error: WireError, decided: _Decisions) -> None:
        del self.members[member.member_id]
        if member.instance_id is not None and self.instances.get(member.instance_id) == (
            member.member_id
        ):
            del self.instances[member.instance_id]
        decided.fail(member, error)

    def _after_removal(self, decided: _Decisions) -> None:
        if self.leader not in self.members:
            self.leader = ""
        if not self.members and not self.completing:
            decided.cancel_timer()
            self.phase = GroupPhase.EMPTY
            return
        self._prepare(decided)
        if all(m.awaiting_join for m in self.members.values()):
            decided.arm(0)

    def fail_all(self, error: WireError) -> Step[None]:
        """Drop every member (this process no longer coordinates the group, or no protocol is
        common to all): each learns it from what it waits for, or from its next call."""
        decided = _Decisions()
        decided.cancel_timer()
        for member in list(self.members.values()):
            decided.fail(member, error)
        self.members.clear()
        self.instances.clear()
        self.phase = GroupPhase.EMPTY
        return decided.step(None)
