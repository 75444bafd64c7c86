"""WalWriter unit tests on a virtual clock with the real in-memory store and coordinator."""

from __future__ import annotations

import asyncio
import random
from collections.abc import Sequence

import pytest

from diskless import ErrorCode, ManualClock, TopicPartition
from diskless.coordinator import (
    CallFaults,
    CommitBatchResult,
    CommitFileResult,
    FileCommit,
    InMemoryBatchCoordinator,
)
from diskless.errors import BrokerClosedError
from diskless.storage import Fault, FaultyObjectStore, MemoryObjectStore, StoreOp
from diskless.wal import (
    SegmentCache,
    WalConfig,
    WalEntry,
    WalWriter,
    read_footer,
    read_object_index,
)
from testkit.clocks import drive_deadlines, settle
from testkit.wal import build_batch, decode_values, entry, sized_batch
from tests.wal._rig import GatedStore, RecordingCoordinator, Rig

TP0 = TopicPartition("t", 0)
TP1 = TopicPartition("t", 1)
TIMEOUT_S = 30.0


def _ok(results: Sequence[CommitBatchResult]) -> list[int]:
    assert all(r.error == ErrorCode.NONE for r in results), results
    return [r.base_offset for r in results]


async def _objects(rig: Rig) -> list[str]:
    page = await rig.memory.list_page("wal/")
    return [info.key for info in page.objects]


# --- configuration ----------------------------------------------------------------------------
def test_config_checks_related_limits() -> None:
    with pytest.raises(ValueError, match="inflight_bytes_max"):
        WalConfig(buffer_max_bytes=1000, inflight_bytes_max=999)
    with pytest.raises(ValueError):
        WalConfig(upload_attempts=0)
    with pytest.raises(ValueError):
        WalConfig(object_prefix="wal")
    assert WalConfig().buffer_max_bytes == 8 * 1024 * 1024


def test_public_names() -> None:
    import diskless.wal

    assert set(diskless.wal.__all__) == {
        "PendingWrite",
        "WalConfig",
        "WalEntry",
        "WalStats",
        "WalWriter",
        "SegmentCache",
        "FORMAT_VERSION",
        "TRAILER_SIZE",
        "SegmentIndexEntry",
        "WalFormatError",
        "encode_footer",
        "encode_segment",
        "read_footer",
        "read_object_index",
        # consolidated objects
        "EXTENT_TRAILER_SIZE",
        "ExtentFooter",
        "ExtentFormatError",
        "ExtentIndexEntry",
        "INDEX_INTERVAL_BYTES_DEFAULT",
        "decode_extent_footer",
        "encode_extent",
    }


# --- rotation ---------------------------------------------------------------------------------
async def test_rotation_by_size_needs_no_time() -> None:
    rig = Rig(WalConfig(buffer_max_bytes=1000, commit_interval_ms=250))
    await rig.topic()
    writer = await rig.writer()
    start = rig.clock.monotonic()
    writes = [
        asyncio.ensure_future(
            writer.write([entry(TP0, sized_batch(250, tag=i))], timeout_s=TIMEOUT_S)
        )
        for i in range(4)
    ]
    await settle()
    assert all(w.done() for w in writes)  # 4 x 250 bytes reached the buffer size: no timer
    assert sorted(_ok([w.result()[0] for w in writes])) == [0, 1, 2, 3]
    assert rig.clock.monotonic() == start
    (key,) = await _objects(rig)
    assert len(read_footer(await rig.memory.get(key))) == 4
    await rig.close()


async def test_a_batch_that_would_overflow_the_buffer_starts_a_new_segment() -> None:
    rig = Rig(WalConfig(buffer_max_bytes=1000, commit_interval_ms=250))
    await rig.topic()
    writer = await rig.writer()
    results = await drive_deadlines(
        rig.clock,
        asyncio.gather(
            *(
                writer.write([entry(TP0, sized_batch(300, tag=i))], timeout_s=TIMEOUT_S)
                for i in range(4)
            )
        ),
    )
    assert [r[0].base_offset for r in results] == [0, 1, 2, 3]
    keys = await _objects(rig)
    assert len(keys) == 2
    assert [len(read_footer(await rig.memory.get(k))) for k in keys] == [3, 1]
    await rig.close()


