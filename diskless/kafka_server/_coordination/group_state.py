"""One consumer group's membership, in the process that coordinates it: Kafka's classic protocol.

JoinGroup, SyncGroup, Heartbeat and LeaveGroup, and the member checks of OffsetCommit and
TxnOffsetCommit. Nothing here reads the batch coordinator: `group_coordinator.GroupCoordinator`
resolves who owns the group, stores each new generation before this state machine hands it out
(`finish_rebalance`), and fences offset commits.

Kafka's rules, and the simplifications (visible to a client only as extra rebalances):
- a join without a member id gets MEMBER_ID_REQUIRED and a fresh id (KIP-394) from JoinGroup v4
  on, unless it is a static member (KIP-345: `group.instance.id`), which gets its id at once;
  older versions get the id with their first answer;
- a static member that joins again under a new member id replaces the old one, which from then
  on gets FENCED_INSTANCE_ID; the replacement rebalances the group (Kafka may hand the old
  assignment back without one);
- a rebalance completes as soon as every known member has rejoined, or when the longest
  rebalance timeout of the members runs out (the others are dropped);
- a member whose session times out is dropped, and the group rebalances.
Pending member ids are kept, unbounded, for the life of the group's ownership here.
"""

from __future__ import annotations

import asyncio
import enum
import logging
from collections.abc import Callable, Mapping
from typing import Final, NamedTuple

from kio.schema.errors import ErrorCode as WireError

from diskless._types import GroupOwnership

_log = logging.getLogger(__name__)

INITIAL_REBALANCE_DELAY_MS: Final = 100
"""Kafka's `group.initial.rebalance.delay.ms` (3 s by default), shortened for a prototype."""


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


class Member:
    __slots__ = (
        "assignment",
        "instance_id",
        "join",
        "last_seen",
        "member_id",
        "protocols",
        "rebalance_timeout_ms",
        "session_timeout_ms",
        "sync",
    )

    def __init__(self, member_id: str, instance_id: str | None) -> None:
        self.member_id = member_id
        self.instance_id = instance_id
        self.protocols: list[tuple[str, bytes]] = []
        self.session_timeout_ms = 10_000
        self.rebalance_timeout_ms = 10_000
        self.last_seen = 0.0
        self.join: asyncio.Future[JoinOutcome] | None = None
        self.sync: asyncio.Future[tuple[WireError, bytes]] | None = None
        self.assignment = b""

    @property
    def rejoining(self) -> bool:
        return self.join is not None and not self.join.done()

    def fail(self, error: WireError) -> None:
        """Answer whatever the member is waiting for with `error`."""
        if self.join is not None and not self.join.done():
            self.join.set_result(JoinOutcome(error, member_id=self.member_id))
        if self.sync is not None and not self.sync.done():
            self.sync.set_result((error, b""))


