"""Unit tests of `DisklessBroker.produce`: per-partition validation, acks, metadata, ordering."""

from __future__ import annotations

import asyncio
import random
import struct
import threading
from collections.abc import AsyncIterator, Mapping, Sequence
from typing import Any

import pytest

from diskless import BrokerConfig, DisklessBroker
from diskless._types import CompressionType, ErrorCode, OffsetSpec, TimestampType, TopicPartition
from diskless.broker import _produce_path
from diskless.clock import ManualClock, SystemClock
from diskless.coordinator import (
    InMemoryBatchCoordinator,
    ListOffsetsRequest,
    TopicConfig,
    TopicDescription,
)
from diskless.errors import BrokerClosedError, CoordinatorUnavailableError
from diskless.records import set_log_append_time
from diskless.storage import FaultyObjectStore, MemoryObjectStore
from diskless.wal import WalConfig
from testkit.batches import CREATE_TIME_MS, build_batch, decode, records_of
from testkit.oracle import build_batch as oracle_batch

FAST = BrokerConfig(wal=WalConfig(commit_interval_ms=5, upload_attempts=1, upload_backoff_ms=0))
T0, T1, T2 = (TopicPartition("t", p) for p in range(3))


class CountingCoordinator(InMemoryBatchCoordinator):
    """Counts describe_topics calls; optionally holds the first one until `gate` is set."""

    def __init__(self) -> None:
        super().__init__()
        self.describe_calls = 0
        self.gate: asyncio.Event | None = None

    async def describe_topics(self, names: Sequence[str] | None = None) -> list[TopicDescription]:
        self.describe_calls += 1
        gate, self.gate = self.gate, None
        if gate is not None:
            await gate.wait()
        return await super().describe_topics(names)


@pytest.fixture
async def coordinator() -> CountingCoordinator:
    coordinator = CountingCoordinator()
    await coordinator.create_topic("t", 3)
    await coordinator.create_topic("small", 1, TopicConfig(max_message_bytes=200))
    await coordinator.create_topic(
        "lat", 1, TopicConfig(timestamp_type=TimestampType.LOG_APPEND_TIME)
    )
    return coordinator


@pytest.fixture
async def broker(coordinator: CountingCoordinator) -> AsyncIterator[DisklessBroker]:
    async with DisklessBroker(1, MemoryObjectStore(), coordinator, FAST, rack="az-a") as broker:
        yield broker


def _idempotent(values: Sequence[bytes], base_sequence: int = 0, pid: int = 7) -> bytes:
    return build_batch(values, producer_id=pid, producer_epoch=0, base_sequence=base_sequence)


def _txn(pid: int, value: bytes) -> bytes:
    return build_batch(
        [value], producer_id=pid, producer_epoch=0, base_sequence=0, transactional=True
    )


def _corrupt_crc() -> bytes:
    batch = bytearray(build_batch([b"x"]))
    batch[-1] ^= 0x01
    return bytes(batch)


def _base_offset_five() -> bytes:
    batch = bytearray(build_batch([b"x"]))
    struct.pack_into(">q", batch, 0, 5)  # outside the CRC, so only the base offset check fires
    return bytes(batch)


def _log_append_time_bit() -> bytes:
    batch = bytearray(build_batch([b"x"]))
    set_log_append_time(batch, 1)  # CRC recomputed: only the attribute is wrong
    return bytes(batch)


INVALID = {
    "corrupt crc": (T1, _corrupt_crc(), ErrorCode.CORRUPT_MESSAGE),
    "truncated": (T1, build_batch([b"x"])[:-4], ErrorCode.CORRUPT_MESSAGE),
    "garbage": (T1, b"\x00" * 7, ErrorCode.CORRUPT_MESSAGE),
    "two batches": (T1, build_batch([b"x"]) * 2, ErrorCode.INVALID_RECORD),
    "base offset": (T1, _base_offset_five(), ErrorCode.INVALID_RECORD),
    "log append time": (T1, _log_append_time_bit(), ErrorCode.INVALID_TIMESTAMP),
    "too large": (
        TopicPartition("small", 0),
        build_batch([b"x" * 300]),
        ErrorCode.MESSAGE_TOO_LARGE,
    ),
    "unknown topic": (
        TopicPartition("nope", 0),
        build_batch([b"x"]),
        ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
    ),
    "unknown partition": (
        TopicPartition("t", 3),
        build_batch([b"x"]),
        ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
    ),
    "negative partition": (
        TopicPartition("t", -1),
        build_batch([b"x"]),
        ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
    ),
    "out of order sequence": (
        T1,
        _idempotent([b"x"], base_sequence=3),
        ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER,
    ),
}