async def test_rotation_by_interval_after_the_first_write() -> None:
    rig = Rig(WalConfig(commit_interval_ms=250, linger_ms=250))  # the interval alone
    await rig.topic()
    writer = await rig.writer()
    first = asyncio.ensure_future(
        writer.write([entry(TP0, build_batch([b"a"]))], timeout_s=TIMEOUT_S)
    )
    await settle()
    await rig.clock.advance(0.0625)
    second = asyncio.ensure_future(
        writer.write([entry(TP1, build_batch([b"b"]))], timeout_s=TIMEOUT_S)
    )
    await rig.clock.advance(0.125 + 0.0546875)  # binary fractions: exact
    await settle()
    assert not first.done() and not second.done()
    assert await _objects(rig) == []
    await rig.clock.advance(0.0078125)  # 250 ms after the *first* write
    await settle()
    assert first.done() and second.done()
    assert _ok(first.result()) == [0] and _ok(second.result()) == [0]
    assert len(await _objects(rig)) == 1
    assert writer.stats().segments_rotated == 1
    await rig.close()


async def test_many_concurrent_writers_share_one_object() -> None:
    rig = Rig(WalConfig(commit_interval_ms=250))
    await rig.topic(partitions=8)
    writer = await rig.writer()
    requests = [
        [
            entry(TopicPartition("t", (i + j) % 8), build_batch([f"{i}-{j}".encode()]))
            for j in range(3)
        ]
        for i in range(40)
    ]
    results = await drive_deadlines(
        rig.clock, asyncio.gather(*(writer.write(r, timeout_s=TIMEOUT_S) for r in requests))
    )
    assert all(len(r) == 3 for r in results)
    for r in results:
        _ok(r)
    (key,) = await _objects(rig)
    index = await read_object_index(rig.memory, key)
    assert len(index) == 120
    # Every partition got contiguous offsets from 0; each record reads back where it was acked.
    for p in range(8):
        tp = TopicPartition("t", p)
        acked = {
            res.base_offset: req[j].header.bytes_view().tobytes()
            for req, res_list in zip(requests, results, strict=True)
            for j, res in enumerate(res_list)
            if req[j].topic_partition == tp
        }
        assert sorted(acked) == list(range(len(acked)))
        read = await rig.read_partition(tp)
        assert [base for base, _ in read] == sorted(acked)
    await rig.close()


async def test_a_request_larger_than_the_buffer_is_split_and_answered_in_order() -> None:
    rig = Rig(WalConfig(buffer_max_bytes=1000, inflight_bytes_max=10_000))
    await rig.topic()
    writer = await rig.writer()
    batches = [sized_batch(300, tag=i) for i in range(10)]
    results = await drive_deadlines(
        rig.clock,
        writer.write(
            [entry(TP0 if i % 2 else TP1, b) for i, b in enumerate(batches)], timeout_s=TIMEOUT_S
        ),
    )
    assert [r.base_offset for r in results] == [0, 0, 1, 1, 2, 2, 3, 3, 4, 4]
    _ok(results)
    keys = await _objects(rig)
    assert len(keys) == 4  # 3 + 3 + 3 + 1 batches
    for key in keys:
        index = read_footer(await rig.memory.get(key))
        assert sum(row.size for row in index) <= 1000
    read = await rig.read_partition(TP0)
    assert [values for _, values in read] == [decode_values(batches[i])[1] for i in (1, 3, 5, 7, 9)]
    await rig.close()


async def test_a_batch_bigger_than_the_buffer_gets_a_segment_of_its_own() -> None:
    rig = Rig(WalConfig(buffer_max_bytes=1000, inflight_bytes_max=10_000))
    await rig.topic()
    writer = await rig.writer()
    small = asyncio.ensure_future(writer.write([entry(TP0, sized_batch(200))], timeout_s=TIMEOUT_S))
    await settle()
    big = await drive_deadlines(
        rig.clock, writer.write([entry(TP0, sized_batch(5000))], timeout_s=TIMEOUT_S)
    )
    assert _ok(small.result()) == [0] and _ok(big) == [1]
    keys = rig.coordinator.committed_keys  # rotation order (same-ms keys list in any order)
    sizes = [[row.size for row in read_footer(await rig.memory.get(k))] for k in keys]
    assert sizes == [[200], [5000]]
    await rig.close()


