"""Unit: each stage of the write path on its own (admission, segment, deadlines, pipeline)."""

from __future__ import annotations

import asyncio
import random
from collections.abc import Sequence

import pytest

from diskless import ManualClock, TopicPartition
from diskless._types import ErrorCode
from diskless.coordinator import (
    BatchCoordinator,
    CommitBatchResult,
    CommitFileResult,
    FaultyBatchCoordinator,
    FileCommit,
    InMemoryBatchCoordinator,
)
from diskless.errors import CommitOutcomeUnknownError
from diskless.storage import FaultyObjectStore, MemoryObjectStore, ObjectStore
from diskless.wal import SegmentCache, WalConfig, read_footer
from diskless.wal._admission import Admission
from diskless.wal._deadlines import DeadlineWatcher
from diskless.wal._pipeline import SegmentPipeline
from diskless.wal._request import CLOSING, PendingWrite
from diskless.wal._segment import Segment
from testkit.clocks import settle
from testkit.wal import build_batch, entry, sized_batch
from tests.wal._rig import GatedStore, RecordingCoordinator

TP = TopicPartition("t", 0)


def request(count: int = 1, admit_by: float = 1e9) -> PendingWrite:
    batches = [sized_batch(100, tag=i) for i in range(count)]
    future: asyncio.Future[None] = asyncio.get_running_loop().create_future()
    return PendingWrite([entry(TP, b) for b in batches], admit_by, future)


# --- admission ---------------------------------------------------------------------------------
async def test_admission_grants_first_come_first_served_within_the_budget() -> None:
    blocked: list[int] = []
    admission = Admission(300, lambda: blocked.append(1))
    first, second, third = request(), request(), request()
    assert admission.admit_now(200, first)
    admission.end_turn(first)
    assert not admission.admit_now(200, second)  # 400 > 300
    second_wait = asyncio.ensure_future(admission.wait(200, second))
    third_wait = asyncio.ensure_future(admission.wait(50, third))
    await settle()
    assert blocked, "queued writers tell the writer, which may rotate its segment"
    assert not second_wait.done() and not third_wait.done()  # 50 fits, but second is ahead
    admission.release(200)
    await settle()
    assert second_wait.result() is None and not third_wait.done()  # second holds the turn
    admission.end_turn(second)
    await settle()
    assert third_wait.result() is None
    assert admission.inflight_bytes == 250 == admission.inflight_bytes_max_observed


async def test_admission_admits_an_oversized_batch_alone_and_refuses_waiters_on_close() -> None:
    admission = Admission(100, lambda: None)
    big, other = request(), request()
    assert admission.admit_now(500, big)  # nothing in flight: admitted alone
    admission.end_turn(big)
    waiting = asyncio.ensure_future(admission.wait(10, other))
    await settle()
    admission.refuse_all(CLOSING)
    assert await waiting == CLOSING
    assert admission.first_waiting() is None


async def test_admission_admits_a_whole_request_at_once_only_within_the_limit() -> None:
    admission = Admission(300, lambda: None)
    first, second, third = request(), request(), request()
    assert not admission.admit_all_now(500, first)  # over the limit: one by one, nothing taken
    assert admission.inflight_bytes == 0
    assert admission.admit_all_now(250, first)
    assert not admission.admit_all_now(100, second)  # 350 > 300
    queued = asyncio.ensure_future(admission.wait(100, second))
    await settle()
    assert not admission.admit_all_now(10, third)  # fits, but second is ahead
    admission.release(250)
    await settle()
    assert queued.result() is None
    assert admission.admit_all_now(50, second)  # the turn's holder places the rest
    assert admission.inflight_bytes == 150 and admission.inflight_bytes_max_observed == 250


# --- segment -----------------------------------------------------------------------------------
def test_a_sealed_segment_is_its_batches_then_a_footer_that_lists_them() -> None:
    batches = [build_batch([b"a"]), build_batch([b"bb", b"cc"]), sized_batch(300, tag=7)]
    segment = Segment(0.0)
    for i, data in enumerate(batches):
        assert segment.add(entry(TopicPartition("t", i), data), len(data)) == i
    segment.seal()
    assert segment.data.startswith(b"".join(batches))
    index = read_footer(segment.data)
    assert [(e.partition, e.byte_offset, e.size) for e in index] == [
        (0, 0, len(batches[0])),
        (1, len(batches[0]), len(batches[1])),
        (2, len(batches[0]) + len(batches[1]), len(batches[2])),
    ]
    assert [b.byte_offset for b in segment.batches] == [e.byte_offset for e in index]


