"""A share-partition's state (KIP-932), held by no leader: the rules of its atomic steps.

Kafka keeps each share-partition's in-flight records on the partition's leader, and a timer there
releases a lock that runs out. A diskless topic has no leader: any broker answers any partition.
So the state is one cluster-wide value in the batch coordinator, and each step (acquire,
acknowledge, release a member, move the start) reads it, decides here, and writes it back in one
atomic unit. No timer holds a lock: a lock is a deadline on the coordinator's clock, and every
step first treats a lock past its deadline as released by its timeout (`expire`), so a lock runs
out even when the broker that granted it died.

The state is kept as ranges (Kafka's in-flight batches), not records: adjacent records in the same
state, with the same delivery count, holder and deadline, are one `ShareRange`, so a step costs
per range. The ranges cover exactly [start, end): the share-partition start offset (SPSO) and
the next offset never acquired (one past Kafka's SPEO). Records below the start are done.

Kafka's transitions (`InFlightState`): an acquisition makes AVAILABLE records ACQUIRED and adds
one to their delivery count; ACCEPT makes them ACKNOWLEDGED, REJECT and GAP ARCHIVED; RELEASE
and an expired lock make them AVAILABLE again, unless their delivery count reached the limit,
when they are ARCHIVED; a member that leaves releases what it holds with one delivery fewer (they
were fetched, perhaps never delivered), never archiving them. A member may acknowledge only what
it holds; the first batch that names anything else fails the partition's whole acknowledgement
(INVALID_RECORD_STATE), as Kafka rolls a partition's acknowledgement back. Moving the start
(AlterShareGroupOffsets, DeleteShareGroupOffsets) begins a new state epoch, which fences what was
acquired before it (FENCED_STATE_EPOCH).
"""

from __future__ import annotations

import enum
import re
from collections.abc import Iterable, Mapping, Sequence
from typing import Final, NamedTuple, TypeAlias

import msgspec

from diskless._types import ErrorCode, TopicPartition

NO_MEMBER: Final = ""
UNINITIALIZED: Final = -1
"""The start and end of a share-partition that has no state yet (or whose offsets were deleted):
the next acquisition initializes it from `share.auto.offset.reset`."""

DELIVERY_COUNT_LIMIT_DEFAULT: Final = 5
"""`group.share.delivery.count.limit`."""
RECORD_LOCK_DURATION_MS_DEFAULT: Final = 30_000
"""`group.share.record.lock.duration.ms`."""
PARTITION_MAX_RECORD_LOCKS_DEFAULT: Final = 2000
"""`group.share.partition.max.record.locks`."""
SHARE_RANGES_MAX: Final = 100_000
"""The most ranges a share-partition's state may hold: every record in flight in a state of its
own, at the largest in-flight limit Kafka allows, and some to spare."""


class RecordState(enum.IntEnum):
    """A record's state, numbered as Kafka's `RecordState` (the persisted ids)."""

    AVAILABLE = 0
    ACQUIRED = 1
    ACKNOWLEDGED = 2
    ARCHIVED = 4

    @property
    def terminal(self) -> bool:
        return self is RecordState.ACKNOWLEDGED or self is RecordState.ARCHIVED


class AcknowledgeType(enum.IntEnum):
    """ShareFetch's and ShareAcknowledge's `AcknowledgeTypes`."""

    GAP = 0
    ACCEPT = 1
    RELEASE = 2
    REJECT = 3


class ShareRange(msgspec.Struct, frozen=True, array_like=True):
    """The records [first, last], all in one state."""

    first: int
    last: int
    state: RecordState
    delivery_count: int
    member: str = NO_MEMBER
    """Who holds them (ACQUIRED only)."""
    deadline_ms: int = 0
    """When their lock runs out, on the coordinator's clock (ACQUIRED only)."""