# --- ordering ---------------------------------------------------------------------------------
async def test_uploads_run_concurrently_but_commits_follow_rotation_order() -> None:
    rig = Rig(WalConfig(buffer_max_bytes=500, commit_interval_ms=250))
    gated = GatedStore(MemoryObjectStore(rig.clock))
    await rig.topic()
    writer = await rig.writer(store=gated)
    pid = 77
    writes = []
    for seq in range(5):  # one pipelined idempotent producer, one segment per request
        batch = sized_batch(500, producer_id=pid, producer_epoch=0, base_sequence=seq)
        writes.append(asyncio.ensure_future(writer.write([entry(TP0, batch)], timeout_s=TIMEOUT_S)))
        await settle()
    assert len(gated.waiting) == 5  # all five uploads in flight at once
    rotation_order = [key for key, _ in gated.waiting]
    for key in reversed(rotation_order):  # PUTs complete newest first
        gated.open(key)
        await settle()
    await settle()
    assert rig.coordinator.committed_keys == rotation_order
    assert [w.result()[0].base_offset for w in writes] == [0, 1, 2, 3, 4]
    _ok([w.result()[0] for w in writes])
    await rig.close()


async def test_commit_n_does_not_wait_for_upload_n_plus_one() -> None:
    rig = Rig(WalConfig(buffer_max_bytes=500))
    gated = GatedStore(MemoryObjectStore(rig.clock))
    await rig.topic()
    writer = await rig.writer(store=gated)
    first = asyncio.ensure_future(writer.write([entry(TP0, sized_batch(500))], timeout_s=TIMEOUT_S))
    await settle()
    second = asyncio.ensure_future(
        writer.write([entry(TP0, sized_batch(500))], timeout_s=TIMEOUT_S)
    )
    await settle()
    first_key, second_key = (key for key, _ in gated.waiting)
    gated.open(first_key)
    await settle()
    assert first.done() and _ok(first.result()) == [0]
    assert not second.done()
    assert rig.coordinator.committed_keys == [first_key]
    gated.open(second_key)
    await settle()
    assert _ok(second.result()) == [1]
    await rig.close()


# --- failures ---------------------------------------------------------------------------------
async def test_upload_failure_after_all_attempts_is_a_storage_error_and_later_segments_commit() -> (
    None
):
    config = WalConfig(
        buffer_max_bytes=500, upload_attempts=3, upload_backoff_ms=100, uploads_inflight_max=1
    )
    rig = Rig(config)  # one upload at a time, so the scheduled faults hit the first segment
    faulty = FaultyObjectStore(rig.memory, random.Random(1), clock=rig.clock)
    faulty.schedule(StoreOp.PUT, Fault.FAIL, Fault.LOST_ACK, Fault.FAIL)
    await rig.topic()
    writer = await rig.writer(store=faulty)
    started = rig.clock.monotonic()
    failed = asyncio.ensure_future(
        writer.write([entry(TP0, sized_batch(500))], timeout_s=TIMEOUT_S)
    )
    await settle()
    later = asyncio.ensure_future(writer.write([entry(TP0, sized_batch(500))], timeout_s=TIMEOUT_S))
    await drive_deadlines(rig.clock, asyncio.gather(failed, later))
    (result,) = failed.result()
    assert result.error == ErrorCode.KAFKA_STORAGE_ERROR
    assert "3 attempts" in (result.error_message or "")
    assert _ok(later.result()) == [0]
    # The two backoffs (100 ms, then 200 ms) ran on the virtual clock.
    assert rig.clock.monotonic() - started == pytest.approx(0.3)
    stats = writer.stats()
    assert stats.upload_attempts_failed == 3 and stats.segments_upload_failed == 1
    assert stats.commits == 1 and rig.coordinator.commit_calls == 1
    await rig.close()


@pytest.mark.parametrize("fault", ["failure", "unknown"])
async def test_commit_failure_or_unknown_outcome_is_a_storage_error(fault: str) -> None:
    clock = ManualClock()
    inner = InMemoryBatchCoordinator(clock)
    faults = CallFaults(fail_rate=1.0) if fault == "failure" else CallFaults(lost_answer_rate=1.0)
    coordinator = RecordingCoordinator(inner, faults)
    rig = Rig(WalConfig(buffer_max_bytes=500), coordinator=coordinator, clock=clock)
    await rig.topic()
    writer = await rig.writer()
    batch = sized_batch(500, producer_id=5, producer_epoch=0, base_sequence=0)
    (result,) = await drive_deadlines(clock, writer.write([entry(TP0, batch)], timeout_s=TIMEOUT_S))
    assert result.error == ErrorCode.KAFKA_STORAGE_ERROR
    assert writer.stats().commits_failed == 1
    # The producer retries the same batch: a duplicate if the lost answer hid a commit.
    coordinator.enabled = False
    (retry,) = await drive_deadlines(clock, writer.write([entry(TP0, batch)], timeout_s=TIMEOUT_S))
    assert retry.error == ErrorCode.NONE and retry.base_offset == 0
    assert retry.duplicate == (fault == "unknown")
    assert len(await rig.read_partition(TP0)) == 1
    await rig.close()