def test_a_batch_inside_a_larger_buffer_is_stored_alone() -> None:
    batch = build_batch([b"a", b"b"])
    buffer = memoryview(b"\x00" * 5 + batch + b"\xff" * 7)
    placed = entry(TP, batch)
    placed.header.buffer, placed.header.position = buffer, 5
    segment = Segment(0.0)
    segment.add(placed, len(batch))
    segment.add(entry(TP, batch), len(batch))
    segment.seal()
    assert segment.data.startswith(batch + batch)
    assert [(e.byte_offset, e.size) for e in read_footer(segment.data)] == [
        (0, len(batch)),
        (len(batch), len(batch)),
    ]


def test_an_owned_part_no_longer_sees_the_callers_buffer() -> None:
    buffer = bytearray(build_batch([b"value"]))
    segment = Segment(0.0)
    at = segment.add(entry(TP, buffer), len(buffer))
    segment.own_part(at)
    original = bytes(buffer)
    buffer[-1] ^= 0xFF  # the caller reuses its buffer
    segment.seal()
    assert segment.data.startswith(original)


# --- deadlines ---------------------------------------------------------------------------------
async def test_the_watcher_calls_back_at_each_deadline_in_order_on_the_injected_clock() -> None:
    clock = ManualClock()
    start = clock.monotonic()
    due: list[tuple[int, float]] = []
    requests = [request() for _ in range(3)]
    watcher = DeadlineWatcher(clock, lambda r, now: due.append((requests.index(r), now)), lambda: 3)
    watcher.start("test-deadlines")
    watcher.watch(requests[0], start + 5)
    watcher.watch(requests[1], start + 1)
    await settle()
    watcher.watch(requests[2], start + 0.5)  # earlier than the one being slept for
    for _ in range(60):
        await clock.advance(0.1)
        await settle(3)
    await watcher.close()
    assert [index for index, _ in due] == [2, 1, 0]
    assert all(now >= start + at for (_, now), at in zip(due, (0.5, 1, 5), strict=True))


# --- pipeline ----------------------------------------------------------------------------------
def pipeline_of(
    clock: ManualClock,
    store: ObjectStore,
    coordinator: BatchCoordinator,
    epoch: int = 1,
    config: WalConfig | None = None,
    released: list[int] | None = None,
) -> SegmentPipeline:
    return SegmentPipeline(
        broker_id=1,
        broker_epoch=epoch,
        store=store,
        coordinator=coordinator,
        config=config or WalConfig(),
        clock=clock,
        cache=SegmentCache(0),
        fenced_result=CommitBatchResult(error=ErrorCode.NOT_LEADER_OR_FOLLOWER),
        fenced=lambda: False,
        on_fenced=lambda: None,
        release=(released if released is not None else []).append,
    )


def launch(pipeline: SegmentPipeline, number: int, write: PendingWrite) -> Segment:
    """Seal a segment of `write`'s first batch as object wal/`number` and launch it."""
    segment = Segment(0.0)
    segment.add(write.entries[0], write.entries[0].header.size, write, 0)
    segment.number, segment.key = number, f"wal/{number}"
    segment.seal()
    pipeline.launch(segment)
    return segment


async def test_commits_go_in_launch_order_even_when_a_later_upload_finishes_first() -> None:
    clock = ManualClock()
    store = GatedStore(MemoryObjectStore(clock))
    coordinator = RecordingCoordinator(InMemoryBatchCoordinator(clock=clock))
    await coordinator.create_topic("t", 1)
    epoch = await coordinator.register_broker(1)
    released: list[int] = []
    pipeline = pipeline_of(clock, store, coordinator, epoch, released=released)
    writes = [request(), request()]
    segments = [launch(pipeline, number, write) for number, write in enumerate(writes)]
    await settle()
    store.open("wal/1")  # the later upload finishes first...
    await settle()
    assert coordinator.committed_keys == []  # ...but its commit waits for segment 0
    store.open("wal/0")
    await pipeline.drain()
    assert coordinator.committed_keys == ["wal/0", "wal/1"]
    assert [w.results[0].base_offset for w in writes if w.results[0]] == [0, 1]
    assert released == [s.batch_bytes for s in segments]
    assert pipeline.commits == 2 and pipeline.objects_uploaded == 2


