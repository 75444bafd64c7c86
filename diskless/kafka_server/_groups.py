"""A minimal consumer-group coordinator: membership per process, offsets in the batch coordinator.

Enough of Kafka's classic group protocol for clients to subscribe and commit: JoinGroup, SyncGroup,
Heartbeat, LeaveGroup, OffsetCommit and OffsetFetch. Deliberate simplifications, all visible to a
client only as extra rebalances:
- a join without a member id gets MEMBER_ID_REQUIRED and a fresh id (KIP-394) from JoinGroup v4
  on; older versions get the id with their first answer. Pending ids are kept, unbounded, for the
  life of the process (a prototype; Kafka expires them after the session timeout);
- no static membership (group instance ids are ignored);
- a rebalance completes as soon as every known member has rejoined, or when the longest
  rebalance timeout of the members runs out (the others are dropped);
Committed offsets are kept by the batch coordinator (Kafka keeps them in `__consumer_offsets`):
they survive a restart and read the same from every broker process. Membership is per process: a
group whose members reach different processes would form one group per process (FindCoordinator
sends all of a group's members to one broker to avoid that). A failure of the batch coordinator
propagates as `DisklessError`; the handlers turn it into a retriable code (`_errors`).
"""

from __future__ import annotations

import asyncio
import enum
import itertools
import logging
from collections.abc import Mapping
from typing import Final, NamedTuple

from kio.schema.errors import ErrorCode as WireError

from diskless._types import TopicPartition
from diskless.clock import Clock, SystemClock
from diskless.coordinator import BatchCoordinator
from diskless.kafka_server._errors import wire

_log = logging.getLogger(__name__)

SESSION_CHECK_INTERVAL_S: Final = 0.5
INITIAL_REBALANCE_DELAY_MS: Final = 100
"""Kafka's `group.initial.rebalance.delay.ms` (3 s by default), shortened for a prototype."""


class _State(enum.Enum):
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
    members: list[tuple[str, bytes]] = []  # noqa: RUF012 - NamedTuple default, never mutated


class _Member:
    __slots__ = (
        "assignment",
        "join",
        "last_seen",
        "member_id",
        "protocols",
        "rebalance_timeout_ms",
        "session_timeout_ms",
        "sync",
    )

    def __init__(self, member_id: str) -> None:
        self.member_id = member_id
        self.protocols: list[tuple[str, bytes]] = []
        self.session_timeout_ms = 10_000
        self.rebalance_timeout_ms = 10_000
        self.last_seen = 0.0
        self.join: asyncio.Future[JoinOutcome] | None = None
        self.sync: asyncio.Future[tuple[WireError, bytes]] | None = None
        self.assignment = b""


class _Group:
    def __init__(self, group_id: str) -> None:
        self.group_id = group_id
        self.state = _State.EMPTY
        self.generation = 0
        self.protocol_type: str | None = None
        self.protocol: str | None = None
        self.leader = ""
        self.members: dict[str, _Member] = {}
        self.pending: set[str] = set()
        """Member ids handed out with MEMBER_ID_REQUIRED, not yet used to join."""
        self.completion: asyncio.TimerHandle | None = None