@pytest.mark.parametrize("kind", sorted(INVALID))
async def test_an_invalid_partition_fails_alone(broker: DisklessBroker, kind: str) -> None:
    bad_tp, bad_data, expected = INVALID[kind]
    if kind == "out of order sequence":  # the producer exists with last sequence 0
        assert (await broker.produce({T1: _idempotent([b"first"])}))[T1].error == ErrorCode.NONE
    results = await broker.produce(
        {T0: build_batch([b"a", b"b"]), bad_tp: bad_data, T2: _idempotent([b"c"], pid=8)}
    )
    assert results[bad_tp].error == expected, results[bad_tp]
    assert results[bad_tp].base_offset == -1
    assert results[bad_tp].error_message
    assert results[T0].error == ErrorCode.NONE and results[T0].base_offset == 0
    assert results[T2].error == ErrorCode.NONE and results[T2].base_offset == 0
    fetched = await broker.fetch({T0: 0, T2: 0})
    assert [r.value for r in records_of(fetched[T0].records)] == [b"a", b"b"]
    assert [r.value for r in records_of(fetched[T2].records)] == [b"c"]
    if bad_tp in (T1,) and kind != "out of order sequence":
        assert (await broker.fetch({T1: 0}))[T1].high_watermark == 0  # nothing stored


async def test_transactional_batches_of_two_producers_fail_with_invalid_mapping(
    broker: DisklessBroker,
) -> None:
    results = await broker.produce(
        {
            T0: _txn(1, b"a"),
            T1: _txn(2, b"b"),
            T2: build_batch([b"c"]),
        }
    )
    assert results[T0].error == ErrorCode.INVALID_PRODUCER_ID_MAPPING
    assert results[T1].error == ErrorCode.INVALID_PRODUCER_ID_MAPPING
    assert results[T2].error == ErrorCode.NONE
    # One transactional producer across partitions is not a mapping error.
    same = await broker.produce(
        {
            T0: _txn(1, b"a"),
            T1: _txn(1, b"b"),
        }
    )
    assert {r.error for r in same.values()} & {ErrorCode.INVALID_PRODUCER_ID_MAPPING} == set()


async def test_zstd_when_not_allowed_fails_only_its_partition(
    broker: DisklessBroker, coordinator: CountingCoordinator
) -> None:
    """Below Produce v7 a front end forbids zstd; the library's callers may use it by default.
    The first request checks in a task (no topic cached yet), the second in the caller's step."""
    zstd = oracle_batch([(CREATE_TIME_MS, None, b"z" * 50, [])], compression=4)
    for _ in range(2):
        results = await broker.produce({T0: zstd, T1: build_batch([b"ok"])}, allow_zstd=False)
        assert results[T0].error == ErrorCode.UNSUPPORTED_COMPRESSION_TYPE, results[T0]
        assert results[T1].error == ErrorCode.NONE, results[T1]
    assert coordinator.describe_calls == 1  # both paths ran
    assert (await broker.list_offsets({T0: OffsetSpec.LATEST}))[T0].offset == 0
    assert (await broker.produce({T0: zstd}))[T0].error == ErrorCode.NONE