class SharePartitionState(msgspec.Struct, frozen=True, array_like=True):
    """One share-partition's whole state, stored as one value."""

    state_epoch: int
    start: int
    """The share-partition start offset (SPSO); `UNINITIALIZED` before the first acquisition."""
    end: int
    """The first offset never acquired: the ranges cover exactly [start, end)."""
    ranges: tuple[ShareRange, ...] = ()

    @property
    def initialized(self) -> bool:
        return self.start != UNINITIALIZED


NEW_STATE: Final = SharePartitionState(0, UNINITIALIZED, UNINITIALIZED)

_encoder: Final = msgspec.msgpack.Encoder()
_decoder: Final = msgspec.msgpack.Decoder(SharePartitionState)


def encode_state(state: SharePartitionState) -> bytes:
    return _encoder.encode(state)


def decode_state(blob: bytes) -> SharePartitionState:
    return _decoder.decode(blob)


class ShareLimits(NamedTuple):
    """A share group's limits for its steps (its configs, or the broker's defaults)."""

    delivery_count_limit: int = DELIVERY_COUNT_LIMIT_DEFAULT
    lock_duration_ms: int = RECORD_LOCK_DURATION_MS_DEFAULT
    max_record_locks: int = PARTITION_MAX_RECORD_LOCKS_DEFAULT


class AcquiredRange(NamedTuple):
    """ShareFetch's `AcquiredRecords`: the member now holds [first, last], delivered this many
    times (this delivery included)."""

    first: int
    last: int
    delivery_count: int


class Acquisition(NamedTuple):
    state: SharePartitionState
    acquired: tuple[AcquiredRange, ...]


class AcknowledgeBatch(NamedTuple):
    """ShareFetch's and ShareAcknowledge's `AcknowledgementBatches`: one type for [first, last],
    or one per offset."""

    first: int
    last: int
    types: tuple[int, ...]


class Acknowledgement(NamedTuple):
    state: SharePartitionState
    error: ErrorCode


# --- ranges ------------------------------------------------------------------------------------


def _cut(
    ranges: Sequence[ShareRange], first: int, last: int
) -> tuple[list[ShareRange], list[ShareRange], list[ShareRange]]:
    """The ranges before [first, last], within it (clipped to it), and after it."""
    before: list[ShareRange] = []
    inside: list[ShareRange] = []
    after: list[ShareRange] = []
    replace = msgspec.structs.replace
    for r in ranges:
        if r.last < first:
            before.append(r)
        elif r.first > last:
            after.append(r)
        else:
            if r.first < first:
                before.append(replace(r, last=first - 1))
            inside.append(replace(r, first=max(r.first, first), last=min(r.last, last)))
            if r.last > last:
                after.append(replace(r, first=last + 1))
    return before, inside, after


def _coalesced(ranges: Iterable[ShareRange]) -> list[ShareRange]:
    """Adjacent ranges alike in all but their offsets, as one."""
    out: list[ShareRange] = []
    for r in ranges:
        if out:
            p = out[-1]
            if (
                p.last + 1 == r.first
                and p.state == r.state
                and p.delivery_count == r.delivery_count
                and p.member == r.member
                and p.deadline_ms == r.deadline_ms
            ):
                out[-1] = msgspec.structs.replace(p, last=r.last)
                continue
        out.append(r)
    return out


def _settled(state: SharePartitionState, ranges: Iterable[ShareRange]) -> SharePartitionState:
    """`state` holding `ranges`, its start moved past the terminal records that lead them."""
    kept = _coalesced(ranges)
    done = 0
    while done < len(kept) and kept[done].state.terminal:
        done += 1
    kept = kept[done:]
    start = kept[0].first if kept else state.end
    assert len(kept) <= SHARE_RANGES_MAX, "a share-partition's ranges outgrew their limit"
    return SharePartitionState(state.state_epoch, start, state.end, tuple(kept))


def _returned(r: ShareRange, limit: int) -> ShareRange:
    """An acquired range released (RELEASE, or its lock ran out): available again, or archived
    once it was delivered as often as the limit allows."""
    state = RecordState.ARCHIVED if r.delivery_count >= limit else RecordState.AVAILABLE
    return ShareRange(r.first, r.last, state, r.delivery_count)