async def test_a_fenced_broker_fails_everything_and_refuses_further_writes() -> None:
    rig = Rig(WalConfig(buffer_max_bytes=500))
    await rig.topic()
    writer = await rig.writer(broker_id=3)
    await rig.coordinator.register_broker(3)  # a newer incarnation of broker 3 fences us
    buffered = asyncio.ensure_future(
        writer.write([entry(TP1, sized_batch(100))], timeout_s=TIMEOUT_S)
    )
    await settle()
    (result,) = await drive_deadlines(
        rig.clock, writer.write([entry(TP0, sized_batch(500))], timeout_s=TIMEOUT_S)
    )
    assert result.error == ErrorCode.NOT_LEADER_OR_FOLLOWER
    assert "fenced" in (result.error_message or "")
    assert buffered.result()[0].error == ErrorCode.NOT_LEADER_OR_FOLLOWER
    assert writer.fenced and writer.stats().fenced
    calls = rig.coordinator.commit_calls
    (again,) = await writer.write([entry(TP0, sized_batch(500))], timeout_s=TIMEOUT_S)
    assert again.error == ErrorCode.NOT_LEADER_OR_FOLLOWER
    assert rig.coordinator.commit_calls == calls
    assert writer.inflight_bytes == 0
    await rig.close()


# --- backpressure -----------------------------------------------------------------------------
async def test_backpressure_bounds_inflight_bytes_under_a_flood() -> None:
    limit = 4000
    rig = Rig(WalConfig(buffer_max_bytes=1000, inflight_bytes_max=limit, commit_interval_ms=50))
    slow = FaultyObjectStore(rig.memory, random.Random(2), clock=rig.clock, latency_s=0.2)
    await rig.topic()
    writer = await rig.writer(store=slow)
    seen: list[int] = []

    class Probe(RecordingCoordinator):
        async def commit_files(
            self, broker_id: int, broker_epoch: int, files: Sequence[FileCommit]
        ) -> list[CommitFileResult]:
            seen.append(writer.inflight_bytes)
            return await super().commit_files(broker_id, broker_epoch, files)

    # Observe in-flight bytes at each commit.
    writer._pipeline._coordinator = Probe(rig.coordinator.inner)
    writes = [
        writer.write([entry(TopicPartition("t", i % 4), sized_batch(300, tag=i))], timeout_s=600)
        for i in range(200)
    ]
    results = await drive_deadlines(rig.clock, asyncio.gather(*writes))
    for r in results:
        _ok(r)
    stats = writer.stats()
    assert stats.inflight_bytes_max_observed <= limit
    assert stats.inflight_bytes_max_observed > limit - 300 * 2  # the limit was actually reached
    assert seen and max(seen) <= limit
    assert stats.inflight_bytes == 0
    await rig.close()


async def test_backpressure_keeps_each_producers_pipelined_requests_in_order() -> None:
    """Requests that queue for space are admitted whole, in arrival order: a later request of
    the same producer never slips a batch in ahead of an earlier one on any partition."""
    rig = Rig(WalConfig(buffer_max_bytes=1000, inflight_bytes_max=2000, commit_interval_ms=20))
    slow = FaultyObjectStore(rig.memory, random.Random(5), clock=rig.clock, latency_s=0.05)
    await rig.topic(partitions=3)
    writer = await rig.writer(store=slow)
    producers, requests_each, partitions = 6, 12, [TopicPartition("t", p) for p in range(3)]
    shuffle = random.Random(11)

    def request(producer: int, number: int) -> list[WalEntry]:
        order = shuffle.sample(partitions, len(partitions))  # requests list partitions freely
        return [
            entry(
                tp,
                sized_batch(
                    150 + 40 * ((producer + number + tp.partition) % 3),
                    tag=number,
                    producer_id=100 + producer,
                    producer_epoch=0,
                    base_sequence=number,
                ),
            )
            for tp in order
        ]

    # Requests enter `write` in round-robin producer order, each producer's in sequence order.
    entries_of: dict[int, list[list[TopicPartition]]] = {p: [] for p in range(producers)}
    writes = []
    for number in range(requests_each):
        for producer in range(producers):
            entries = request(producer, number)
            entries_of[producer].append([e.topic_partition for e in entries])
            writes.append(writer.write(entries, timeout_s=600))
    results = await drive_deadlines(rig.clock, asyncio.gather(*writes))
    for result in results:
        _ok(result)
    assert writer.stats().inflight_bytes_max_observed <= 2000
    for producer in range(producers):
        mine = results[producer::producers]
        for tp in partitions:
            offsets = [
                result[index].base_offset
                for number, result in enumerate(mine)
                for index, placed in enumerate(entries_of[producer][number])
                if placed == tp
            ]
            assert offsets == sorted(offsets), (producer, tp, offsets)
    await rig.close()