async def test_a_topics_codec_is_applied_and_its_failures_stay_in_their_partition(
    broker: DisklessBroker, coordinator: CountingCoordinator
) -> None:
    """A gzip topic stores an lz4 batch in gzip; an uncompressed topic refuses one that no longer
    fits max.message.bytes once uncompressed, alone: the request's other partitions are stored,
    and a topic keeping the producer's codec stores its batch as sent."""
    records = [(CREATE_TIME_MS + i, None, b"compressible " * 40, []) for i in range(8)]
    lz4 = oracle_batch(records, compression=3)
    raw_size = len(oracle_batch(records))
    assert len(lz4) < 300 < raw_size
    await coordinator.create_topic("gz", 1, TopicConfig(compression_type=CompressionType.GZIP))
    await coordinator.create_topic(
        "raw",
        1,
        TopicConfig(compression_type=CompressionType.UNCOMPRESSED, max_message_bytes=raw_size - 1),
    )
    gz, raw = TopicPartition("gz", 0), TopicPartition("raw", 0)
    for _ in range(2):  # the topics not cached yet, then cached
        raw_result = (await broker.produce({raw: lz4, gz: lz4, T0: lz4}))[raw]
        assert raw_result.error == ErrorCode.MESSAGE_TOO_LARGE, raw_result
        assert "recompression" in (raw_result.error_message or "")
    fetched = await broker.fetch({gz: 0, T0: 0, raw: 0})
    assert fetched[raw].high_watermark == 0
    stored = {tp: decode(fetched[tp].records) for tp in (gz, T0)}
    assert [[b.compression for b in stored[tp]] for tp in (gz, T0)] == [[1, 1], [3, 3]]
    for batches in stored.values():
        assert [r.value for b in batches for r in b.records] == [v for _, _, v, _ in records] * 2
        assert [r.timestamp for b in batches for r in b.records] == [t for t, *_ in records] * 2
    assert bytes(fetched[T0].records)[17 : len(lz4)] == lz4[17:]  # from the CRC on, as sent