def expire(state: SharePartitionState, now_ms: int, limits: ShareLimits) -> SharePartitionState:
    """`state` with every lock whose deadline passed released by its timeout: what every step
    sees first, so a lock needs no timer of a broker's to run out."""
    if not any(r.state is RecordState.ACQUIRED and r.deadline_ms <= now_ms for r in state.ranges):
        return state
    ranges = (
        _returned(r, limits.delivery_count_limit)
        if r.state is RecordState.ACQUIRED and r.deadline_ms <= now_ms
        else r
        for r in state.ranges
    )
    return _settled(state, ranges)


def next_deadline(state: SharePartitionState) -> int | None:
    """When the earliest lock of the share-partition runs out (None: nothing is acquired)."""
    deadlines = [r.deadline_ms for r in state.ranges if r.state is RecordState.ACQUIRED]
    return min(deadlines) if deadlines else None


# --- the steps -----------------------------------------------------------------------------


class OffsetReset(NamedTuple):
    """`share.auto.offset.reset`: where a share-partition with no state begins."""

    strategy: str
    """"latest", "earliest" or "by_duration"."""
    duration_ms: int = 0
    """by_duration: the records at most this old at initialization are delivered."""


RESET_LATEST: Final = OffsetReset("latest")

_DURATION: Final = re.compile(
    r"P(?:(?P<d>\d+)D)?(?:T(?:(?P<h>\d+)H)?(?:(?P<m>\d+)M)?(?:(?P<s>\d+)(?:\.(?P<f>\d{1,9}))?S)?)?"
)


def parse_offset_reset(value: str) -> OffsetReset | None:
    """`share.auto.offset.reset`'s value (latest, earliest, by_duration:PnDTnHnMn.nS, as Kafka's
    `Duration.parse` with no negative parts); None when it is not one. As Kafka's
    `ShareGroupAutoOffsetResetStrategy`, the strategy's name is lower case (EARLIEST is refused)
    and only the duration's letters may be either."""
    text = value.strip()
    if text in ("latest", "earliest"):
        return OffsetReset(text)
    prefix = "by_duration:"
    if not text.startswith(prefix):
        return None
    spec = text[len(prefix) :].upper()
    match = _DURATION.fullmatch(spec)
    if match is None or spec in ("P", "PT") or spec.endswith("T"):
        return None
    d, h, m, s = (int(match.group(k) or 0) for k in "dhms")
    millis = int((match.group("f") or "0").ljust(9, "0")[:3])
    return OffsetReset("by_duration", (((d * 24 + h) * 60 + m) * 60 + s) * 1000 + millis)


def initial_start(
    reset: OffsetReset, log_start: int, latest: int, offset_for_time: int | None
) -> int:
    """Where a new share-partition starts: the log's start (earliest), its end (latest), or the
    first record at most `duration_ms` old (`offset_for_time`, looked up by the caller; None when
    no record is that recent, and the share-partition starts at the end)."""
    if reset.strategy == "earliest":
        return log_start
    if reset.strategy == "by_duration" and offset_for_time is not None:
        return min(max(offset_for_time, log_start), latest)
    return latest


def initialized(state: SharePartitionState, start: int) -> SharePartitionState:
    """`state` begun at `start` when it has no state yet (else as it is)."""
    if state.initialized:
        return state
    return SharePartitionState(state.state_epoch, start, start)


def trimmed(state: SharePartitionState, log_start: int) -> SharePartitionState:
    """`state` once the log lost the records below `log_start` (retention, DeleteRecords): they
    leave the share-partition, whatever their state, as they can be neither delivered nor
    acknowledged any more; the start moves up to the log's. Kafka's `updateCacheAndOffsets`
    archives the available ones and leaves acquired ones in flight below its start until their
    lock runs out, where an acknowledgement of them is skipped: answered NONE, as here."""
    if not state.initialized or log_start <= state.start:
        return state
    _, _, after = _cut(state.ranges, state.start, log_start - 1)
    moved = SharePartitionState(
        state.state_epoch, log_start, max(state.end, log_start), state.ranges
    )
    return _settled(moved, after)


