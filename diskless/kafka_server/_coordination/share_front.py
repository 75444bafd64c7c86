"""A process's front to the share-partition states (KIP-932): ShareFetch's acquire, read and
wait, acknowledgements, and the releases of share sessions that end.

No broker leads a share-partition: its state is the coordinator's, changed in steps that this
process batches (`ShareStepQueue`: what waits behind a step goes in the next one). A share fetch
(Kafka's `SharePartitionManager.fetchMessages` and `DelayedShareFetch`) is, per pass:
1. a read of each partition from its share-partition's end as this process last learned it
   (`share_reads`), through the broker's read path, as a Fetch reads;
2. one step carrying the request's acknowledgements and then the acquisition, bounded by what
   the read saw (the read's end, its markers and aborted transactions archived);
3. the batches of what was acquired (read again where the first read did not reach them).
When nothing was acquired and the fetch may wait, it parks as a Fetch does, in the broker's
purgatory, on its partitions from their ends: new commits wake it (this process's at once,
others' through the change feed), and so do, in this process, records released (an
acknowledgement's RELEASE, a session that ended), and the earliest lock's expiry, which the
step reported. A release by another process is seen at the next pass (at most `max_wait` later).

What this process remembers of a share-partition (its start, end and when its earliest lock runs
out) is a hint, never a truth: it says where to read, and lets an idle consumer park without a
step when nothing is in flight and nothing new was written (start equal to end, and the read
from the end empty: no record can be available then, as records only become available below the
end, and the end grows only by acquiring what the log holds). A stale hint costs one more pass.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import time
import uuid
from collections.abc import Callable, Collection, Iterable, Mapping, Sequence
from typing import Final, NamedTuple

from diskless import DisklessBroker
from diskless._results import FetchResult
from diskless._types import ErrorCode, IsolationLevel, OffsetSpec, TopicPartition
from diskless.clock import Clock, SystemClock
from diskless.coordinator import (
    AcknowledgeBatch,
    AcknowledgeType,
    AcquiredRange,
    BatchCoordinator,
    ConfigResourceType,
    OffsetReset,
    ShareAcknowledge,
    ShareAcquire,
    ShareAcquired,
    ShareFetchPartition,
    ShareLimits,
    ShareRelease,
    ShareStepQueue,
    initial_start,
    parse_offset_reset,
)
from diskless.kafka_server._coordination.group_configs import GroupConfigs
from diskless.kafka_server._coordination.share_reads import (
    Batch,
    ShareRead,
    covering,
    first_uncovered,
    share_read,
)
from diskless.kafka_server._coordination.share_sessions import (
    SHARE_SESSIONS_MAX_DEFAULT,
    ShareSession,
    ShareSessions,
)

HINTS_MAX: Final = 100_000
"""The most share-partitions whose start and end this process remembers (the oldest go)."""
TOPIC_IDS_REFRESH_S: Final = 0.1
"""An unknown topic id re-reads the topics at most this often."""
COVER_READS_MAX: Final = 64
"""The most reads a fetch makes to find the batches of what one partition acquired."""
_OFFSET_RESET: Final = "share.auto.offset.reset"
QUICK_PASSES_MAX: Final = 3
"""Passes a fetch makes without parking when its hints were stale."""


class _Hint(NamedTuple):
    start: int
    end: int
    lock_expiry: float | None
    """When (monotonic, this process's clock) the earliest lock runs out; None: nothing held."""


class ShareFetched(NamedTuple):
    """One partition of a ShareFetch's answer."""

    error: ErrorCode
    acquired: tuple[AcquiredRange, ...] = ()
    records: bytes = b""


class ShareFetchAnswer(NamedTuple):
    partitions: dict[TopicPartition, ShareFetched]
    acknowledged: dict[TopicPartition, ErrorCode]


class TopicNames(NamedTuple):
    name: str
    partitions: int


class ShareFront:
    """The share fetches, acknowledgements and sessions of one process (see the module doc)."""

    def __init__(
        self,
        coordinator: BatchCoordinator,
        configs_of: Callable[[str], GroupConfigs],
        *,
        delivery_count_limit: int = ShareLimits().delivery_count_limit,
        max_record_locks: int = ShareLimits().max_record_locks,
        sessions_max: int = SHARE_SESSIONS_MAX_DEFAULT,
        clock: Clock | None = None,
    ) -> None:
        """`configs_of`: a group's effective configs (its lock duration, isolation level and
        offset reset); the delivery count limit and in-flight limit are the broker's."""
        self._coordinator = coordinator
        self.queue = ShareStepQueue(coordinator)
        self.sessions = ShareSessions(sessions_max)
        self._configs_of = configs_of
        self._delivery_count_limit = delivery_count_limit
        self._max_record_locks = max_record_locks
        self._clock: Clock = clock if clock is not None else SystemClock()
        self._hints: collections.OrderedDict[tuple[str, TopicPartition], _Hint] = (
            collections.OrderedDict()
        )
        self._released: dict[str, asyncio.Future[None]] = {}
        self._topics: dict[uuid.UUID, TopicNames] = {}
        self._topics_read_at = -float("inf")
        self._releases: set[asyncio.Task[None]] = set()
        self.steps_skipped = 0
        """Passes that parked without a step (nothing in flight, nothing new)."""

    # --- configs ----------------------------------------------------------------------------
    def limits(self, group_id: str) -> ShareLimits:
        configs = self._configs_of(group_id)
        return ShareLimits(
            self._delivery_count_limit,
            configs.share_record_lock_duration_ms,
            self._max_record_locks,
        )

    def isolation(self, group_id: str) -> IsolationLevel:
        level = self._configs_of(group_id).share_isolation_level
        if level == "read_committed":
            return IsolationLevel.READ_COMMITTED
        return IsolationLevel.READ_UNCOMMITTED

    # --- topic ids --------------------------------------------------------------------------
    async def topics(
        self, broker: DisklessBroker, ids: Iterable[uuid.UUID]
    ) -> dict[uuid.UUID, TopicNames]:
        """The topics of `ids` that exist, by id (read again when one is unknown, at most every
        `TOPIC_IDS_REFRESH_S`). Raises the coordinator's failure."""
        wanted = set(ids)
        if not wanted <= self._topics.keys():
            now = time.monotonic()
            if now - self._topics_read_at >= TOPIC_IDS_REFRESH_S:
                described = await broker.describe_topics()
                self._topics_read_at = now
                self._topics = {
                    d.topic_id: TopicNames(d.name, d.partitions)
                    for d in described
                    if d.topic_id is not None
                }
        return {i: self._topics[i] for i in wanted if i in self._topics}

    def known_topics(self) -> Mapping[uuid.UUID, TopicNames]:
        return self._topics

    # --- acknowledgements and releases ---------------------------------------------------------
    async def acknowledge(
        self,
        group_id: str,
        member_id: str,
        acknowledgements: Mapping[TopicPartition, Sequence[AcknowledgeBatch]],
    ) -> dict[TopicPartition, ErrorCode]:
        """Applied in one step (with whatever else waits for one). Raises the coordinator's
        failure."""
        if not acknowledgements:
            return {}
        request = ShareAcknowledge(group_id, member_id, acknowledgements, self.limits(group_id))
        answer = await self.queue.run(request)
        assert isinstance(answer, dict)
        if _releases(acknowledgements):
            self._wake(group_id)
        return {tp: code for tp, code in answer.items() if isinstance(code, ErrorCode)}

    async def release(
        self, group_id: str, member_id: str, partitions: Sequence[TopicPartition]
    ) -> None:
        """The member's records in `partitions` available again (its session ended)."""
        if not partitions:
            return
        await self.queue.run(ShareRelease(group_id, member_id, partitions, self.limits(group_id)))
        self._wake(group_id)

    def release_later(self, broker: DisklessBroker, sessions: Iterable[ShareSession]) -> None:
        """Release, in the background, what the members of sessions that ended hold in their
        partitions (a failure leaves them to their locks' expiry)."""
        for session in sessions:
            task = asyncio.get_running_loop().create_task(self._release_session(broker, session))
            self._releases.add(task)
            task.add_done_callback(self._releases.discard)

    async def _release_session(self, broker: DisklessBroker, session: ShareSession) -> None:
        with contextlib.suppress(Exception):  # the locks run out by themselves
            names = await self.topics(broker, {topic_id for topic_id, _ in session.partitions})
            partitions = [
                TopicPartition(names[topic_id].name, index)
                for topic_id, index in session.partitions
                if topic_id in names
            ]
            await self.release(session.key.group_id, session.key.member_id, partitions)

    def disconnected(self, broker: DisklessBroker, connection: object) -> None:
        """A connection closed: the share sessions opened on it end, as in Kafka."""
        self.release_later(broker, self.sessions.disconnected(connection))

    def member_left(self, group_id: str, member_id: str) -> None:
        """A member left its group or was removed from it (called in the group owner's
        process): its sessions here end, and what it holds in any of the group's
        share-partitions is released, in the background (as Kafka's share group listener
        releases a departed member's records)."""
        self.sessions.member_left(group_id, member_id)
        task = asyncio.get_running_loop().create_task(self._release_member(group_id, member_id))
        self._releases.add(task)
        task.add_done_callback(self._releases.discard)

    async def _release_member(self, group_id: str, member_id: str) -> None:
        with contextlib.suppress(Exception):  # the locks run out by themselves
            partitions = list(await self._coordinator.share_offsets(group_id))
            await self.release(group_id, member_id, partitions)

    async def close(self) -> None:
        """Wait for the releases under way, then for the steps queued."""
        if self._releases:
            await asyncio.gather(*self._releases, return_exceptions=True)
        await self.queue.close()

    def _wake(self, group_id: str) -> None:
        future = self._released.pop(group_id, None)
        if future is not None and not future.done():
            future.set_result(None)

    def _released_signal(self, group_id: str) -> asyncio.Future[None]:
        future = self._released.get(group_id)
        if future is None or future.done():
            future = self._released[group_id] = asyncio.get_running_loop().create_future()
        return future

    # --- fetch ------------------------------------------------------------------------------
    async def fetch(
        self,
        broker: DisklessBroker,
        group_id: str,
        member_id: str,
        partitions: Sequence[TopicPartition],
        acknowledgements: Mapping[TopicPartition, Sequence[AcknowledgeBatch]],
        *,
        max_records: int,
        max_bytes: int,
        min_bytes: int,
        max_wait_ms: int,
    ) -> ShareFetchAnswer:
        """ShareFetch: the acknowledgements applied, then records acquired in `partitions` (see
        the module doc), waiting up to `max_wait_ms` while none can be. Raises the
        coordinator's failure."""
        limits = self.limits(group_id)
        isolation = self.isolation(group_id)
        deadline = time.monotonic() + max(0, max_wait_ms) / 1000
        errors: dict[TopicPartition, ErrorCode] = {}
        acknowledged: dict[TopicPartition, ErrorCode] = {}
        pending = dict(acknowledgements)
        parked_reads: dict[TopicPartition, ShareRead] = {}
        quick = 0
        while True:
            wanted = [tp for tp in partitions if tp not in errors]
            reads = await self._reads(broker, group_id, wanted, isolation, max_bytes, parked_reads)
            for tp, read in reads.items():
                if read.result.error is not ErrorCode.NONE:
                    errors[tp] = read.result.error
            readable = {tp: r for tp, r in reads.items() if r.result.error is ErrorCode.NONE}
            acquired: dict[TopicPartition, ShareAcquired] = {}
            if pending or not self._quiet(group_id, readable):
                acked, acquired = await self._step(
                    group_id, member_id, pending, readable, max_records, limits
                )
                acknowledged.update(acked)
                pending = {}
            else:
                self.steps_skipped += 1
            got = {tp: a.acquired for tp, a in acquired.items() if a.acquired}
            if got:
                answers = await self._records(broker, readable, got, isolation, max_bytes)
                answers.update((tp, ShareFetched(code)) for tp, code in errors.items())
                return ShareFetchAnswer(answers, acknowledged)
            stale = any(a.end != readable[tp].offset for tp, a in acquired.items())
            full = {  # records past the end it may not take (at its in-flight limit)
                tp for tp, a in acquired.items() if a.end == readable[tp].offset < readable[tp].end
            }
            now = time.monotonic()
            if now >= deadline or min_bytes <= 0 or not readable:
                break
            if stale and quick < QUICK_PASSES_MAX:
                quick += 1
                continue
            quick = 0
            parked = await self._park(
                broker, group_id, readable, full, isolation, max_bytes, min_bytes, deadline
            )
            if parked is None:  # the broker is closing
                break
            parked_reads = parked
        answers = {tp: ShareFetched(ErrorCode.NONE) for tp in partitions}
        answers.update((tp, ShareFetched(code)) for tp, code in errors.items())
        return ShareFetchAnswer(answers, acknowledged)

    def _quiet(self, group_id: str, reads: Mapping[TopicPartition, ShareRead]) -> bool:
        """Whether no record can be acquired in any of `reads` (see the module doc)."""
        for tp, read in reads.items():
            hint = self._hints.get((group_id, tp))
            if hint is None or hint.start != hint.end or read.end != read.offset:
                return False
            if read.offset != hint.end:
                return False
        return True

    async def _reads(
        self,
        broker: DisklessBroker,
        group_id: str,
        partitions: Sequence[TopicPartition],
        isolation: IsolationLevel,
        max_bytes: int,
        parked: Mapping[TopicPartition, ShareRead],
    ) -> dict[TopicPartition, ShareRead]:
        """Each partition read from its share-partition's end (as last learned, else where it
        would start), reusing what a park just read."""
        reads = {tp: parked[tp] for tp in partitions if tp in parked}
        offsets: dict[TopicPartition, int] = {}
        unknown = []
        for tp in partitions:
            if tp in reads:
                continue
            hint = self._hints.get((group_id, tp))
            if hint is None:
                unknown.append(tp)
            else:
                offsets[tp] = hint.end
        if unknown:
            starts = await self._initial_starts(broker, group_id, unknown, isolation)
            for tp, start in starts.items():
                if isinstance(start, ErrorCode):
                    reads[tp] = ShareRead(-1, FetchResult(start), (), -1, ())
                else:
                    offsets[tp] = start
        if offsets:
            results = await broker.fetch(
                offsets,
                max_bytes=max_bytes,
                partition_max_bytes=max_bytes,
                isolation_level=isolation,
            )
            for tp, offset in offsets.items():
                result = results[tp]
                if result.error is ErrorCode.OFFSET_OUT_OF_RANGE:  # below the log's start now
                    self._hints.pop((group_id, tp), None)
                    result = FetchResult(ErrorCode.NONE)  # (nothing read, nothing trimmed)
                reads[tp] = share_read(offset, result, isolation)
        return reads

    async def _initial_starts(
        self,
        broker: DisklessBroker,
        group_id: str,
        partitions: Sequence[TopicPartition],
        isolation: IsolationLevel,
    ) -> dict[TopicPartition, int | ErrorCode]:
        """Where each share-partition would start if it has no state yet
        (`share.auto.offset.reset`, read from the coordinator, not this process's copy of the
        group configs: a group configured just before its first member fetches starts where it
        was told); the step keeps the state it has."""
        stored = await self._coordinator.describe_resource_configs(
            ConfigResourceType.GROUP, [group_id]
        )
        reset = parse_offset_reset(stored.get(group_id, {}).get(_OFFSET_RESET, "latest"))
        reset = reset if reset is not None else OffsetReset("latest")
        earliest = await broker.list_offsets(
            dict.fromkeys(partitions, int(OffsetSpec.EARLIEST)), isolation_level=isolation
        )
        latest = await broker.list_offsets(
            dict.fromkeys(partitions, int(OffsetSpec.LATEST)), isolation_level=isolation
        )
        by_time: dict[TopicPartition, int | None] = dict.fromkeys(partitions)
        if reset.strategy == "by_duration":
            since = self._clock.now_ms() - reset.duration_ms
            found = await broker.list_offsets(
                dict.fromkeys(partitions, max(0, since)), isolation_level=isolation
            )
            by_time = {tp: r.offset if r.offset >= 0 else None for tp, r in found.items()}
        starts: dict[TopicPartition, int | ErrorCode] = {}
        for tp in partitions:
            first, last = earliest[tp], latest[tp]
            if first.error is not ErrorCode.NONE or last.error is not ErrorCode.NONE:
                starts[tp] = first.error if first.error is not ErrorCode.NONE else last.error
                continue
            starts[tp] = initial_start(reset, first.offset, last.offset, by_time.get(tp))
        return starts

    async def _step(
        self,
        group_id: str,
        member_id: str,
        acknowledgements: Mapping[TopicPartition, Sequence[AcknowledgeBatch]],
        reads: Mapping[TopicPartition, ShareRead],
        max_records: int,
        limits: ShareLimits,
    ) -> tuple[dict[TopicPartition, ErrorCode], dict[TopicPartition, ShareAcquired]]:
        """The acknowledgements and the acquisition, sent together (one step, unless the queue
        cuts between them)."""
        wanted = [
            ShareFetchPartition(
                tp,
                max_records,
                fetchable_end=read.end,
                log_start=max(0, read.result.log_start_offset),
                initial_start=read.offset,
                aborted=read.skipped,
                aborted_from=read.offset,
            )
            for tp, read in reads.items()
        ]
        acquire = self.queue.run(ShareAcquire(group_id, member_id, wanted, limits))
        if acknowledgements:
            acked, acquired = await asyncio.gather(
                self.acknowledge(group_id, member_id, acknowledgements), acquire
            )
        else:
            acked, acquired = {}, await acquire
        assert isinstance(acquired, dict)
        answers = {tp: a for tp, a in acquired.items() if isinstance(a, ShareAcquired)}
        now = time.monotonic()
        for tp, a in answers.items():
            key = (group_id, tp)
            expiry = None if a.lock_expiry_ms is None else now + a.lock_expiry_ms / 1000
            self._hints[key] = _Hint(a.start, a.end, expiry)
            self._hints.move_to_end(key)
        while len(self._hints) > HINTS_MAX:
            self._hints.popitem(last=False)
        return acked, answers

    async def _records(
        self,
        broker: DisklessBroker,
        reads: Mapping[TopicPartition, ShareRead],
        acquired: Mapping[TopicPartition, tuple[AcquiredRange, ...]],
        isolation: IsolationLevel,
        max_bytes: int,
    ) -> dict[TopicPartition, ShareFetched]:
        answers = {tp: ShareFetched(ErrorCode.NONE) for tp in reads}
        for tp, ranges in acquired.items():
            batches = list(reads[tp].batches)
            for _ in range(COVER_READS_MAX):
                missing = first_uncovered(batches, ranges)
                if missing is None:
                    break
                result = (
                    await broker.fetch(
                        {tp: missing},
                        max_bytes=max_bytes,
                        partition_max_bytes=max_bytes,
                        isolation_level=isolation,
                    )
                )[tp]
                found = share_read(missing, result, isolation).batches
                later = [b.first for b in found if b.first > missing]
                if not any(b.first <= missing <= b.last for b in found):  # nothing holds it
                    gap_last = min(later) - 1 if later else max(r.last for r in ranges)
                    found += (Batch(missing, gap_last, b""),)
                batches.extend(found)
            kept = covering(batches, ranges)
            answers[tp] = ShareFetched(ErrorCode.NONE, ranges, b"".join(b.data for b in kept))
        return answers

    async def _park(
        self,
        broker: DisklessBroker,
        group_id: str,
        reads: Mapping[TopicPartition, ShareRead],
        full: Collection[TopicPartition],
        isolation: IsolationLevel,
        max_bytes: int,
        min_bytes: int,
        deadline: float,
    ) -> dict[TopicPartition, ShareRead] | None:
        """Wait, as a Fetch waits, for records past the ends of the share-partitions of `reads`
        (but those of `full`, at their in-flight limit: records there wait for a lock to end), a
        release in this process, the earliest lock's expiry, or the deadline. The reads the wait
        made when it ended with new records; None when it ended early for nothing (the broker
        closes)."""
        now = time.monotonic()
        until = deadline
        for tp in reads:
            hint = self._hints.get((group_id, tp))
            if hint is not None and hint.lock_expiry is not None:
                until = min(until, hint.lock_expiry)
        wait_ms = max(0, round((until - now) * 1000))
        offsets = {
            tp: (hint.end if (hint := self._hints.get((group_id, tp))) is not None else r.offset)
            for tp, r in reads.items()
            if tp not in full
        }
        released = self._released_signal(group_id)
        waiting = asyncio.ensure_future(
            broker.fetch(
                offsets,
                max_bytes=max_bytes,
                partition_max_bytes=max_bytes,
                isolation_level=isolation,
                min_bytes=max(1, min_bytes),
                max_wait_ms=wait_ms,
            )
            if offsets
            else asyncio.sleep(wait_ms / 1000, {})
        )
        try:
            await asyncio.wait((waiting, released), return_when=asyncio.FIRST_COMPLETED)
        finally:
            if not waiting.done():
                waiting.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await waiting
        if released.done() or not waiting.done() or waiting.cancelled():
            return {}
        results = waiting.result()
        found = {tp: share_read(offsets[tp], results[tp], isolation) for tp in offsets}
        if any(r.batches for r in found.values()):
            return found
        if time.monotonic() < until - 0.05 and wait_ms > 0:  # woken for nothing: closing
            return None
        return {}


def _releases(acknowledgements: Mapping[TopicPartition, Sequence[AcknowledgeBatch]]) -> bool:
    """Whether some acknowledgement releases records (another member may then take them)."""
    return any(
        AcknowledgeType.RELEASE in b.types for batches in acknowledgements.values() for b in batches
    )
