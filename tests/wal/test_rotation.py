"""Unit, virtual clock: when a segment rotates by time (`RotationRule`), and that size still wins.

A segment rotates once no batch arrived for `linger_ms`, never sooner than
`rotate_interval_min_ms` after the previous rotation unless it holds `rotate_floor_bytes`, and at
the latest `commit_interval_ms` after its first batch.
"""

from __future__ import annotations

import asyncio

import pytest

from diskless import ErrorCode, ManualClock, TopicPartition
from diskless.coordinator import CommitBatchResult
from diskless.storage import ForwardingObjectStore, MemoryObjectStore
from diskless.wal import WalConfig, WalWriter
from diskless.wal._deadlines import RotationRule
from diskless.wal._senders import SENDER_INFLIGHT_MAX
from testkit.clocks import settle
from testkit.wal import build_batch, entry, sized_batch
from tests.wal._rig import Rig

TP0 = TopicPartition("t", 0)
TIMEOUT_S = 30.0
MS = 0.001


class TimedStore(ForwardingObjectStore):
    """Records the virtual time of every PUT: one per rotated segment. While `held` is clear,
    PUTs wait for it (an upload under way)."""

    def __init__(self, clock: ManualClock) -> None:
        super().__init__(MemoryObjectStore(clock))
        self._clock = clock
        self.put_times: list[float] = []
        self.held = asyncio.Event()
        self.held.set()

    async def put(self, key: str, data: bytes | bytearray | memoryview) -> None:
        self.put_times.append(self._clock.monotonic())
        await self.held.wait()
        await self.inner.put(key, data)


def _rig(config: WalConfig) -> tuple[Rig, TimedStore]:
    clock = ManualClock(start_ms=0)
    store = TimedStore(clock)
    return Rig(config, store=store, clock=clock), store


def test_the_rule_lingers_above_a_floor_and_below_the_interval() -> None:
    rule = RotationRule(WalConfig(commit_interval_ms=250, linger_ms=2, rotate_interval_min_ms=50))
    never = float("-inf")
    assert rule.due(10.0, 10.0, never) == 10.0 + 2 * MS  # a lone batch: the linger
    assert rule.due(10.0, 10.1, never) == 10.1 + 2 * MS  # each batch moves it
    assert rule.due(10.0, 10.0, 9.99) == 9.99 + 50 * MS  # the floor after the last rotation
    assert rule.due(10.0, 10.249, never) == 10.0 + 250 * MS  # the interval bounds the wait
    assert rule.by_interval(10.0, rule.due(10.0, 10.249, never))
    assert not rule.by_interval(10.0, rule.due(10.0, 10.0, never))
    off = RotationRule(WalConfig(commit_interval_ms=250, linger_ms=250))
    assert off.due(10.0, 10.0, never) == 10.0 + 250 * MS  # a linger >= the interval: off
    assert off.due(10.0, 10.0, never, senders_blocked=True) == 10.0 + 250 * MS  # all of it
    assert rule.due(10.0, 10.0, 9.99, senders_blocked=True) == 9.99 + 50 * MS  # the floor only


def test_the_floor_holds_back_only_segments_smaller_than_its_bytes() -> None:
    config = WalConfig(
        commit_interval_ms=250, linger_ms=2, rotate_interval_min_ms=50, rotate_floor_bytes=1000
    )
    rule = RotationRule(config)
    small, big = 999, 1000
    blocked = {"senders_blocked": True}
    assert rule.due(10.0, 10.0, 9.99, segment_bytes=small, **blocked) == 9.99 + 50 * MS  # floor
    assert rule.due(10.0, 10.001, 9.99, segment_bytes=big, **blocked) == 10.0  # now
    assert rule.due(10.0, 10.0, 9.99, segment_bytes=big) == 9.99 + 50 * MS  # lingering: floor
    big_and_full = {"segment_bytes": big, "pipeline_has_room": False, **blocked}
    assert rule.due(10.0, 10.0, 9.99, **big_and_full) == 10.0 + 250 * MS  # the interval


async def test_a_lone_request_is_committed_after_the_linger_not_the_interval() -> None:
    rig, store = _rig(WalConfig(commit_interval_ms=250, linger_ms=4, rotate_interval_min_ms=50))
    await rig.topic()
    writer = await rig.writer()
    start = rig.clock.monotonic()
    write = asyncio.ensure_future(
        writer.write([entry(TP0, build_batch([b"alone"]))], timeout_s=TIMEOUT_S)
    )
    await settle()
    await rig.clock.advance(3 * MS)
    await settle()
    assert not write.done() and store.put_times == []  # still lingering
    await rig.clock.advance(2 * MS)
    await settle()
    assert write.done()
    assert write.result()[0].error == ErrorCode.NONE
    (put_at,) = store.put_times
    assert put_at - start < 5 * MS  # the linger, far from the 250 ms interval
    await rig.close()