def acquire(
    state: SharePartitionState,
    member: str,
    *,
    max_records: int,
    fetchable_end: int,
    aborted: Sequence[tuple[int, int]] = (),
    aborted_from: int = 0,
    now_ms: int,
    limits: ShareLimits,
) -> Acquisition:
    """The records the member acquires, and the state after: first those available again (in
    offset order), then new ones up to `fetchable_end` (the high watermark, or the last stable
    offset under read_committed) while the records in flight stay within
    `max_record_locks`; at most `max_records` in all. New records of `aborted` transactions
    ([first, last] ranges, read_committed: every one that overlaps [`aborted_from`,
    `fetchable_end`)) are archived, never delivered; no new record is acquired when the
    share-partition's end is below `aborted_from`, as aborted records there may be unlisted."""
    assert state.initialized, "acquire from an initialized share-partition"
    assert member != NO_MEMBER, "a member acquires"
    state = expire(state, now_ms, limits)
    budget = max(0, max_records)
    deadline = now_ms + limits.lock_duration_ms
    ranges: list[ShareRange] = []
    acquired: list[AcquiredRange] = []
    for r in state.ranges:
        if r.state is not RecordState.AVAILABLE or budget == 0:
            ranges.append(r)
            continue
        if r.delivery_count >= limits.delivery_count_limit:  # the limit was lowered since
            ranges.append(ShareRange(r.first, r.last, RecordState.ARCHIVED, r.delivery_count))
            continue
        last = min(r.last, r.first + budget - 1)
        count = r.delivery_count + 1
        ranges.append(ShareRange(r.first, last, RecordState.ACQUIRED, count, member, deadline))
        acquired.append(AcquiredRange(r.first, last, count))
        budget -= last - r.first + 1
        if last < r.last:
            ranges.append(msgspec.structs.replace(r, first=last + 1))
    end = state.end
    if end < aborted_from:
        fetchable_end = end  # the aborted transactions listed may not cover what comes next
    room = min(budget, limits.max_record_locks - (state.end - state.start))
    new_end = max(end, min(fetchable_end, end + max(0, room)))
    offset = end
    for first, last in sorted(aborted):
        if offset >= new_end:
            break
        first, last = max(first, offset), min(last, new_end - 1)
        if first > last:
            continue
        if offset < first:
            ranges.append(ShareRange(offset, first - 1, RecordState.ACQUIRED, 1, member, deadline))
            acquired.append(AcquiredRange(offset, first - 1, 1))
        ranges.append(ShareRange(first, last, RecordState.ARCHIVED, 0))
        offset = last + 1
    if offset < new_end:
        ranges.append(ShareRange(offset, new_end - 1, RecordState.ACQUIRED, 1, member, deadline))
        acquired.append(AcquiredRange(offset, new_end - 1, 1))
    grown = SharePartitionState(state.state_epoch, state.start, new_end, state.ranges)
    return Acquisition(_settled(grown, ranges), tuple(_joined(acquired)))


def _joined(acquired: list[AcquiredRange]) -> list[AcquiredRange]:
    out: list[AcquiredRange] = []
    for a in acquired:
        if out and out[-1].last + 1 == a.first and out[-1].delivery_count == a.delivery_count:
            out[-1] = out[-1]._replace(last=a.last)
        else:
            out.append(a)
    return out


def _validated(batches: Sequence[AcknowledgeBatch]) -> bool:
    """Kafka's checks of a partition's acknowledgement batches: each well formed, with one type
    or one per offset, in ascending order without overlap."""
    previous_last = -1
    for b in batches:
        if b.first < 0 or b.last < b.first or b.first <= previous_last:
            return False
        if len(b.types) not in (1, b.last - b.first + 1):
            return False
        if any(t not in _TARGET for t in b.types):
            return False
        previous_last = b.last
    return True