async def test_a_single_entry_above_the_limit_is_admitted_alone() -> None:
    rig = Rig(WalConfig(buffer_max_bytes=1000, inflight_bytes_max=1000))
    await rig.topic()
    writer = await rig.writer()
    results = await drive_deadlines(
        rig.clock,
        asyncio.gather(
            writer.write([entry(TP0, sized_batch(600))], timeout_s=TIMEOUT_S),
            writer.write([entry(TP0, sized_batch(3000))], timeout_s=TIMEOUT_S),
            writer.write([entry(TP0, sized_batch(600))], timeout_s=TIMEOUT_S),
        ),
    )
    assert [_ok(r)[0] for r in results] == [0, 1, 2]
    assert writer.stats().inflight_bytes_max_observed == 3000
    await rig.close()


# --- timeouts ---------------------------------------------------------------------------------
async def test_a_stuck_upload_times_out_on_time() -> None:
    rig = Rig(WalConfig(buffer_max_bytes=500))
    gated = GatedStore(MemoryObjectStore(rig.clock))
    await rig.topic()
    writer = await rig.writer(store=gated)
    started = rig.clock.monotonic()
    stuck = asyncio.ensure_future(writer.write([entry(TP0, sized_batch(500))], timeout_s=2.0))
    await rig.clock.advance(1.999)
    await settle()
    assert not stuck.done()
    await rig.clock.advance(0.001)
    await settle()
    (result,) = stuck.result()
    assert result.error == ErrorCode.REQUEST_TIMED_OUT
    assert rig.clock.monotonic() - started == pytest.approx(2.0)
    assert writer.stats().requests_timed_out == 1
    # The segment carries on: once the PUT completes it commits, and a retry is a duplicate.
    gated.open(gated.waiting[0][0])
    await settle()
    assert rig.coordinator.committed_keys == [gated.waiting[0][0]]
    await rig.close()


async def test_a_write_waiting_for_admission_times_out_on_time() -> None:
    rig = Rig(WalConfig(buffer_max_bytes=500, inflight_bytes_max=500))
    gated = GatedStore(MemoryObjectStore(rig.clock))
    await rig.topic()
    writer = await rig.writer(store=gated)
    blocker = asyncio.ensure_future(writer.write([entry(TP0, sized_batch(500))], timeout_s=60))
    await settle()
    waiting = asyncio.ensure_future(
        writer.write([entry(TP1, sized_batch(100)), entry(TP1, sized_batch(100))], timeout_s=1.5)
    )
    await rig.clock.advance(1.5)
    await settle()
    assert [r.error for r in waiting.result()] == [ErrorCode.REQUEST_TIMED_OUT] * 2
    gated.open(gated.waiting[0][0])
    await settle()
    assert _ok(blocker.result()) == [0]
    assert writer.inflight_bytes == 0  # the timed-out write never took its bytes
    await rig.close()


async def test_a_submit_queued_for_admission_is_written_after_its_wait_ends() -> None:
    """The wait's timeout bounds the wait only: a queued entry is still appended when room frees
    up, within its own admission budget, and its caller's buffer may be reused meanwhile."""
    rig = Rig(WalConfig(buffer_max_bytes=500, inflight_bytes_max=500))
    gated = GatedStore(MemoryObjectStore(rig.clock))
    await rig.topic()
    writer = await rig.writer(store=gated)
    blocker = asyncio.ensure_future(writer.write([entry(TP0, sized_batch(500))], timeout_s=60))
    await settle()
    original = build_batch([b"queued"])
    buffer = bytearray(original)
    pending = writer.submit([entry(TP1, buffer)], admit_s=60)
    waiting = asyncio.ensure_future(writer.wait(pending, timeout_s=1.5))
    await rig.clock.advance(1.5)
    await settle()
    assert [r.error for r in waiting.result()] == [ErrorCode.REQUEST_TIMED_OUT]
    buffer[:] = bytes(len(buffer))  # the caller reuses its buffer
    gated.open(gated.waiting[0][0])
    await settle()
    assert _ok(blocker.result()) == [0]
    gated.gated = False
    for key, _ in gated.waiting[1:]:
        gated.open(key)
    await drive_deadlines(rig.clock, writer.close(flush=True))
    read = await rig.read_partition(TP1, store=gated)
    assert [values for _, values in read] == [[b"queued"]]
    await rig.close()