async def test_a_recompressing_topics_batches_are_checked_off_the_event_loop(
    broker: DisklessBroker, coordinator: CountingCoordinator, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Compressing a megabyte takes gzip some 40 ms and zstd at level 19 over a second: the
    loop would stall every other client meanwhile. The producer's codec is checked in place."""
    threads: list[int] = []
    checked_where_it_runs = _produce_path.check_produce

    def check_produce(*args: Any, **kwargs: Any) -> Any:
        threads.append(threading.get_ident())
        return checked_where_it_runs(*args, **kwargs)

    monkeypatch.setattr("diskless.broker._produce_path.check_produce", check_produce)
    await coordinator.create_topic("gz", 1, TopicConfig(compression_type=CompressionType.GZIP))
    gz = TopicPartition("gz", 0)
    for _ in range(2):  # the topics not cached yet, then cached
        results = await broker.produce({gz: build_batch([b"a" * 100])})
        assert results[gz].error == ErrorCode.NONE
        results = await broker.produce({T0: build_batch([b"b" * 100])})
        assert results[T0].error == ErrorCode.NONE
    loop = threading.get_ident()
    assert [thread == loop for thread in threads] == [False, True, False, True]
    assert [b.compression for b in decode((await broker.fetch({gz: 0}))[gz].records)] == [1, 1]


@pytest.mark.parametrize("acks", [2, -2, 5])
async def test_invalid_acks_fail_every_partition(broker: DisklessBroker, acks: int) -> None:
    results = await broker.produce({T0: build_batch([b"a"]), T1: build_batch([b"b"])}, acks=acks)
    assert {tp: r.error for tp, r in results.items()} == {
        T0: ErrorCode.INVALID_REQUIRED_ACKS,
        T1: ErrorCode.INVALID_REQUIRED_ACKS,
    }
    assert (await broker.list_offsets({T0: OffsetSpec.LATEST}))[T0].offset == 0


async def test_acks_one_is_durable_like_acks_all(broker: DisklessBroker) -> None:
    one = await broker.produce({T0: _idempotent([b"a"])}, acks=1)
    everyone = await broker.produce({T0: _idempotent([b"b"], base_sequence=1)}, acks=-1)
    assert (one[T0].error, one[T0].base_offset) == (ErrorCode.NONE, 0)
    assert (everyone[T0].error, everyone[T0].base_offset) == (ErrorCode.NONE, 1)
    assert (await broker.list_offsets({T0: OffsetSpec.LATEST}))[T0].offset == 2


async def test_acks_zero_returns_at_once_and_close_awaits_the_write(
    coordinator: CountingCoordinator,
) -> None:
    store = MemoryObjectStore()
    broker = DisklessBroker(1, store, coordinator, FAST)
    await broker.start()
    assert (
        await broker.produce({T0: build_batch([b"fire"]), T1: build_batch([b"forget"])}, acks=0)
        == {}
    )
    await broker.close()
    async with DisklessBroker(2, store, coordinator, FAST) as reader:
        fetched = await reader.fetch({T0: 0, T1: 0})
    assert [r.value for r in records_of(fetched[T0].records)] == [b"fire"]
    assert [r.value for r in records_of(fetched[T1].records)] == [b"forget"]


async def test_acks_zero_keeps_request_order(broker: DisklessBroker) -> None:
    for seq in range(5):
        assert await broker.produce({T0: _idempotent([b"%d" % seq], seq)}, acks=0) == {}
    last = await broker.produce({T0: _idempotent([b"5"], 5)})
    assert (last[T0].error, last[T0].base_offset) == (ErrorCode.NONE, 5)


async def test_duplicate_is_acknowledged_with_its_original_offset(broker: DisklessBroker) -> None:
    batch = _idempotent([b"a", b"b"])
    first = await broker.produce({T0: batch})
    again = await broker.produce({T0: batch})
    assert (again[T0].error, again[T0].base_offset) == (ErrorCode.NONE, first[T0].base_offset)
    assert (await broker.list_offsets({T0: OffsetSpec.LATEST}))[T0].offset == 2


async def test_topic_metadata_is_cached_and_refreshed_for_unknown_names(
    coordinator: CountingCoordinator,
) -> None:
    config = BrokerConfig(wal=FAST.wal, topic_metadata_ttl_ms=3_600_000)
    async with DisklessBroker(1, MemoryObjectStore(), coordinator, config) as broker:
        await broker.produce({T0: build_batch([b"a"])})
        await broker.produce({T1: build_batch([b"b"])})
        assert coordinator.describe_calls == 1
        # An unknown topic is asked for every time (never cached), so creating it is seen at once.
        new = TopicPartition("new", 0)
        missing = await broker.produce({new: build_batch([b"n"])})
        assert missing[new].error == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
        await coordinator.create_topic("new", 1)
        created = await broker.produce({new: build_batch([b"n"])})
        assert created[new].error == ErrorCode.NONE
        # A partition beyond the cached count refreshes once: the topic grew behind our back.
        await coordinator.create_partitions("new", 2)
        grown = await broker.produce({TopicPartition("new", 1): build_batch([b"g"])})
        assert grown[TopicPartition("new", 1)].error == ErrorCode.NONE
        calls = coordinator.describe_calls
        await broker.produce(
            {T2: build_batch([b"c"]), TopicPartition("new", 1): build_batch([b"g"])}
        )
        assert coordinator.describe_calls == calls


async def test_expired_metadata_is_asked_again(coordinator: CountingCoordinator) -> None:
    config = BrokerConfig(wal=FAST.wal, topic_metadata_ttl_ms=0)
    async with DisklessBroker(1, MemoryObjectStore(), coordinator, config) as broker:
        await broker.produce({T0: build_batch([b"a"])})
        await broker.produce({T0: build_batch([b"b"])})
    assert coordinator.describe_calls == 2


async def test_a_request_waiting_for_metadata_is_not_overtaken(
    coordinator: CountingCoordinator,
) -> None:
    # Two pipelined requests of one producer both miss the metadata cache; the first one's lookup
    # is held back. Were the second written first, its sequence would be out of order.
    async with DisklessBroker(1, MemoryObjectStore(), coordinator, FAST) as broker:
        gate = asyncio.Event()
        coordinator.gate = gate
        first = asyncio.create_task(broker.produce({T0: _idempotent([b"0", b"1"], 0)}))
        second = asyncio.create_task(broker.produce({T0: _idempotent([b"2"], 2)}))
        for _ in range(20):
            await asyncio.sleep(0)
        assert not first.done() and not second.done()
        gate.set()
        one, two = await first, await second
    assert (one[T0].error, one[T0].base_offset) == (ErrorCode.NONE, 0)
    assert (two[T0].error, two[T0].base_offset) == (ErrorCode.NONE, 2)


async def test_a_cached_request_does_not_overtake_one_waiting_for_metadata(
    coordinator: CountingCoordinator,
) -> None:
    # The second request could be handed to the WAL at once (its topic is cached), but the first
    # one, of the same producer, still waits for a refresh (it names a partition beyond the
    # cached count): the second must wait its turn, or its sequence would be out of order.
    async with DisklessBroker(1, MemoryObjectStore(), coordinator, FAST) as broker:
        assert (await broker.produce({T1: build_batch([b"warm"])}))[T1].error == ErrorCode.NONE
        gate = asyncio.Event()
        coordinator.gate = gate
        beyond = TopicPartition("t", 5)
        first = asyncio.create_task(
            broker.produce({T0: _idempotent([b"0", b"1"], 0), beyond: build_batch([b"x"])})
        )
        second = asyncio.create_task(broker.produce({T0: _idempotent([b"2"], 2)}))
        for _ in range(20):
            await asyncio.sleep(0)
        assert not first.done() and not second.done()
        gate.set()
        one, two = await first, await second
    assert (one[T0].error, one[T0].base_offset) == (ErrorCode.NONE, 0)
    assert one[beyond].error == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
    assert (two[T0].error, two[T0].base_offset) == (ErrorCode.NONE, 2)


async def test_close_lets_started_requests_reach_the_wal(
    coordinator: CountingCoordinator,
) -> None:
    broker = DisklessBroker(1, MemoryObjectStore(), coordinator, FAST)
    await broker.start()
    gate = asyncio.Event()
    coordinator.gate = gate
    started = asyncio.create_task(broker.produce({T0: build_batch([b"late"])}))
    for _ in range(5):
        await asyncio.sleep(0)
    closing = asyncio.create_task(broker.close())
    for _ in range(5):
        await asyncio.sleep(0)
    assert not closing.done()
    gate.set()
    await closing
    result = await started
    assert (result[T0].error, result[T0].base_offset) == (ErrorCode.NONE, 0)


async def test_a_hung_coordinator_cannot_hold_a_request_past_its_timeout(
    coordinator: CountingCoordinator,
) -> None:
    clock = ManualClock(start_ms=SystemClock().now_ms())  # the coordinator keeps real time
    gate = coordinator.gate = asyncio.Event()  # the first metadata call never answers...
    config = BrokerConfig(wal=FAST.wal, request_timeout_ms=5_000)
    broker = DisklessBroker(1, MemoryObjectStore(clock), coordinator, config, clock=clock)
    await broker.start()
    stuck = asyncio.create_task(broker.produce({T0: build_batch([b"a"])}, timeout_ms=2_000))
    behind = asyncio.create_task(broker.produce({T0: build_batch([b"b"])}, timeout_ms=2_000))
    await clock.advance(1.999)
    assert not stuck.done() and not behind.done()
    await clock.advance(0.001)
    for request in (stuck, behind):  # ...so both time out, the second behind the first
        result = await request
        assert result[T0].error is ErrorCode.REQUEST_TIMED_OUT, result
    # The request's own budget (request_timeout_ms) then ends its wait for the coordinator.
    await clock.advance(3.0)
    gate.set()
    await clock.advance(0.1)
    [latest] = await coordinator.list_offsets([ListOffsetsRequest(T0, OffsetSpec.LATEST)])
    assert latest.offset == 1  # only the request behind it was written
    fetched = await broker.fetch({T0: 0})
    assert [r.value for r in records_of(fetched[T0].records)] == [b"b"]
    pending = asyncio.create_task(broker.produce({T0: build_batch([b"c"])}))
    while not pending.done():  # the WAL rotates on the virtual clock
        await clock.advance(0.005)
    later = pending.result()
    assert (later[T0].error, later[T0].base_offset) == (ErrorCode.NONE, 1)
    await broker.close()


async def test_a_request_whose_caller_timed_out_still_reaches_the_wal_in_order(
    coordinator: CountingCoordinator,
) -> None:
    clock = ManualClock(start_ms=SystemClock().now_ms())
    gate = coordinator.gate = asyncio.Event()  # a slow metadata call, answered within budget
    broker = DisklessBroker(1, MemoryObjectStore(clock), coordinator, FAST, clock=clock)
    await broker.start()
    first = asyncio.create_task(broker.produce({T0: _idempotent([b"a"])}, timeout_ms=1_000))
    second = asyncio.create_task(
        broker.produce({T0: _idempotent([b"b"], base_sequence=1)}, timeout_ms=1_000)
    )
    await clock.advance(1.0)
    assert (await first)[T0].error is ErrorCode.REQUEST_TIMED_OUT
    assert (await second)[T0].error is ErrorCode.REQUEST_TIMED_OUT
    gate.set()
    retry = asyncio.create_task(broker.produce({T0: _idempotent([b"a"])}))
    while not retry.done():
        await clock.advance(0.005)
    # The retry is a duplicate: the timed-out request was committed first, at offset 0.
    assert (retry.result()[T0].error, retry.result()[T0].base_offset) == (ErrorCode.NONE, 0)
    fetched = await broker.fetch({T0: 0})
    assert fetched[T0].high_watermark == 2
    assert [r.value for r in records_of(fetched[T0].records)] == [b"a", b"b"]
    await broker.close()


async def test_a_rewrite_runs_in_the_requests_turn(broker: DisklessBroker) -> None:
    """A request whose `rewrite` waits holds back the requests behind it, and what it returns is
    what is written."""
    gate = asyncio.Event()

    async def rewrite(
        partitions: Mapping[TopicPartition, bytes | memoryview],
    ) -> dict[TopicPartition, bytes]:
        await gate.wait()
        return dict.fromkeys(partitions, _idempotent([b"a", b"rewritten"]))

    first = asyncio.create_task(broker.produce({T0: _idempotent([b"a"])}, rewrite=rewrite))
    second = asyncio.create_task(broker.produce({T0: _idempotent([b"b"], base_sequence=2)}))
    await asyncio.sleep(0.05)
    assert not first.done() and not second.done()
    gate.set()
    assert ((await first)[T0].error, (await first)[T0].base_offset) == (ErrorCode.NONE, 0)
    assert ((await second)[T0].error, (await second)[T0].base_offset) == (ErrorCode.NONE, 2)
    fetched = await broker.fetch({T0: 0})
    assert [r.value for r in records_of(fetched[T0].records)] == [b"a", b"rewritten", b"b"]


async def test_a_failed_rewrite_fails_its_request_only(broker: DisklessBroker) -> None:
    async def unreachable(
        partitions: Mapping[TopicPartition, bytes | memoryview],
    ) -> dict[TopicPartition, bytes]:
        await asyncio.sleep(0.01)
        raise CoordinatorUnavailableError("the coordinator's server is down")

    failed = asyncio.create_task(broker.produce({T0: _idempotent([b"a"])}, rewrite=unreachable))
    behind = asyncio.create_task(broker.produce({T0: _idempotent([b"b"], pid=8)}))
    with pytest.raises(CoordinatorUnavailableError):
        await failed
    assert ((await behind)[T0].error, (await behind)[T0].base_offset) == (ErrorCode.NONE, 0)


async def test_acks_zero_with_timeout_zero_is_written(broker: DisklessBroker) -> None:
    # The metadata is not cached yet, so the request cannot reach the WAL within 0 ms.
    assert await broker.produce({T0: _idempotent([b"a"])}, acks=0, timeout_ms=0) == {}
    last = await broker.produce({T0: _idempotent([b"b"], base_sequence=1)})
    assert (last[T0].error, last[T0].base_offset) == (ErrorCode.NONE, 1)
    fetched = await broker.fetch({T0: 0})
    assert fetched[T0].high_watermark == 2
    assert [r.value for r in records_of(fetched[T0].records)] == [b"a", b"b"]


async def test_acks_all_with_timeout_zero_times_out_yet_is_committed(
    broker: DisklessBroker,
) -> None:
    timed_out = await broker.produce({T0: _idempotent([b"a"])}, timeout_ms=0)
    assert timed_out[T0].error is ErrorCode.REQUEST_TIMED_OUT, timed_out
    # Validation answers at once even so (metadata is cached now).
    again = await broker.produce({T0: _idempotent([b"b"], 1), T1: _corrupt_crc()}, timeout_ms=0)
    assert again[T0].error is ErrorCode.REQUEST_TIMED_OUT
    assert again[T1].error is ErrorCode.CORRUPT_MESSAGE
    retry = await broker.produce({T0: _idempotent([b"a"])})
    assert (retry[T0].error, retry[T0].base_offset) == (ErrorCode.NONE, 0)  # a duplicate
    fetched = await broker.fetch({T0: 0})
    assert fetched[T0].high_watermark == 2
    assert [r.value for r in records_of(fetched[T0].records)] == [b"a", b"b"]


async def test_a_reused_buffer_does_not_change_an_acks_zero_write(broker: DisklessBroker) -> None:
    buffer = bytearray(build_batch([b"keep me"]))
    assert await broker.produce({T0: buffer}, acks=0) == {}
    buffer[:] = bytes(len(buffer))  # the caller reuses its buffer at once
    assert (await broker.produce({T0: build_batch([b"next"])}))[T0].base_offset == 1
    fetched = await broker.fetch({T0: 0})
    assert [r.value for r in records_of(fetched[T0].records)] == [b"keep me", b"next"]


async def test_crash_close_fails_buffered_requests_and_commits_nothing(
    coordinator: CountingCoordinator,
) -> None:
    slow = BrokerConfig(
        wal=WalConfig(commit_interval_ms=60_000, linger_ms=60_000, upload_attempts=1)
    )
    store = MemoryObjectStore()
    broker = DisklessBroker(1, store, coordinator, slow)
    await broker.start()
    pending = asyncio.create_task(broker.produce({T0: _idempotent([b"buffered"])}))
    for _ in range(10):
        await asyncio.sleep(0)
    assert not pending.done()  # waiting in the active segment for its rotation
    await broker.close(flush=False)
    result = await pending
    assert result[T0].error is not ErrorCode.NONE
    assert result[T0].error.retriable or result[T0].error is ErrorCode.NOT_LEADER_OR_FOLLOWER
    [latest] = await coordinator.list_offsets([ListOffsetsRequest(T0, OffsetSpec.LATEST)])
    assert latest.offset == 0
    assert (await store.list_page("")).objects == []


async def test_log_append_time_is_reported_only_for_such_topics(broker: DisklessBroker) -> None:
    lat = TopicPartition("lat", 0)
    results = await broker.produce({lat: build_batch([b"x"]), T0: build_batch([b"y"])})
    assert results[lat].log_append_time > 0
    assert results[T0].log_append_time == -1
    (record,) = records_of((await broker.fetch({lat: 0}))[lat].records)
    assert (record.timestamp, record.timestamp_type) == (results[lat].log_append_time, 1)


async def test_storage_failure_is_a_retriable_error(coordinator: CountingCoordinator) -> None:
    store = FaultyObjectStore(MemoryObjectStore(), random.Random(1), put_fail_rate=1.0)
    async with DisklessBroker(1, store, coordinator, FAST) as broker:
        results = await broker.produce({T0: build_batch([b"a"]), T1: build_batch([b"b"])})
    assert {r.error for r in results.values()} == {ErrorCode.KAFKA_STORAGE_ERROR}
    assert all(r.error.retriable for r in results.values())


async def test_list_offsets_and_identity(broker: DisklessBroker) -> None:
    assert broker.broker_id == 1 and broker.rack == "az-a" and broker.broker_epoch >= 0
    await broker.produce({T0: build_batch([b"a", b"b", b"c"])})
    offsets = await broker.list_offsets(
        {T0: OffsetSpec.EARLIEST, T1: OffsetSpec.LATEST, TopicPartition("nope", 0): -1}
    )
    assert offsets[T0].offset == 0 and offsets[T0].error == ErrorCode.NONE
    assert offsets[T1].offset == 0
    assert offsets[TopicPartition("nope", 0)].error == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
    latest = await broker.list_offsets({T0: OffsetSpec.LATEST})
    assert latest[T0].offset == 3
    stats = broker.stats()
    assert stats.produce.requests == 1 and stats.produce.partitions == 1
    assert stats.wal is not None


async def test_a_restarted_broker_fences_its_old_incarnation(
    coordinator: CountingCoordinator,
) -> None:
    store = MemoryObjectStore()
    async with (
        DisklessBroker(1, store, coordinator, FAST) as old,
        DisklessBroker(1, store, coordinator, FAST) as new,
    ):
        assert new.broker_epoch > old.broker_epoch
        stale = await old.produce({T0: build_batch([b"zombie"])})
        fresh = await new.produce({T0: build_batch([b"alive"])})
    assert stale[T0].error == ErrorCode.NOT_LEADER_OR_FOLLOWER
    assert (fresh[T0].error, fresh[T0].base_offset) == (ErrorCode.NONE, 0)


async def test_closed_broker_refuses_requests(coordinator: CountingCoordinator) -> None:
    broker = DisklessBroker(1, MemoryObjectStore(), coordinator, FAST)
    with pytest.raises(RuntimeError):
        await broker.produce({T0: build_batch([b"a"])})
    await broker.start()
    await broker.close()
    await broker.close()  # idempotent
    with pytest.raises(BrokerClosedError):
        await broker.produce({T0: build_batch([b"a"])})
    with pytest.raises(BrokerClosedError):
        await broker.fetch({T0: 0})


async def test_acks_zero_requests_are_counted(broker: DisklessBroker) -> None:
    assert await broker.produce({T0: build_batch([b"a"]), T1: _corrupt_crc()}, acks=0) == {}
    await broker.produce({T0: build_batch([b"b"])})
    stats = broker.stats().produce
    assert (stats.requests, stats.partitions, stats.partitions_failed) == (2, 3, 1)