_TARGET: Final = {
    AcknowledgeType.GAP: RecordState.ARCHIVED,
    AcknowledgeType.ACCEPT: RecordState.ACKNOWLEDGED,
    AcknowledgeType.RELEASE: RecordState.AVAILABLE,
    AcknowledgeType.REJECT: RecordState.ARCHIVED,
}


def _runs(b: AcknowledgeBatch) -> list[tuple[int, int, int]]:
    """A batch as (first, last, type) runs of one type each."""
    if len(b.types) == 1:
        return [(b.first, b.last, b.types[0])]
    runs: list[tuple[int, int, int]] = []
    for offset, kind in enumerate(b.types, b.first):
        if runs and runs[-1][2] == kind:
            runs[-1] = (runs[-1][0], offset, kind)
        else:
            runs.append((offset, offset, kind))
    return runs


def acknowledge(
    state: SharePartitionState,
    member: str,
    batches: Sequence[AcknowledgeBatch],
    *,
    now_ms: int,
    limits: ShareLimits,
) -> Acknowledgement:
    """The member's acknowledgements applied, all of them or (on an error) none: INVALID_REQUEST
    for malformed batches, INVALID_RECORD_STATE when a record named is not acquired by the member
    (never acquired, held by another, acknowledged already, or its lock ran out). Records below
    the start are done already (their acknowledgement changes nothing)."""
    if not _validated(batches):
        return Acknowledgement(state, ErrorCode.INVALID_REQUEST)
    if not state.initialized:
        return Acknowledgement(state, ErrorCode.INVALID_RECORD_STATE)
    state = expire(state, now_ms, limits)
    ranges = list(state.ranges)
    for b in batches:
        if b.last >= state.end:
            return Acknowledgement(state, ErrorCode.INVALID_RECORD_STATE)
        for first, last, kind in _runs(b):
            if last < state.start:
                continue
            before, inside, after = _cut(ranges, max(first, state.start), last)
            if any(r.state is not RecordState.ACQUIRED or r.member != member for r in inside):
                return Acknowledgement(state, ErrorCode.INVALID_RECORD_STATE)
            target = _TARGET[AcknowledgeType(kind)]
            if target is RecordState.AVAILABLE:
                changed = [_returned(r, limits.delivery_count_limit) for r in inside]
            else:
                changed = [ShareRange(r.first, r.last, target, r.delivery_count) for r in inside]
            ranges = before + changed + after
    return Acknowledgement(_settled(state, ranges), ErrorCode.NONE)


def release_member(
    state: SharePartitionState, member: str, *, now_ms: int, limits: ShareLimits
) -> SharePartitionState:
    """What the member holds, released as its share session closes: available again, with one
    delivery fewer (Kafka's `DeliveryCountOps.DECREASE`: fetched, perhaps never delivered)."""
    state = expire(state, now_ms, limits)
    if not any(r.member == member for r in state.ranges):
        return state
    ranges = (
        ShareRange(r.first, r.last, RecordState.AVAILABLE, max(0, r.delivery_count - 1))
        if r.state is RecordState.ACQUIRED and r.member == member
        else r
        for r in state.ranges
    )
    return _settled(state, ranges)


def restarted(state: SharePartitionState, start: int) -> SharePartitionState:
    """AlterShareGroupOffsets: the share-partition starts over at `start`, in a new state epoch
    (Kafka allows it only while the group has no members; that is the caller's to check)."""
    return SharePartitionState(state.state_epoch + 1, start, start)


def deleted(state: SharePartitionState) -> SharePartitionState:
    """DeleteShareGroupOffsets: no state, in a new state epoch (the next acquisition initializes
    it again from `share.auto.offset.reset`); the epoch outlives it, so that nothing acquired
    before is taken for what comes after."""
    return SharePartitionState(state.state_epoch + 1, UNINITIALIZED, UNINITIALIZED)