# --- shutdown ---------------------------------------------------------------------------------
async def test_close_flushes_buffered_entries() -> None:
    rig = Rig(WalConfig(commit_interval_ms=10_000))
    await rig.topic()
    writer = await rig.writer()
    pending = asyncio.ensure_future(
        writer.write([entry(TP0, build_batch([b"x"]))], timeout_s=TIMEOUT_S)
    )
    await settle()
    assert not pending.done()
    await writer.close(flush=True)
    assert _ok(pending.result()) == [0]
    assert len(await _objects(rig)) == 1
    with pytest.raises(BrokerClosedError):
        await writer.write([entry(TP0, build_batch([b"y"]))], timeout_s=TIMEOUT_S)
    await writer.close()  # idempotent


async def test_close_without_flush_fails_buffered_entries_clearly() -> None:
    rig = Rig(WalConfig(commit_interval_ms=10_000))
    await rig.topic()
    writer = await rig.writer()
    pending = asyncio.ensure_future(
        writer.write([entry(TP0, build_batch([b"x"]))], timeout_s=TIMEOUT_S)
    )
    await settle()
    await writer.close(flush=False)
    (result,) = pending.result()
    assert result.error == ErrorCode.NOT_LEADER_OR_FOLLOWER
    assert "shutting down" in (result.error_message or "")
    assert await _objects(rig) == []
    assert rig.coordinator.commit_calls == 0


async def test_close_without_flush_cancels_a_stuck_upload() -> None:
    rig = Rig(WalConfig(buffer_max_bytes=500))
    gated = GatedStore(MemoryObjectStore(rig.clock))
    await rig.topic()
    writer = await rig.writer(store=gated)
    stuck = asyncio.ensure_future(writer.write([entry(TP0, sized_batch(500))], timeout_s=TIMEOUT_S))
    await settle()
    await writer.close(flush=False)
    assert stuck.result()[0].error == ErrorCode.KAFKA_STORAGE_ERROR
    assert writer.inflight_bytes == 0


async def test_close_without_flush_right_after_a_rotation_fails_the_new_segment() -> None:
    """The segment is launched and the writer closed in the same step of the loop, so its task
    is cancelled before it ever ran: its batch still fails, and its bytes are released."""
    rig = Rig(WalConfig(buffer_max_bytes=1))
    await rig.topic()
    writer = await rig.writer()
    pending = writer.submit([entry(TP0, build_batch([b"x"]))], admit_s=TIMEOUT_S)  # rotates
    await writer.close(flush=False)
    (result,) = await asyncio.wait_for(writer.wait(pending, timeout_s=TIMEOUT_S), TIMEOUT_S)
    assert result.error == ErrorCode.KAFKA_STORAGE_ERROR
    assert writer.inflight_bytes == 0
    assert rig.coordinator.commit_calls == 0


async def test_write_before_start_and_empty_writes() -> None:
    rig = Rig()
    writer = WalWriter(broker_id=1, broker_epoch=1, store=rig.store, coordinator=rig.coordinator)
    with pytest.raises(RuntimeError):
        await writer.write([entry(TP0, build_batch([b"x"]))], timeout_s=1)
    await writer.start()
    assert await writer.write([], timeout_s=1) == []
    await writer.close()


async def test_async_context_manager_flushes() -> None:
    rig = Rig(WalConfig(commit_interval_ms=10_000))
    await rig.topic()
    epoch = await rig.coordinator.register_broker(1)
    async with WalWriter(
        broker_id=1,
        broker_epoch=epoch,
        store=rig.store,
        coordinator=rig.coordinator,
        clock=rig.clock,
    ) as writer:
        pending = asyncio.ensure_future(
            writer.write([entry(TP0, build_batch([b"x"]))], timeout_s=5)
        )
        await settle()
    assert _ok(pending.result()) == [0]