class GatedGroups(FaultyBatchCoordinator):
    """Records the keys of each commit step; each step after the first `free_steps` waits for
    the gate; the steps numbered in `lost` (from 1) are applied, then their answer is lost."""

    def __init__(self, inner: BatchCoordinator) -> None:
        super().__init__(inner, random.Random(0))
        self.gate = asyncio.Event()
        self.free_steps = 0
        """Steps that do not wait for the gate."""
        self.steps: list[list[str]] = []
        self.lost: set[int] = set()

    async def commit_files(
        self, broker_id: int, broker_epoch: int, files: Sequence[FileCommit]
    ) -> list[CommitFileResult]:
        self.steps.append([f.object_key for f in files])
        if len(self.steps) > self.free_steps:
            await self.gate.wait()
        results = await self.inner.commit_files(broker_id, broker_epoch, files)
        if len(self.steps) in self.lost:
            raise CommitOutcomeUnknownError("injected: the answer of the step was lost")
        return results


async def gated_groups(clock: ManualClock) -> tuple[GatedGroups, int]:
    coordinator = GatedGroups(InMemoryBatchCoordinator(clock=clock))
    await coordinator.create_topic("t", 1)
    return coordinator, await coordinator.register_broker(1)


@pytest.mark.parametrize("group_max", [1, 3, 8])
async def test_uploaded_segments_waiting_for_a_commit_go_together_in_order(group_max: int) -> None:
    clock = ManualClock()
    coordinator, epoch = await gated_groups(clock)
    pipeline = pipeline_of(
        clock, MemoryObjectStore(clock), coordinator, epoch, WalConfig(commit_group_max=group_max)
    )
    writes = [request(count=1) for _ in range(7)]
    launch(pipeline, 0, writes[0])
    await settle()
    assert coordinator.steps == [["wal/0"]]  # alone: nothing else was waiting
    for number, write in enumerate(writes[1:], 1):
        launch(pipeline, number, write)
    await settle()
    coordinator.gate.set()
    await pipeline.drain()
    keys = [f"wal/{n}" for n in range(1, 7)]
    assert coordinator.steps == [["wal/0"]] + [
        keys[i : i + group_max] for i in range(0, 6, group_max)
    ]
    assert [w.results[0].base_offset for w in writes if w.results[0]] == list(range(7))
    assert pipeline.commits == 7 and pipeline.commit_steps == len(coordinator.steps)
    assert pipeline.batches_committed == 7 and pipeline.commits_failed == 0


async def test_a_group_stops_at_the_first_segment_still_uploading() -> None:
    clock = ManualClock()
    coordinator, epoch = await gated_groups(clock)
    store = GatedStore(MemoryObjectStore(clock))
    pipeline = pipeline_of(clock, store, coordinator, epoch)
    writes = [request() for _ in range(4)]
    for number, write in enumerate(writes):
        launch(pipeline, number, write)
    await settle()
    store.open("wal/0")
    await settle()
    assert coordinator.steps == [["wal/0"]]  # at the gate
    store.open("wal/1")
    store.open("wal/3")  # wal/2 still uploading: wal/3 must wait for it
    await settle()
    coordinator.gate.set()
    await settle()
    assert coordinator.steps == [["wal/0"], ["wal/1"]]
    store.open("wal/2")
    await pipeline.drain()
    assert coordinator.steps == [["wal/0"], ["wal/1"], ["wal/2", "wal/3"]]
    assert [w.results[0].base_offset for w in writes if w.results[0]] == [0, 1, 2, 3]


async def test_a_failed_upload_fails_alone_and_the_segments_after_it_still_commit() -> None:
    clock = ManualClock()
    coordinator, epoch = await gated_groups(clock)
    store = GatedStore(MemoryObjectStore(clock))
    store.stuck.add("wal/1")  # its PUT hangs: the upload times out
    config = WalConfig(upload_attempts=1, upload_timeout_ms=100)
    pipeline = pipeline_of(clock, store, coordinator, epoch, config)
    writes = [request() for _ in range(3)]
    for number, write in enumerate(writes):
        launch(pipeline, number, write)
    store.gated = False
    coordinator.gate.set()
    await clock.advance(0.2)
    await settle()
    await pipeline.drain()
    assert coordinator.steps == [["wal/0"], ["wal/2"]]
    errors = [w.results[0].error if w.results[0] else None for w in writes]
    assert errors == [ErrorCode.NONE, ErrorCode.KAFKA_STORAGE_ERROR, ErrorCode.NONE]
    assert pipeline.segments_upload_failed == 1 and pipeline.commits == 2