class GroupCoordinator:
    def __init__(self, coordinator: BatchCoordinator, *, clock: Clock | None = None) -> None:
        self._coordinator = coordinator
        self._clock = clock or SystemClock()
        self._groups: dict[str, _Group] = {}
        self._member_ids = itertools.count(1)
        self._expiry_task: asyncio.Task[None] | None = None

    async def start(self) -> None:
        if self._expiry_task is None:
            self._expiry_task = asyncio.create_task(self._expire_forever())

    async def close(self) -> None:
        task, self._expiry_task = self._expiry_task, None
        if task is not None:
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)
        for group in self._groups.values():
            if group.completion is not None:
                group.completion.cancel()
            for member in group.members.values():
                _fail(member, WireError.coordinator_not_available)

    def _group(self, group_id: str) -> _Group:
        group = self._groups.get(group_id)
        if group is None:
            group = self._groups[group_id] = _Group(group_id)
        return group

    # --- membership ---------------------------------------------------------------------------
    async def join(
        self,
        *,
        group_id: str,
        member_id: str,
        protocol_type: str,
        protocols: list[tuple[str, bytes]],
        session_timeout_ms: int,
        rebalance_timeout_ms: int,
        require_known_member_id: bool = False,
    ) -> JoinOutcome:
        """JoinGroup; `require_known_member_id` from v4 on (a client may send its first join
        twice, and each anonymous join would otherwise become a member of its own)."""
        group = self._group(group_id)
        if not protocols:
            return JoinOutcome(WireError.inconsistent_group_protocol, member_id=member_id)
        if group.members and group.protocol_type != protocol_type:
            return JoinOutcome(WireError.inconsistent_group_protocol, member_id=member_id)
        if not member_id:
            member_id = f"{group_id}-member-{next(self._member_ids)}"
            if require_known_member_id:
                group.pending.add(member_id)
                return JoinOutcome(WireError.member_id_required, member_id=member_id)
            group.members[member_id] = _Member(member_id)
        elif member_id in group.pending:
            group.pending.discard(member_id)
            group.members[member_id] = _Member(member_id)
        elif member_id not in group.members:
            return JoinOutcome(WireError.unknown_member_id, member_id=member_id)
        member = group.members[member_id]
        group.protocol_type = protocol_type
        member.protocols = protocols
        member.session_timeout_ms = session_timeout_ms
        member.rebalance_timeout_ms = max(rebalance_timeout_ms, session_timeout_ms)
        member.last_seen = self._clock.monotonic()
        if member.join is not None and not member.join.done():
            member.join.set_result(
                JoinOutcome(WireError.rebalance_in_progress, member_id=member_id)
            )
        member.join = asyncio.get_running_loop().create_future()
        future = member.join
        self._prepare(group)
        if all(m.join is not None and not m.join.done() for m in group.members.values()):
            delay_ms = INITIAL_REBALANCE_DELAY_MS if group.generation == 0 else 0
            self._schedule_completion(group, delay_ms)
        return await future

    def _prepare(self, group: _Group) -> None:
        """Start a rebalance: members that are not rejoining learn it from their next call."""
        if group.state is _State.PREPARING:
            return
        group.state = _State.PREPARING
        for member in group.members.values():
            if member.sync is not None and not member.sync.done():
                member.sync.set_result((WireError.rebalance_in_progress, b""))
        timeout_ms = max((m.rebalance_timeout_ms for m in group.members.values()), default=0)
        self._schedule_completion(group, timeout_ms)

    def _schedule_completion(self, group: _Group, delay_ms: int) -> None:
        if group.completion is not None:
            group.completion.cancel()
        loop = asyncio.get_running_loop()
        group.completion = loop.call_later(delay_ms / 1000, self._complete, group)

    def _complete(self, group: _Group) -> None:
        group.completion = None
        if group.state is not _State.PREPARING:
            return
        for member_id, member in list(group.members.items()):
            if member.join is None or member.join.done():
                _log.info("group %s: member %s did not rejoin; removed", group.group_id, member_id)
                _fail(member, WireError.unknown_member_id)
                del group.members[member_id]
        if not group.members:
            group.state = _State.EMPTY
            group.generation += 1
            return
        group.generation += 1
        if group.leader not in group.members:
            group.leader = next(iter(group.members))
        leader = group.members[group.leader]
        common = set.intersection(
            *({name for name, _ in m.protocols} for m in group.members.values())
        )
        group.protocol = next((name for name, _ in leader.protocols if name in common), None)
        if group.protocol is None:
            for member in group.members.values():
                _fail(member, WireError.inconsistent_group_protocol)
            group.members.clear()
            group.state = _State.EMPTY
            return
        group.state = _State.COMPLETING
        listing = [(m.member_id, dict(m.protocols)[group.protocol]) for m in group.members.values()]
        for member in group.members.values():
            assert member.join is not None
            member.sync = None
            member.join.set_result(
                JoinOutcome(
                    WireError.none,
                    generation=group.generation,
                    protocol=group.protocol,
                    leader=group.leader,
                    member_id=member.member_id,
                    members=listing if member.member_id == group.leader else [],
                )
            )

    async def sync(
        self, group_id: str, generation: int, member_id: str, assignments: Mapping[str, bytes]
    ) -> tuple[WireError, bytes]:
        group = self._group(group_id)
        member = group.members.get(member_id)
        if member is None:
            return WireError.unknown_member_id, b""
        if generation != group.generation:
            return WireError.illegal_generation, b""
        if group.state is _State.PREPARING:
            return WireError.rebalance_in_progress, b""
        member.last_seen = self._clock.monotonic()
        if group.state is _State.STABLE:
            return WireError.none, member.assignment
        if member_id == group.leader:
            for other in group.members.values():
                other.assignment = assignments.get(other.member_id, b"")
                if other.sync is not None and not other.sync.done():
                    other.sync.set_result((WireError.none, other.assignment))
            group.state = _State.STABLE
            return WireError.none, member.assignment
        member.sync = asyncio.get_running_loop().create_future()
        return await member.sync

    def heartbeat(self, group_id: str, generation: int, member_id: str) -> WireError:
        group = self._group(group_id)
        member = group.members.get(member_id)
        if member is None:
            return WireError.unknown_member_id
        member.last_seen = self._clock.monotonic()
        if group.state is _State.PREPARING:
            return WireError.rebalance_in_progress
        if generation != group.generation:
            return WireError.illegal_generation
        return WireError.none

    def leave(self, group_id: str, member_id: str) -> WireError:
        group = self._group(group_id)
        member = group.members.pop(member_id, None)
        if member is None:
            return WireError.unknown_member_id
        _fail(member, WireError.unknown_member_id)
        self._after_removal(group)
        return WireError.none

    def _after_removal(self, group: _Group) -> None:
        if group.leader not in group.members:
            group.leader = ""
        if not group.members:
            if group.completion is not None:
                group.completion.cancel()
                group.completion = None
            group.state = _State.EMPTY
            return
        self._prepare(group)
        if all(m.join is not None and not m.join.done() for m in group.members.values()):
            self._schedule_completion(group, 0)

    async def _expire_forever(self) -> None:
        while True:
            await self._clock.sleep(SESSION_CHECK_INTERVAL_S)
            now = self._clock.monotonic()
            for group in self._groups.values():
                expired = [
                    m
                    for m in group.members.values()
                    if (m.join is None or m.join.done())
                    and now - m.last_seen > m.session_timeout_ms / 1000
                ]
                for member in expired:
                    _log.info("group %s: member %s expired", group.group_id, member.member_id)
                    del group.members[member.member_id]
                    _fail(member, WireError.unknown_member_id)
                if expired:
                    self._after_removal(group)

    # --- offsets ------------------------------------------------------------------------------
    def check_member(self, group_id: str, generation: int, member_id: str) -> WireError:
        """May this member commit now? A commit without generation and member id (a consumer
        that assigns its partitions itself, or an admin tool) always may."""
        if generation < 0 and not member_id:
            return WireError.none
        group = self._group(group_id)
        member = group.members.get(member_id)
        if member is None:
            return WireError.unknown_member_id
        if group.state is _State.PREPARING:
            return WireError.rebalance_in_progress
        if generation != group.generation:
            return WireError.illegal_generation
        member.last_seen = self._clock.monotonic()
        return WireError.none

    def check_txn_member(self, group_id: str, generation: int, member_id: str) -> WireError:
        """TxnOffsetCommit v3+ (KIP-447) names the consumer whose offsets the producer commits;
        a zombie of an older generation is refused. Kafka checks no rebalance state here."""
        group = self._groups.get(group_id)
        if member_id and (group is None or member_id not in group.members):
            return WireError.unknown_member_id
        if generation >= 0 and (group is None or generation != group.generation):
            return WireError.illegal_generation
        return WireError.none

    async def commit_offsets(
        self,
        group_id: str,
        generation: int,
        member_id: str,
        offsets: Mapping[TopicPartition, tuple[int, str | None]],
    ) -> dict[TopicPartition, WireError]:
        """OffsetCommit: the answer per partition (UNKNOWN_TOPIC_OR_PARTITION for a partition
        that does not exist); raises `DisklessError` when the batch coordinator fails."""
        error = self.check_member(group_id, generation, member_id)
        if error is not WireError.none:
            return dict.fromkeys(offsets, error)
        if not offsets:
            return {}
        codes = await self._coordinator.commit_offsets(group_id, offsets)
        return {tp: wire(codes[tp]) for tp in offsets}

    async def committed_offsets(
        self, group_id: str
    ) -> dict[TopicPartition, tuple[int, str | None]]:
        """OffsetFetch: the group's offsets, as every broker process sees them."""
        return await self._coordinator.fetch_offsets(group_id)


def _fail(member: _Member, error: WireError) -> None:
    if member.join is not None and not member.join.done():
        member.join.set_result(JoinOutcome(error, member_id=member.member_id))
    if member.sync is not None and not member.sync.done():
        member.sync.set_result((error, b""))