# --- idempotence and the cache ----------------------------------------------------------------
async def test_duplicates_return_the_original_offsets() -> None:
    rig = Rig(WalConfig(commit_interval_ms=100))
    await rig.topic()
    writer = await rig.writer()
    batches = [
        build_batch([b"a", b"b"], producer_id=9, producer_epoch=0, base_sequence=s) for s in (0, 2)
    ]
    first = await drive_deadlines(
        rig.clock, writer.write([entry(TP0, batches[0])], timeout_s=TIMEOUT_S)
    )
    # The second batch, and a retry of the first in the same segment as a fresh one.
    again = await drive_deadlines(
        rig.clock,
        asyncio.gather(
            writer.write([entry(TP0, batches[0])], timeout_s=TIMEOUT_S),
            writer.write([entry(TP0, batches[1])], timeout_s=TIMEOUT_S),
            writer.write([entry(TP0, batches[1])], timeout_s=TIMEOUT_S),
        ),
    )
    assert _ok(first) == [0]
    assert [r[0].base_offset for r in again] == [0, 2, 2]
    assert [r[0].duplicate for r in again] == [True, False, True]
    assert [base for base, _ in await rig.read_partition(TP0)] == [0, 2]
    await rig.close()


async def test_the_writer_caches_what_it_uploaded() -> None:
    rig = Rig(WalConfig(commit_interval_ms=100))
    await rig.topic()
    cache = SegmentCache(1 << 20)
    writer = await rig.writer(cache=cache)
    batch = build_batch([b"cached"])
    await drive_deadlines(rig.clock, writer.write([entry(TP0, batch)], timeout_s=TIMEOUT_S))
    (key,) = await _objects(rig)
    assert writer.cache is cache and key in cache
    assert cache.get_range(key, 0, len(batch)) == batch
    assert cache.get_range("wal/other.wal", 0, 1) is None
    await rig.close()


def test_segment_cache_evicts_least_recently_used_by_bytes() -> None:
    cache = SegmentCache(100)
    cache.put("a", b"a" * 40)
    cache.put("b", b"b" * 40)
    assert cache.get_range("a", 0, 2) == b"aa"  # a is now the most recent
    cache.put("c", b"c" * 40)
    assert "b" not in cache and "a" in cache and "c" in cache
    assert cache.bytes_now == 80
    assert not cache.put("huge", b"h" * 101)
    assert cache.bytes_now == 80