async def test_a_group_step_that_fails_fails_every_member_and_the_next_step_goes_on() -> None:
    clock = ManualClock()
    coordinator, epoch = await gated_groups(clock)
    coordinator.lost = {2}
    store = GatedStore(MemoryObjectStore(clock))
    pipeline = pipeline_of(clock, store, coordinator, epoch, WalConfig(commit_group_max=2))
    writes = [request() for _ in range(5)]
    for number, write in enumerate(writes):
        launch(pipeline, number, write)
    await settle()
    store.open("wal/0")
    await settle()
    for number in range(1, 5):
        store.open(f"wal/{number}")
    await settle()
    coordinator.gate.set()
    await pipeline.drain()
    assert coordinator.steps == [["wal/0"], ["wal/1", "wal/2"], ["wal/3", "wal/4"]]
    results = [w.results[0] for w in writes]
    assert all(r is not None for r in results)
    assert [r.error for r in results if r is not None] == [
        ErrorCode.NONE,
        ErrorCode.KAFKA_STORAGE_ERROR,  # retriable: the outcome is unknown
        ErrorCode.KAFKA_STORAGE_ERROR,
        ErrorCode.NONE,
        ErrorCode.NONE,
    ]
    # The lost step was applied: the next one continues after it.
    assert [r.base_offset for r in results if r is not None and r.error == 0] == [0, 3, 4]
    assert pipeline.commits == 3 and pipeline.commits_failed == 2 and pipeline.commit_steps == 2


async def test_closing_during_a_group_commit_answers_every_member_once() -> None:
    clock = ManualClock()
    coordinator, epoch = await gated_groups(clock)
    coordinator.free_steps = 1
    store = GatedStore(MemoryObjectStore(clock))
    pipeline = pipeline_of(clock, store, coordinator, epoch)
    writes = [request() for _ in range(3)]
    for number, write in enumerate(writes):
        launch(pipeline, number, write)
    await settle()
    store.open("wal/0")
    await settle()
    store.open("wal/1")
    store.open("wal/2")
    await settle()  # wal/0 committed; wal/1 and wal/2 wait at the gate in one step
    pipeline.cancel()
    await pipeline.drain()
    assert coordinator.steps == [["wal/0"], ["wal/1", "wal/2"]]
    assert writes[0].results[0] is not None and writes[0].results[0].error == ErrorCode.NONE
    for write in writes[1:]:
        (result,) = write.results
        assert result is not None and result.error != ErrorCode.NONE
        assert "outcome unknown" in (result.error_message or "")


@pytest.mark.parametrize("attempts", [1, 3])
async def test_a_segment_whose_upload_keeps_failing_fails_its_batches(attempts: int) -> None:
    clock = ManualClock()
    store = FaultyObjectStore(MemoryObjectStore(clock), random.Random(0), put_fail_rate=1.0)
    coordinator = InMemoryBatchCoordinator(clock=clock)
    pipeline = SegmentPipeline(
        broker_id=1,
        broker_epoch=1,
        store=store,
        coordinator=coordinator,
        config=WalConfig(upload_attempts=attempts, upload_backoff_ms=10),
        clock=clock,
        cache=SegmentCache(0),
        fenced_result=CommitBatchResult(error=ErrorCode.NOT_LEADER_OR_FOLLOWER),
        fenced=lambda: False,
        on_fenced=lambda: None,
        release=lambda size: None,
    )
    write = request()
    segment = Segment(0.0)
    segment.add(write.entries[0], write.entries[0].header.size, write, 0)
    segment.key = "wal/x"
    segment.seal()
    pipeline.launch(segment)
    for _ in range(20):
        await clock.advance(0.05)
        await settle(3)
    await pipeline.drain()
    assert write.results[0] is not None
    assert write.results[0].error == ErrorCode.KAFKA_STORAGE_ERROR
    assert pipeline.upload_attempts_failed == attempts and pipeline.segments_upload_failed == 1