class ShareCounts(NamedTuple):
    """A share-partition's records by state, for metrics (below the start: none)."""

    available: int
    acquired: int
    acknowledged: int
    archived: int
    redelivered: int = 0
    """Records delivered more than once and not finished (available again, or acquired)."""


def counts(state: SharePartitionState, now_ms: int, limits: ShareLimits) -> ShareCounts:
    """The records of `state` by state at `now_ms`, a lock that ran out counted as released."""
    tally = dict.fromkeys(RecordState, 0)
    redelivered = 0
    for r in expire(state, now_ms, limits).ranges:
        size = r.last - r.first + 1
        tally[r.state] += size
        if r.delivery_count > 1 and not r.state.terminal:
            redelivered += size
    return ShareCounts(
        tally[RecordState.AVAILABLE],
        tally[RecordState.ACQUIRED],
        tally[RecordState.ACKNOWLEDGED],
        tally[RecordState.ARCHIVED],
        redelivered,
    )


# --- the coordinator's operations: what a caller asks and is answered --------------------------


class ShareFetchPartition(NamedTuple):
    """One partition of a share acquisition, as the caller read it (a committed read: its high
    watermark, last stable offset and log start may lag the coordinator's, never lead them)."""

    topic_partition: TopicPartition
    max_records: int
    fetchable_end: int
    """The high watermark, or the last stable offset under read_committed."""
    log_start: int
    initial_start: int
    """Where the share-partition starts if it has no state (`initial_start`)."""
    aborted: Sequence[tuple[int, int]] = ()
    """read_committed: the [first, last] offsets of every aborted transaction that overlaps
    [`aborted_from`, `fetchable_end`)."""
    aborted_from: int = 0
    """Where `aborted` begins to be complete: no new record is acquired while the
    share-partition's end (`ShareAcquired.end`, as last answered) is below it."""


class ShareAcquired(NamedTuple):
    """What a member acquired in one share-partition, under which state epoch."""

    acquired: tuple[AcquiredRange, ...]
    state_epoch: int
    start: int
    """The share-partition start offset after the step."""
    end: int
    """The first offset never acquired after the step (one past Kafka's SPEO): where the next
    new records come from, and so where a read_committed caller's `aborted_from` goes."""
    lock_expiry_ms: int | None = None
    """How long after the step the share-partition's earliest lock runs out (None: nothing is
    acquired): when records may come back, for a share fetch that waits. Relative, so that it
    needs no agreement between the coordinator's clock and the caller's."""


class ShareOffset(NamedTuple):
    """DescribeShareGroupOffsets' answer for a partition: its start offset (`UNINITIALIZED`:
    none) and state epoch."""

    start: int
    state_epoch: int


class ShareAcquire(NamedTuple):
    """A share step's acquisition (`BatchCoordinator.acquire_share_records`)."""

    group_id: str
    member_id: str
    partitions: Sequence[ShareFetchPartition]
    limits: ShareLimits


class ShareAcknowledge(NamedTuple):
    """A share step's acknowledgement (`BatchCoordinator.acknowledge_share_records`)."""

    group_id: str
    member_id: str
    acknowledgements: Mapping[TopicPartition, Sequence[AcknowledgeBatch]]
    limits: ShareLimits
    state_epochs: Mapping[TopicPartition, int] | None = None


class ShareRelease(NamedTuple):
    """A share step's release of a member (`BatchCoordinator.release_share_member`)."""

    group_id: str
    member_id: str
    partitions: Sequence[TopicPartition]
    limits: ShareLimits


ShareRequest: TypeAlias = ShareAcquire | ShareAcknowledge | ShareRelease
ShareAnswer: TypeAlias = (
    "dict[TopicPartition, ShareAcquired] | dict[TopicPartition, ErrorCode] | None"
)
"""What a `ShareRequest` is answered: the acquired ranges, the acknowledgement's codes, or
nothing (a release)."""