# --- backends ---------------------------------------------------------------------------------
async def test_sqlite_coordinator_and_local_store(tmp_path: object) -> None:
    sqlite = pytest.importorskip("diskless.coordinator")
    coordinator_class = getattr(sqlite, "SqliteBatchCoordinator", None)
    if coordinator_class is None:
        pytest.skip("SqliteBatchCoordinator not available")
    from pathlib import Path

    from diskless.storage import LocalObjectStore

    assert isinstance(tmp_path, Path)
    clock = ManualClock()
    store = LocalObjectStore(tmp_path / "objects", durable=False)
    coordinator = coordinator_class(tmp_path / "coordinator.db", clock=clock)
    try:
        rig = Rig(
            WalConfig(buffer_max_bytes=2000), store=store, coordinator=coordinator, clock=clock
        )
        await rig.topic()
        writer = await rig.writer()
        entries: list[WalEntry] = [
            entry(
                TopicPartition("t", i % 2),
                build_batch(
                    [f"v{i}".encode()], producer_id=4, producer_epoch=0, base_sequence=i // 2
                ),
            )
            for i in range(20)
        ]
        # This backend works in threads: virtual time moves only for the rotation timer.
        pending = asyncio.ensure_future(writer.write(entries, timeout_s=TIMEOUT_S))
        await settle()
        await clock.advance(0.25)
        results = await asyncio.wait_for(pending, 60)
        assert {r.error for r in results} == {ErrorCode.NONE}, results[0]
        assert [r.base_offset for r in results] == [i // 2 for i in range(20)]
        _ok(results)
        read = await rig.read_partition(TopicPartition("t", 1), store=store)
        assert [values for _, values in read] == [[f"v{i}".encode()] for i in range(1, 20, 2)]
        await writer.close()
    finally:
        await coordinator.close()
        await store.close()


async def test_a_timed_out_batch_no_longer_borrows_the_callers_buffer() -> None:
    """Batches are referenced until rotation; a request returning earlier gets them copied."""
    rig = Rig(WalConfig(commit_interval_ms=10_000, linger_ms=10_000))
    await rig.topic()
    writer = await rig.writer()
    original = build_batch([b"keep me"])
    buffer = bytearray(original)
    (result,) = await drive_deadlines(rig.clock, writer.write([entry(TP0, buffer)], timeout_s=1.0))
    assert result.error == ErrorCode.REQUEST_TIMED_OUT
    buffer[:] = bytes(len(buffer))  # the caller reuses its buffer
    await writer.close(flush=True)
    (key,) = await _objects(rig)
    assert (await rig.memory.get(key))[: len(original)] == original
    assert [values for _, values in await rig.read_partition(TP0)] == [[b"keep me"]]


async def test_a_timed_out_request_gets_every_batch_it_left_in_the_open_segment_copied() -> None:
    rig = Rig(WalConfig(commit_interval_ms=10_000, linger_ms=10_000))  # the segment stays open
    await rig.topic()
    writer = await rig.writer()
    originals = [build_batch([f"mine {i}".encode()]) for i in range(3)]
    buffers = [bytearray(batch) for batch in originals]
    other = build_batch([b"other"])
    waiting = asyncio.ensure_future(writer.write([entry(TP1, other)], timeout_s=60))
    mine = asyncio.ensure_future(
        writer.write([entry(TP0, buffers[0]), entry(TP1, buffers[1])], timeout_s=1.0)
    )
    after = asyncio.ensure_future(writer.write([entry(TP0, buffers[2])], timeout_s=60))
    await settle()
    results = await drive_deadlines(rig.clock, mine)
    assert [r.error for r in results] == [ErrorCode.REQUEST_TIMED_OUT] * 2
    buffers[0][:] = bytes(len(buffers[0]))  # the caller reuses the buffers it got back
    buffers[1][:] = bytes(len(buffers[1]))
    await writer.close(flush=True)
    assert (await waiting)[0].error == ErrorCode.NONE
    assert (await after)[0].error == ErrorCode.NONE
    (key,) = await _objects(rig)
    assert (await rig.memory.get(key)).startswith(other + b"".join(originals))


async def test_a_hung_upload_attempt_times_out_and_later_segments_still_commit() -> None:
    config = WalConfig(
        buffer_max_bytes=500, upload_attempts=2, upload_backoff_ms=100, upload_timeout_ms=1000
    )
    rig = Rig(config)
    gated = GatedStore(MemoryObjectStore(rig.clock))  # PUTs hang until opened
    await rig.topic()
    writer = await rig.writer(store=gated)
    started = rig.clock.monotonic()
    hung = asyncio.ensure_future(writer.write([entry(TP0, sized_batch(500))], timeout_s=60))
    await settle()
    later = asyncio.ensure_future(writer.write([entry(TP0, sized_batch(500))], timeout_s=60))
    await settle()
    gated.stuck.add(gated.waiting[0][0])  # the first segment's PUTs never return
    gated.gated = False  # later PUTs go through; the two already waiting stay stuck
    await drive_deadlines(rig.clock, asyncio.gather(hung, later))
    (result,) = hung.result()
    assert result.error == ErrorCode.KAFKA_STORAGE_ERROR
    assert _ok(later.result()) == [0]
    # Two attempts of 1 s each and one 100 ms backoff, on the virtual clock.
    assert rig.clock.monotonic() - started == pytest.approx(2.1)
    assert writer.stats().upload_attempts_failed == 3  # hung: 2, later: 1 (its first attempt)
    assert writer.stats().segments_upload_failed == 1
    # The store never answered those attempts: the writer reported them, as one outage.
    assert gated.availability.outages == 1 and gated.availability.failed_calls == 3
    await rig.close()


async def test_writers_blocked_by_the_active_segment_rotate_it_without_waiting() -> None:
    """Queued writers freeze the active segment, so it rotates at once instead of at the timer."""
    config = WalConfig(buffer_max_bytes=600, inflight_bytes_max=600, commit_interval_ms=10_000)
    rig = Rig(config)
    gated = GatedStore(MemoryObjectStore(rig.clock))
    await rig.topic()
    writer = await rig.writer(store=gated)
    start = rig.clock.monotonic()

    def send(size: int) -> asyncio.Future[list[CommitBatchResult]]:
        return asyncio.ensure_future(writer.write([entry(TP0, sized_batch(size))], timeout_s=60))

    first = send(500)
    await settle()
    second = send(200)  # blocked by `first` in the active segment: rotates it
    await settle()
    assert len(gated.waiting) == 1
    third = send(500)  # blocked behind `second`, which is not even admitted yet
    await settle()
    gated.gated = False
    gated.open(gated.waiting[0][0])
    await settle()
    # `second` was admitted and appended; `third` cannot fit beside it: rotate, no timer needed.
    assert [_ok(w.result()) for w in (first, second)] == [[0], [1]]
    assert not third.done()
    await writer.close(flush=True)
    assert _ok(third.result()) == [2]
    assert rig.clock.monotonic() == start
    assert writer.stats().segments_rotated == 3