async def test_a_steady_trickle_rotates_no_more_often_than_the_floor() -> None:
    """One batch every 10 ms, with 2 ms of linger: each would go alone, the floor groups them."""
    floor_ms = 50
    config = WalConfig(commit_interval_ms=250, linger_ms=2, rotate_interval_min_ms=floor_ms)
    rig, store = _rig(config)
    await rig.topic()
    writer = await rig.writer()
    writes = []
    for i in range(100):  # 1 s of virtual time
        writes.append(
            asyncio.ensure_future(
                writer.write([entry(TP0, build_batch([b"%d" % i]))], timeout_s=TIMEOUT_S)
            )
        )
        await rig.clock.advance(10 * MS)
    await rig.clock.advance(300 * MS)
    await settle()
    assert all(w.done() and w.result()[0].error == ErrorCode.NONE for w in writes)
    gaps = [b - a for a, b in zip(store.put_times, store.put_times[1:], strict=False)]
    assert min(gaps) >= floor_ms * MS - 1e-9  # never more often than the floor
    # ...and at the floor, not the interval: about 1 s / 50 ms objects (20), not 1 s / 250 ms.
    assert 18 <= len(store.put_times) <= 21, store.put_times
    await rig.close()


async def test_a_stream_without_pauses_rotates_at_the_interval() -> None:
    """A batch every millisecond never leaves a 2 ms linger: the interval bounds the segment."""
    rig, store = _rig(WalConfig(commit_interval_ms=100, linger_ms=2, rotate_interval_min_ms=10))
    await rig.topic()
    writer = await rig.writer()
    writes = []
    for i in range(250):
        writes.append(
            asyncio.ensure_future(
                writer.write([entry(TP0, build_batch([b"%d" % i]))], timeout_s=TIMEOUT_S)
            )
        )
        await rig.clock.advance(1 * MS)
    await rig.clock.advance(200 * MS)
    await settle()
    assert all(w.done() and w.result()[0].error == ErrorCode.NONE for w in writes)
    gaps = [b - a for a, b in zip(store.put_times, store.put_times[1:], strict=False)]
    # Two intervals of the stream, then its tail (200 to 249 ms) lingers after its last batch.
    assert len(store.put_times) == 3, store.put_times
    assert abs(gaps[0] - 100 * MS) < 1e-9 and abs(gaps[1] - 51 * MS) < 1e-9, gaps
    await rig.close()


async def test_the_size_trigger_wins_over_the_floor() -> None:
    config = WalConfig(
        buffer_max_bytes=1000, commit_interval_ms=250, linger_ms=2, rotate_interval_min_ms=200
    )
    rig, store = _rig(config)
    await rig.topic()
    writer = await rig.writer()
    first = asyncio.ensure_future(
        writer.write([entry(TP0, build_batch([b"first"]))], timeout_s=TIMEOUT_S)
    )
    await settle()
    await rig.clock.advance(3 * MS)
    await settle()
    assert first.done() and len(store.put_times) == 1  # lingered, then rotated
    fills = [
        asyncio.ensure_future(
            writer.write([entry(TP0, sized_batch(250, tag=i))], timeout_s=TIMEOUT_S)
        )
        for i in range(4)
    ]
    await settle()
    assert all(w.done() for w in fills)  # full: rotated at once, well inside the floor
    assert len(store.put_times) == 2
    assert store.put_times[1] == rig.clock.monotonic() < store.put_times[0] + 200 * MS
    await rig.close()


async def test_a_segment_opened_while_the_timer_sleeps_is_due_by_its_own_writes() -> None:
    """The timer sleeps for the linger of a segment that then fills; the next segment, opened by
    a later write, lingers from that write."""
    config = WalConfig(
        buffer_max_bytes=1000, commit_interval_ms=250, linger_ms=200, rotate_interval_min_ms=5
    )
    rig, store = _rig(config)
    await rig.topic()
    writer = await rig.writer()
    writes = [
        asyncio.ensure_future(writer.write([entry(TP0, sized_batch(250))], timeout_s=TIMEOUT_S))
    ]
    await settle()
    await rig.clock.advance(100 * MS)  # the timer sleeps until 200 ms (the linger)
    writes += [
        asyncio.ensure_future(
            writer.write([entry(TP0, sized_batch(250, tag=i))], timeout_s=TIMEOUT_S)
        )
        for i in range(4)
    ]  # 3 fill the segment at 100 ms; the 4th opens a segment due at 100 + 200 ms
    await settle()
    assert len(store.put_times) == 1
    await rig.clock.advance(150 * MS)  # past the old sleep's target: nothing due yet
    await settle()
    assert len(store.put_times) == 1
    await rig.clock.advance(60 * MS)
    await settle()
    assert len(store.put_times) == 2 and all(w.done() for w in writes)
    await rig.close()


