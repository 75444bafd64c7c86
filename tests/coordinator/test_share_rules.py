"""Unit: the rules of a share-partition's steps (KIP-932), one by one, as Kafka's
`SharePartition` applies them."""

from __future__ import annotations

from diskless import ErrorCode
from diskless.coordinator._rules.share import (
    NEW_STATE,
    AcknowledgeBatch,
    AcknowledgeType,
    AcquiredRange,
    OffsetReset,
    RecordState,
    ShareLimits,
    SharePartitionState,
    ShareRange,
    acknowledge,
    acquire,
    counts,
    decode_state,
    deleted,
    encode_state,
    expire,
    initial_start,
    initialized,
    next_deadline,
    parse_offset_reset,
    release_member,
    restarted,
    trimmed,
)

LIMITS = ShareLimits(delivery_count_limit=3, lock_duration_ms=1_000, max_record_locks=100)
ACCEPT, RELEASE, REJECT, GAP = (
    AcknowledgeType.ACCEPT,
    AcknowledgeType.RELEASE,
    AcknowledgeType.REJECT,
    AcknowledgeType.GAP,
)


def fresh(start: int = 0) -> SharePartitionState:
    return initialized(NEW_STATE, start)


def take(
    state: SharePartitionState,
    member: str,
    n: int = 10,
    end: int = 10,
    now: int = 0,
    limits: ShareLimits = LIMITS,
    aborted: tuple[tuple[int, int], ...] = (),
) -> tuple[SharePartitionState, tuple[AcquiredRange, ...]]:
    got = acquire(
        state, member, max_records=n, fetchable_end=end, aborted=aborted, now_ms=now, limits=limits
    )
    return got.state, got.acquired


def ack(
    state: SharePartitionState,
    member: str,
    *batches: tuple[int, int, tuple[int, ...]],
    now: int = 0,
) -> tuple[SharePartitionState, ErrorCode]:
    done = acknowledge(
        state, member, [AcknowledgeBatch(*b) for b in batches], now_ms=now, limits=LIMITS
    )
    return done.state, done.error


def test_acquire_takes_new_records_up_to_the_fetchable_end_and_max_records() -> None:
    state, got = take(fresh(), "a", n=4, end=10)
    assert got == (AcquiredRange(0, 3, 1),)
    assert (state.start, state.end) == (0, 4)
    assert state.ranges == (ShareRange(0, 3, RecordState.ACQUIRED, 1, "a", 1_000),)
    state, got = take(state, "b", n=100, end=10)
    assert got == (AcquiredRange(4, 9, 1),)
    state, got = take(state, "c", n=100, end=10)
    assert got == () and state.end == 10


def test_the_in_flight_limit_bounds_new_records_but_not_released_ones() -> None:
    limits = LIMITS._replace(max_record_locks=5)
    state, got = take(fresh(), "a", n=100, end=100, limits=limits)
    assert got == (AcquiredRange(0, 4, 1),)
    state, got = take(state, "b", n=100, end=100, limits=limits)
    assert got == ()
    state, error = ack(state, "a", (0, 1, (RELEASE,)))
    assert error is ErrorCode.NONE
    state, got = take(state, "b", n=100, end=100, limits=limits)
    assert got == (AcquiredRange(0, 1, 2),)  # released records come back; still no new ones
    state, _ = ack(state, "a", (2, 4, (ACCEPT,)))
    state, _ = ack(state, "b", (0, 1, (ACCEPT,)))
    assert (state.start, state.ranges) == (5, ())
    state, got = take(state, "b", n=100, end=100, limits=limits)
    assert got == (AcquiredRange(5, 9, 1),)


def test_acknowledge_types_and_the_start_moving_past_terminal_records() -> None:
    state, _ = take(fresh(), "a", n=6, end=6)
    state, error = ack(state, "a", (0, 5, (ACCEPT, REJECT, GAP, RELEASE, ACCEPT, ACCEPT)))
    assert error is ErrorCode.NONE
    assert state.start == 3  # 0 accepted, 1 rejected, 2 a gap: done
    assert state.ranges == (
        ShareRange(3, 3, RecordState.AVAILABLE, 1),
        ShareRange(4, 5, RecordState.ACKNOWLEDGED, 1),
    )
    state, got = take(state, "b", n=10, end=6)
    assert got == (AcquiredRange(3, 3, 2),)
    state, _ = ack(state, "b", (3, 3, (ACCEPT,)))
    assert (state.start, state.end, state.ranges) == (6, 6, ())