class GroupState:
    """The members of one group and its rebalances. `on_due(group)` is called when a rebalance
    is due to complete: the caller stores the next generation, then calls `finish_rebalance`."""

    def __init__(
        self,
        group_id: str,
        owner: GroupOwnership,
        term: int,
        now: Callable[[], float],
        on_due: Callable[[GroupState], None],
    ) -> None:
        self.group_id = group_id
        self.owner = owner
        """The broker incarnation coordinating the group here, with the generation it found."""
        self.term = term
        """The term of the owner's registration in which it took the group over."""
        self.generation = owner.generation
        self.phase = GroupPhase.EMPTY
        self.protocol_type: str | None = None
        self.protocol: str | None = None
        self.leader = ""
        self.members: dict[str, Member] = {}
        self.instances: dict[str, str] = {}
        """Static members: group instance id -> the member id it holds now."""
        self.pending: set[str] = set()
        """Member ids handed out with MEMBER_ID_REQUIRED, not yet used to join."""
        self._now = now
        self._on_due = on_due
        self._completion: asyncio.TimerHandle | None = None
        self.completing = False
        """Set while the next generation is being stored (`on_due` ran, `finish_rebalance` not)."""

    # --- checks -------------------------------------------------------------------------------
    def _identify(self, member_id: str, instance_id: str | None) -> Member | WireError:
        """The member a request speaks for: a static member replaced since is fenced
        (FENCED_INSTANCE_ID), an unknown one is UNKNOWN_MEMBER_ID."""
        if instance_id is not None and self.instances.get(instance_id, member_id) != member_id:
            return WireError.fenced_instance_id
        member = self.members.get(member_id)
        return WireError.unknown_member_id if member is None else member

    def check_member(
        self,
        generation: int,
        member_id: str,
        instance_id: str | None,
        *,
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
            member.last_seen = self._now()
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
        new_member_id: Callable[[], str],
        require_known_member_id: bool,
    ) -> JoinOutcome | asyncio.Future[JoinOutcome]:
        """JoinGroup: an answer now, or the future the rebalance's completion answers."""
        if not protocols or (self.members and self.protocol_type != protocol_type):
            return JoinOutcome(WireError.inconsistent_group_protocol, member_id=member_id)
        if not member_id:
            member_id = new_member_id()
            if instance_id is None and require_known_member_id:
                self.pending.add(member_id)
                return JoinOutcome(WireError.member_id_required, member_id=member_id)
            self._admit(member_id, instance_id)
        elif member_id in self.pending:
            self.pending.discard(member_id)
            self._admit(member_id, instance_id)
        else:
            known = self._identify(member_id, instance_id)
            if isinstance(known, WireError):
                return JoinOutcome(known, member_id=member_id)
        member = self.members[member_id]
        self.protocol_type = protocol_type
        member.protocols = protocols
        member.session_timeout_ms = session_timeout_ms
        member.rebalance_timeout_ms = max(rebalance_timeout_ms, session_timeout_ms)
        member.last_seen = self._now()
        if member.rejoining:
            assert member.join is not None
            member.join.set_result(
                JoinOutcome(WireError.rebalance_in_progress, member_id=member_id)
            )
        member.join = future = asyncio.get_running_loop().create_future()
        self._prepare()
        if all(m.rejoining for m in self.members.values()):
            self._schedule(INITIAL_REBALANCE_DELAY_MS if self.generation == 0 else 0)
        return future

    def _admit(self, member_id: str, instance_id: str | None) -> None:
        """A new member; a static one replaces the member its instance id held (fenced)."""
        if instance_id is not None:
            replaced = self.members.pop(self.instances.get(instance_id, ""), None)
            if replaced is not None:
                _log.info(
                    "group %s: static member %s replaced %s",
                    self.group_id,
                    instance_id,
                    replaced.member_id,
                )
                replaced.fail(WireError.fenced_instance_id)
            self.instances[instance_id] = member_id
        self.members[member_id] = Member(member_id, instance_id)

    def _prepare(self) -> None:
        """Start a rebalance: members that are not rejoining learn it from their next call."""
        if self.phase is GroupPhase.PREPARING:
            return
        self.phase = GroupPhase.PREPARING
        for member in self.members.values():
            if member.sync is not None and not member.sync.done():
                member.sync.set_result((WireError.rebalance_in_progress, b""))
        timeout_ms = max((m.rebalance_timeout_ms for m in self.members.values()), default=0)
        self._schedule(timeout_ms)

    def _schedule(self, delay_ms: int) -> None:
        if self._completion is not None:
            self._completion.cancel()
        loop = asyncio.get_running_loop()
        self._completion = loop.call_later(delay_ms / 1000, self._due)

    def _due(self) -> None:
        self._completion = None
        if self.phase is not GroupPhase.PREPARING or self.completing:
            return
        for member_id, member in list(self.members.items()):
            if not member.rejoining:
                _log.info("group %s: member %s did not rejoin; removed", self.group_id, member_id)
                self._remove(member, WireError.unknown_member_id)
        self.completing = True
        self._on_due(self)

    def finish_rebalance(self, generation: int) -> None:
        """The next generation is stored: hand it to every member that rejoined."""
        self.completing = False
        self.generation = generation
        if self.phase is not GroupPhase.PREPARING:
            return
        if not self.members:
            self.phase = GroupPhase.EMPTY
            return
        if self.leader not in self.members:
            self.leader = next(iter(self.members))
        leader = self.members[self.leader]
        offered = [{name for name, _ in m.protocols} for m in self.members.values()]
        common = set.intersection(*offered)
        self.protocol = next((name for name, _ in leader.protocols if name in common), None)
        if self.protocol is None:
            self.fail_all(WireError.inconsistent_group_protocol)
            return
        self.phase = GroupPhase.COMPLETING
        listing = [
            (m.member_id, m.instance_id, dict(m.protocols)[self.protocol])
            for m in self.members.values()
        ]
        for member in self.members.values():
            assert member.join is not None
            member.sync = None
            member.join.set_result(
                JoinOutcome(
                    WireError.none,
                    generation=generation,
                    protocol=self.protocol,
                    leader=self.leader,
                    member_id=member.member_id,
                    members=listing if member.member_id == self.leader else [],
                )
            )

    def abandon_rebalance(self, error: WireError) -> None:
        """The next generation could not be stored: the members waiting to join learn it and
        join again (a retriable `error`); the rebalance stays under way."""
        self.completing = False
        for member in self.members.values():
            if member.rejoining:
                member.fail(error)

    def sync(
        self,
        generation: int,
        member_id: str,
        instance_id: str | None,
        assignments: Mapping[str, bytes],
    ) -> tuple[WireError, bytes] | asyncio.Future[tuple[WireError, bytes]]:
        member = self._identify(member_id, instance_id)
        if isinstance(member, WireError):
            return member, b""
        if generation != self.generation:
            return WireError.illegal_generation, b""
        if self.phase is GroupPhase.PREPARING:
            return WireError.rebalance_in_progress, b""
        member.last_seen = self._now()
        if self.phase is GroupPhase.STABLE:
            return WireError.none, member.assignment
        if member_id == self.leader:
            for other in self.members.values():
                other.assignment = assignments.get(other.member_id, b"")
                if other.sync is not None and not other.sync.done():
                    other.sync.set_result((WireError.none, other.assignment))
            self.phase = GroupPhase.STABLE
            return WireError.none, member.assignment
        member.sync = future = asyncio.get_running_loop().create_future()
        return future

    def heartbeat(self, generation: int, member_id: str, instance_id: str | None) -> WireError:
        member = self._identify(member_id, instance_id)
        if isinstance(member, WireError):
            return member
        member.last_seen = self._now()
        if self.phase is GroupPhase.PREPARING:
            return WireError.rebalance_in_progress
        if generation != self.generation:
            return WireError.illegal_generation
        return WireError.none

    def leave(self, member_id: str, instance_id: str | None) -> WireError:
        if not member_id and instance_id is not None:
            member_id = self.instances.get(instance_id, "")
        member = self._identify(member_id, instance_id)
        if isinstance(member, WireError):
            return member
        self._remove(member, WireError.unknown_member_id)
        self._after_removal()
        return WireError.none

    def expire(self) -> None:
        """Drop members whose session timed out (those waiting in a join are not idle)."""
        now = self._now()
        expired = [
            m
            for m in self.members.values()
            if not m.rejoining and now - m.last_seen > m.session_timeout_ms / 1000
        ]
        for member in expired:
            _log.info("group %s: member %s expired", self.group_id, member.member_id)
            self._remove(member, WireError.unknown_member_id)
        if expired:
            self._after_removal()

    def _remove(self, member: Member, error: WireError) -> None:
        del self.members[member.member_id]
        if member.instance_id is not None and self.instances.get(member.instance_id) == (
            member.member_id
        ):
            del self.instances[member.instance_id]
        member.fail(error)

    def _after_removal(self) -> None:
        if self.leader not in self.members:
            self.leader = ""
        if not self.members and not self.completing:
            if self._completion is not None:
                self._completion.cancel()
                self._completion = None
            self.phase = GroupPhase.EMPTY
            return
        self._prepare()
        if all(m.rejoining for m in self.members.values()):
            self._schedule(0)

    def fail_all(self, error: WireError) -> None:
        """Drop every member (this process no longer coordinates the group, or no protocol is
        common to all): each learns it from what it waits for, or from its next call."""
        if self._completion is not None:
            self._completion.cancel()
            self._completion = None
        for member in list(self.members.values()):
            member.fail(error)
        self.members.clear()
        self.instances.clear()
        self.phase = GroupPhase.EMPTY