async def test_a_full_pipeline_keeps_the_segment_open_until_it_has_room() -> None:
    """Rotating early only helps while the sealed segment can upload at once: behind a full
    pipeline it fills on, and rotates as soon as the upload before it is done."""
    config = WalConfig(
        commit_interval_ms=250, linger_ms=2, rotate_interval_min_ms=0, uploads_inflight_max=1
    )
    rig, store = _rig(config)
    await rig.topic()
    writer = await rig.writer()
    start = rig.clock.monotonic()
    store.held.clear()  # the first upload will not finish until released
    first = asyncio.ensure_future(
        writer.write([entry(TP0, build_batch([b"first"]))], timeout_s=TIMEOUT_S)
    )
    await settle()
    await rig.clock.advance(3 * MS)
    await settle()
    assert len(store.put_times) == 1  # lingered and rotated: its upload is under way
    second = asyncio.ensure_future(
        writer.write([entry(TP0, build_batch([b"second"]))], timeout_s=TIMEOUT_S)
    )
    await settle()
    await rig.clock.advance(50 * MS)  # far past the second's linger
    await settle()
    assert writer.stats().segments_rotated == 1 and not second.done()  # no room: still open
    store.held.set()
    await settle()
    assert first.done() and first.result()[0].error == ErrorCode.NONE
    assert writer.stats().segments_rotated == 2  # room again: rotated at once
    assert len(store.put_times) == 2
    assert store.put_times[1] - start < 60 * MS
    await settle()
    assert second.done() and second.result()[0].error == ErrorCode.NONE
    await rig.close()


async def test_behind_a_pipeline_that_stays_full_the_interval_rotates() -> None:
    config = WalConfig(
        commit_interval_ms=100, linger_ms=2, rotate_interval_min_ms=0, uploads_inflight_max=1
    )
    rig, store = _rig(config)
    await rig.topic()
    writer = await rig.writer()
    store.held.clear()
    writes = [
        asyncio.ensure_future(writer.write([entry(TP0, build_batch([b"a"]))], timeout_s=TIMEOUT_S))
    ]
    await settle()
    await rig.clock.advance(3 * MS)
    await settle()
    opened = rig.clock.monotonic()
    writes.append(
        asyncio.ensure_future(writer.write([entry(TP0, build_batch([b"b"]))], timeout_s=TIMEOUT_S))
    )
    await settle()
    await rig.clock.advance(99 * MS)
    await settle()
    assert writer.stats().segments_rotated == 1
    await rig.clock.advance(2 * MS)
    await settle()
    assert writer.stats().segments_rotated == 2  # the interval, as before the linger existed
    store.held.set()
    await settle()
    assert len(store.put_times) == 2 and store.put_times[1] >= opened + 100 * MS
    assert all(w.done() and w.result()[0].error == ErrorCode.NONE for w in writes)
    await rig.close()


def _sent(
    writer: WalWriter, sender: object, count: int, tag: str
) -> list[asyncio.Future[list[CommitBatchResult]]]:
    """`count` one-batch requests of `sender`, submitted now and waited for in the background."""
    return [
        asyncio.ensure_future(
            writer.wait(
                writer.submit(
                    [entry(TP0, build_batch([f"{tag}{i}".encode()]))],
                    admit_s=TIMEOUT_S,
                    sender=sender,
                ),
                timeout_s=TIMEOUT_S,
            )
        )
        for i in range(count)
    ]