def test_acknowledging_what_the_member_does_not_hold_fails_the_whole_partition() -> None:
    state, _ = take(fresh(), "a", n=5, end=10)
    state, _ = take(state, "b", n=3, end=10)
    for batches in (
        [(0, 5, (ACCEPT,))],  # 5 is b's
        [(0, 1, (ACCEPT,)), (7, 7, (ACCEPT,))],  # the second batch: b's
        [(9, 9, (ACCEPT,))],  # never acquired
        [(12, 12, (ACCEPT,))],  # beyond the end
    ):
        after, error = ack(state, "a", *batches)
        assert error is ErrorCode.INVALID_RECORD_STATE
        assert after == state  # nothing applied, not even the first batch
    state, error = ack(state, "a", (0, 4, (ACCEPT,)))
    assert error is ErrorCode.NONE
    _, error = ack(state, "a", (0, 0, (ACCEPT,)))  # below the start: done already
    assert error is ErrorCode.NONE
    state, _ = ack(state, "b", (5, 5, (ACCEPT,)))
    _, error = ack(state, "b", (6, 6, (ACCEPT,)), (6, 7, (ACCEPT,)))
    assert error is ErrorCode.INVALID_REQUEST  # overlapping batches


def test_malformed_batches_are_invalid_requests() -> None:
    state, _ = take(fresh(), "a", n=5, end=10)
    for batch in ((3, 2, (ACCEPT,)), (0, 2, (ACCEPT, ACCEPT)), (0, 0, (7,)), (-1, 0, (1,))):
        after, error = ack(state, "a", batch)
        assert (after, error) == (state, ErrorCode.INVALID_REQUEST)


def test_a_lock_runs_out_by_the_clock_and_the_limit_archives() -> None:
    state, got = take(fresh(), "a", n=2, end=2, now=0)
    assert next_deadline(state) == 1_000
    _, error = ack(state, "a", (0, 1, (ACCEPT,)), now=1_000)
    assert error is ErrorCode.INVALID_RECORD_STATE  # the lock ran out: a no longer holds them
    state, got = take(state, "b", n=10, end=2, now=1_000)
    assert got == (AcquiredRange(0, 1, 2),)
    state, got = take(state, "c", n=10, end=2, now=2_000)
    assert got == (AcquiredRange(0, 1, 3),)
    state = expire(state, 3_000, LIMITS)  # delivered three times: archived, not available
    assert (state.start, state.ranges) == (2, ())
    state, got = take(state, "d", n=10, end=2, now=3_000)
    assert got == ()


def test_release_archives_at_the_limit_and_a_leaving_member_gives_back_a_delivery() -> None:
    state, _ = take(fresh(), "a", n=1, end=1)
    for member, count in (("b", 2), ("c", 3)):
        state, _ = ack(state, "a" if count == 2 else "b", (0, 0, (RELEASE,)))
        state, got = take(state, member, end=1)
        assert got == (AcquiredRange(0, 0, count),)
    state = release_member(state, "c", now_ms=0, limits=LIMITS)
    assert state.ranges == (ShareRange(0, 0, RecordState.AVAILABLE, 2),)
    state, got = take(state, "d", end=1)
    assert got == (AcquiredRange(0, 0, 3),)
    state, _ = ack(state, "d", (0, 0, (RELEASE,)))
    assert (state.start, state.ranges) == (1, ())  # released at the limit: archived


def test_release_member_leaves_the_others_alone() -> None:
    state, _ = take(fresh(), "a", n=3, end=10)
    state, _ = take(state, "b", n=3, end=10)
    state = release_member(state, "a", now_ms=0, limits=LIMITS)
    assert state.ranges == (
        ShareRange(0, 2, RecordState.AVAILABLE, 0),
        ShareRange(3, 5, RecordState.ACQUIRED, 1, "b", 1_000),
    )
    assert release_member(state, "nobody", now_ms=0, limits=LIMITS) == state


def test_aborted_records_are_archived_never_delivered() -> None:
    state, got = take(fresh(), "a", n=10, end=10, aborted=((2, 3), (6, 6), (20, 30)))
    assert got == (AcquiredRange(0, 1, 1), AcquiredRange(4, 5, 1), AcquiredRange(7, 9, 1))
    state, _ = ack(state, "a", (0, 1, (ACCEPT,)))
    assert state.start == 4  # 2 and 3 archived


def test_no_new_record_beyond_what_the_aborted_list_covers() -> None:
    state, _ = take(fresh(), "a", n=3, end=10)
    got = acquire(
        state,
        "b",
        max_records=10,
        fetchable_end=10,
        aborted=((5, 5),),
        aborted_from=4,  # offset 3 is not covered: it may belong to an aborted transaction
        now_ms=0,
        limits=LIMITS,
    )
    assert (got.acquired, got.state) == ((), state)
    got = acquire(
        state,
        "b",
        max_records=10,
        fetchable_end=10,
        aborted=((5, 5),),
        aborted_from=3,
        now_ms=0,
        limits=LIMITS,
    )
    assert got.acquired == (AcquiredRange(3, 4, 1), AcquiredRange(6, 9, 1))


def test_records_below_the_log_start_leave() -> None:
    state, _ = take(fresh(), "a", n=6, end=10)
    state, _ = ack(state, "a", (0, 1, (RELEASE,)))
    state = trimmed(state, 3)
    assert (state.start, state.end) == (3, 6)
    assert state.ranges == (ShareRange(3, 5, RecordState.ACQUIRED, 1, "a", 1_000),)
    _, error = ack(state, "a", (0, 5, (ACCEPT,)))
    assert error is ErrorCode.NONE  # the part below the start is done already
    state = trimmed(state, 20)
    assert (state.start, state.end, state.ranges) == (20, 20, ())
    assert trimmed(state, 5) == state


def test_reset_and_start_offsets() -> None:
    assert parse_offset_reset("latest") == OffsetReset("latest")
    assert parse_offset_reset(" earliest ") == OffsetReset("earliest")
    assert parse_offset_reset("by_duration:PT1H") == OffsetReset("by_duration", 3_600_000)
    assert parse_offset_reset("by_duration:pt1h") == OffsetReset("by_duration", 3_600_000)
    assert parse_offset_reset("by_duration:P1DT2M3.5S") == OffsetReset(
        "by_duration", 86_400_000 + 120_000 + 3_500
    )
    for bad in (
        "newest",
        "EARLIEST",  # Kafka compares the strategy's name as it is
        "BY_DURATION:PT1H",
        "by_duration",
        "by_duration:",
        "by_duration:P",
        "by_duration:PT",
        "by_duration:-PT1S",
    ):
        assert parse_offset_reset(bad) is None
    assert initial_start(OffsetReset("latest"), 5, 50, None) == 50
    assert initial_start(OffsetReset("earliest"), 5, 50, None) == 5
    assert initial_start(OffsetReset("by_duration", 10), 5, 50, 20) == 20
    assert initial_start(OffsetReset("by_duration", 10), 5, 50, None) == 50
    assert initialized(fresh(7), 9) == fresh(7)


def test_alter_and_delete_begin_a_new_state_epoch() -> None:
    state, _ = take(fresh(), "a", n=5, end=10)
    moved = restarted(state, 8)
    assert (moved.state_epoch, moved.start, moved.end, moved.ranges) == (1, 8, 8, ())
    gone = deleted(moved)
    assert (gone.state_epoch, gone.initialized) == (2, False)
    assert initialized(gone, 3) == SharePartitionState(2, 3, 3)


def test_counts_and_the_encoded_state() -> None:
    state, _ = take(fresh(), "a", n=6, end=10)
    state, _ = ack(state, "a", (2, 3, (ACCEPT,)), (4, 4, (RELEASE,)))
    assert tuple(counts(state, 0, LIMITS)) == (1, 3, 2, 0, 0)
    assert tuple(counts(state, 5_000, LIMITS)) == (4, 0, 2, 0, 0)
    state, _ = take(state, "b", n=2, end=10, now=5_000)  # 0 and 1, delivered again
    assert counts(state, 5_000, LIMITS) == (2, 2, 2, 0, 2)
    again = decode_state(encode_state(state))
    assert again == state
    assert isinstance(again.ranges[0].state, RecordState)