@pytest.mark.parametrize(
    ("inflight", "other", "lingers"),
    [
        (SENDER_INFLIGHT_MAX, None, False),  # nothing more can come: no linger
        (SENDER_INFLIGHT_MAX - 1, None, True),  # it may send one more
        (SENDER_INFLIGHT_MAX, "connection-2", True),  # another sender may send more
        (SENDER_INFLIGHT_MAX, "anonymous", True),  # a write without a sender: anything may follow
    ],
)
async def test_a_segment_whose_senders_are_all_at_their_in_flight_limit_does_not_linger(
    inflight: int, other: str | None, lingers: bool
) -> None:
    config = WalConfig(commit_interval_ms=250, linger_ms=100, rotate_interval_min_ms=0)
    rig, store = _rig(config)
    await rig.topic()
    writer = await rig.writer()
    writes = _sent(writer, "connection-1", inflight, "a")
    if other is not None:
        writes += _sent(writer, None if other == "anonymous" else other, 1, "b")
    await settle()
    await rig.clock.advance(1 * MS)
    await settle()
    assert len(store.put_times) == (0 if lingers else 1)
    await rig.clock.advance(100 * MS)
    await settle()
    assert len(store.put_times) == 1  # the linger, at the latest
    assert all(w.done() and w.result()[0].error == ErrorCode.NONE for w in writes)
    await rig.close()


async def test_the_in_flight_limit_still_waits_for_the_floor() -> None:
    config = WalConfig(commit_interval_ms=250, linger_ms=100, rotate_interval_min_ms=40)
    rig, store = _rig(config)
    await rig.topic()
    writer = await rig.writer()
    first = _sent(writer, "connection-1", SENDER_INFLIGHT_MAX, "a")
    await settle()
    assert len(store.put_times) == 1  # at once: no rotation before it to count a floor from
    await settle()
    assert all(w.done() for w in first)
    second = _sent(writer, "connection-1", SENDER_INFLIGHT_MAX, "b")
    await settle()
    await rig.clock.advance(39 * MS)
    await settle()
    assert len(store.put_times) == 1  # blocked, but inside the floor
    await rig.clock.advance(2 * MS)
    await settle()
    assert len(store.put_times) == 2 and all(w.done() for w in second)
    await rig.close()


def _sent_sized(
    writer: WalWriter, sender: object, sizes: list[int]
) -> list[asyncio.Future[list[CommitBatchResult]]]:
    """One request of `sender` per size, each one batch of about that many bytes."""
    return [
        asyncio.ensure_future(
            writer.wait(
                writer.submit([entry(TP0, sized_batch(size))], admit_s=TIMEOUT_S, sender=sender),
                timeout_s=TIMEOUT_S,
            )
        )
        for size in sizes
    ]


@pytest.mark.parametrize("floor_bytes", [16 * 1024, 1024 * 1024])
async def test_a_blocked_segment_of_the_floor_bytes_rotates_without_the_floor(
    floor_bytes: int,
) -> None:
    """A producer at its in-flight limit whose requests fill at least `rotate_floor_bytes` gets
    its answers at once; below it, the floor still holds the segment."""
    config = WalConfig(
        commit_interval_ms=250, linger_ms=100, rotate_interval_min_ms=40,
        rotate_floor_bytes=floor_bytes,
    )  # fmt: skip
    rig, store = _rig(config)
    await rig.topic()
    writer = await rig.writer()
    first = _sent(writer, "connection-1", SENDER_INFLIGHT_MAX, "a")
    await settle()
    assert len(store.put_times) == 1 and all(w.done() for w in first)
    second = _sent_sized(writer, "connection-1", [8 * 1024] * SENDER_INFLIGHT_MAX)  # 40 KiB
    await settle()
    await rig.clock.advance(1 * MS)
    await settle()
    lifted = floor_bytes <= 40 * 1024
    assert len(store.put_times) == (2 if lifted else 1)
    await rig.clock.advance(40 * MS)
    await settle()
    assert len(store.put_times) == 2 and all(w.done() for w in second)
    await rig.close()


async def test_a_lingering_segment_keeps_its_floor_however_big() -> None:
    """A segment whose writers could still send more keeps the floor even past
    `rotate_floor_bytes`: only a segment that nothing more can reach rotates without it."""
    config = WalConfig(
        commit_interval_ms=250, linger_ms=2, rotate_interval_min_ms=40,
        rotate_floor_bytes=16 * 1024,
    )  # fmt: skip
    rig, store = _rig(config)
    await rig.topic()
    writer = await rig.writer()
    first = _sent_sized(writer, None, [100])
    await rig.clock.advance(3 * MS)
    await settle()
    assert len(store.put_times) == 1 and first[0].done()
    big = _sent_sized(writer, None, [40 * 1024])
    await settle()
    await rig.clock.advance(10 * MS)
    await settle()
    assert len(store.put_times) == 1  # past its linger, inside the floor
    await rig.clock.advance(30 * MS)
    await settle()
    assert len(store.put_times) == 2 and store.put_times[1] - store.put_times[0] >= 40 * MS - 1e-9
    assert big[0].done() and big[0].result()[0].error == ErrorCode.NONE
    await rig.close()
