"""Unit tests of the read path: coalesced reads, cache, rewrites, markers, failure isolation."""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from typing import Any, cast

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from diskless import BrokerConfig, DisklessBroker
from diskless._types import ControlType, ErrorCode, IsolationLevel, TimestampType, TopicPartition
from diskless.coordinator import (
    BatchCoordinator,
    BatchInfo,
    FindBatchesRequest,
    FindBatchesResponse,
    InMemoryBatchCoordinator,
)
from diskless.errors import CoordinatorUnavailableError
from diskless.read import FetchReader, Span, coalesce
from diskless.storage import MemoryObjectStore
from diskless.wal import WalConfig
from testkit.batches import build_batch, decode, records_of

A = TopicPartition("a", 0)
B = TopicPartition("b", 0)
C = TopicPartition("c", 1)
APPEND_TIME = 1_800_000_000_000


class StubCoordinator:
    """Answers find_batches from a fixed table: every batch whose last offset >= the request's."""

    def __init__(self) -> None:
        self.batches: dict[TopicPartition, list[BatchInfo]] = {}
        self.lso: dict[TopicPartition, int] = {}
        self.calls = 0
        self.fail = False

    def add(self, tp: TopicPartition, info: BatchInfo) -> None:
        self.batches.setdefault(tp, []).append(info)

    async def find_batches(
        self, requests: Sequence[FindBatchesRequest], fetch_max_bytes: int
    ) -> list[FindBatchesResponse]:
        self.calls += 1
        if self.fail:
            raise CoordinatorUnavailableError("database is locked")
        out = []
        for r in requests:
            if r.topic_partition not in self.batches:
                out.append(FindBatchesResponse(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, []))
                continue
            infos = self.batches[r.topic_partition]
            hwm = infos[-1].last_offset + 1
            out.append(
                FindBatchesResponse(
                    ErrorCode.NONE,
                    [b for b in infos if b.last_offset >= r.offset],
                    log_start_offset=0,
                    high_watermark=hwm,
                    last_stable_offset=self.lso.get(r.topic_partition, hwm),
                )
            )
        return out


class DictCache:
    def __init__(self) -> None:
        self.objects: dict[str, bytes] = {}

    def get_range(self, key: str, start: int, end: int) -> bytes | None:
        blob = self.objects.get(key)
        return None if blob is None else blob[start:end]


class Layout:
    """Builds one object from batches and the BatchInfo of each, with offsets assigned."""

    def __init__(self, key: str) -> None:
        self.key = key
        self.data = bytearray()

    def place(
        self,
        batch: bytes,
        base_offset: int,
        *,
        timestamp_type: TimestampType = TimestampType.CREATE_TIME,
        gap: int = 0,
    ) -> BatchInfo:
        self.data += b"\xee" * gap  # dead bytes of a rejected batch
        info = BatchInfo(
            object_key=self.key,
            byte_offset=len(self.data),
            size=len(batch),
            base_offset=base_offset,
            last_offset=base_offset + len(decode(batch)[0].records) - 1,
            timestamp_type=timestamp_type,
            log_append_time=APPEND_TIME if timestamp_type == TimestampType.LOG_APPEND_TIME else -1,
            max_timestamp=0,
        )
        self.data += batch
        return info


def _reader(store: MemoryObjectStore, coordinator: StubCoordinator, **kw: Any) -> FetchReader:
    return FetchReader(store, cast(BatchCoordinator, coordinator), **kw)


async def _fetch(
    reader: FetchReader,
    offsets: dict[TopicPartition, int],
    isolation_level: IsolationLevel = IsolationLevel.READ_UNCOMMITTED,
) -> dict[TopicPartition, Any]:
    return await reader.fetch(
        offsets, max_bytes=1 << 20, partition_max_bytes=1 << 20, isolation_level=isolation_level
    )


async def _three_partitions_in_one_object(
    gap: int = 0,
) -> tuple[MemoryObjectStore, StubCoordinator]:
    store = MemoryObjectStore()
    coordinator = StubCoordinator()
    obj = Layout("wal/one.wal")
    coordinator.add(A, obj.place(build_batch([b"a0", b"a1"]), 0))
    coordinator.add(B, obj.place(build_batch([b"b0"]), 10, gap=gap))
    coordinator.add(A, obj.place(build_batch([b"a2"]), 2, gap=gap))
    coordinator.add(C, obj.place(build_batch([b"c0", b"c1", b"c2"]), 5, gap=gap))
    await store.put(obj.key, obj.data)
    return store, coordinator


async def test_one_ranged_get_per_object_for_many_partitions() -> None:
    store, coordinator = await _three_partitions_in_one_object()
    reader = _reader(store, coordinator)
    results = await _fetch(reader, {A: 0, B: 10, C: 5})
    assert coordinator.calls == 1
    assert store.stats().ranged_gets == 1
    assert [(r.offset, r.value) for r in records_of(results[A].records)] == [
        (0, b"a0"),
        (1, b"a1"),
        (2, b"a2"),
    ]
    assert [(r.offset, r.value) for r in records_of(results[B].records)] == [(10, b"b0")]
    assert [r.offset for r in records_of(results[C].records)] == [5, 6, 7]
    assert results[C].high_watermark == 8
    assert reader.stats().batches_read == 4
    assert reader.stats().gets_issued == 1


async def test_ranges_with_gaps_are_read_separately_unless_the_gap_is_allowed() -> None:
    store, coordinator = await _three_partitions_in_one_object(gap=100)
    await _fetch(_reader(store, coordinator), {A: 0, B: 10, C: 5})
    assert store.stats().ranged_gets == 4

    store, coordinator = await _three_partitions_in_one_object(gap=100)
    results = await _fetch(
        _reader(store, coordinator, coalesce_gap_bytes_max=100), {A: 0, B: 10, C: 5}
    )
    assert store.stats().ranged_gets == 1
    assert [r.value for r in records_of(results[A].records)] == [b"a0", b"a1", b"a2"]


async def test_objects_are_read_once_each_and_concurrently_bounded() -> None:
    store = MemoryObjectStore()
    coordinator = StubCoordinator()
    for i in range(5):
        obj = Layout(f"wal/{i}.wal")
        coordinator.add(A, obj.place(build_batch([b"a%d" % i]), i))
        coordinator.add(B, obj.place(build_batch([b"b%d" % i]), i))
        await store.put(obj.key, obj.data)
    reader = _reader(store, coordinator, gets_inflight_max=2)
    results = await _fetch(reader, {A: 0, B: 0})
    assert store.stats().ranged_gets == 5
    assert [r.value for r in records_of(results[B].records)] == [b"b%d" % i for i in range(5)]


async def test_cache_hits_avoid_gets() -> None:
    store, coordinator = await _three_partitions_in_one_object()
    cache = DictCache()
    cache.objects["wal/one.wal"] = await store.get("wal/one.wal")
    before = store.stats()
    reader = _reader(store, coordinator, cache=cache)
    results = await _fetch(reader, {A: 0, B: 10, C: 5})
    assert store.stats().minus(before).ranged_gets == 0
    assert reader.stats().cache_hits == 1
    assert [r.value for r in records_of(results[A].records)] == [b"a0", b"a1", b"a2"]


async def test_log_append_time_rewrites_timestamps_with_a_valid_crc() -> None:
    store = MemoryObjectStore()
    coordinator = StubCoordinator()
    obj = Layout("wal/lat.wal")
    coordinator.add(
        A,
        obj.place(build_batch([b"x", b"y"]), 7, timestamp_type=TimestampType.LOG_APPEND_TIME),
    )
    await store.put(obj.key, obj.data)
    results = await _fetch(_reader(store, coordinator), {A: 7})
    (batch,) = decode(results[A].records)  # decode checks the CRC with kafka-python
    assert batch.timestamp_type == 1
    assert [(r.offset, r.timestamp) for r in batch.records] == [
        (7, APPEND_TIME),
        (8, APPEND_TIME),
    ]
    # The stored object is untouched: rewriting happens on a copy.
    assert await store.get(obj.key) == bytes(obj.data)


async def test_markers_are_synthesized_as_control_batches() -> None:
    store = MemoryObjectStore()
    coordinator = StubCoordinator()
    obj = Layout("wal/txn.wal")
    coordinator.add(
        A,
        obj.place(
            build_batch(
                [b"t"], producer_id=9, producer_epoch=3, base_sequence=0, transactional=True
            ),
            0,
        ),
    )
    await store.put(obj.key, obj.data)
    coordinator.add(
        A,
        BatchInfo(
            object_key="",
            byte_offset=0,
            size=0,
            base_offset=1,
            last_offset=1,
            timestamp_type=TimestampType.CREATE_TIME,
            log_append_time=-1,
            max_timestamp=1_700_000_000_500,
            producer_id=9,
            producer_epoch=4,
            control=ControlType.COMMIT,
            coordinator_epoch=2,
        ),
    )
    reader = _reader(store, coordinator)
    results = await _fetch(reader, {A: 0})
    data, marker = decode(results[A].records)
    assert data.is_transactional and not data.is_control
    assert marker.is_control and marker.is_transactional
    assert (marker.base_offset, marker.producer_id, marker.producer_epoch) == (1, 9, 4)
    (record,) = marker.records
    assert record.key == b"\x00\x00\x00\x01"  # version 0, COMMIT
    assert record.value == b"\x00\x00\x00\x00\x00\x02"  # version 0, coordinator epoch 2
    assert record.timestamp == 1_700_000_000_500
    assert reader.stats().control_batches_synthesized == 1
    assert store.stats().ranged_gets == 1  # the marker needs no read


async def test_a_failed_read_fails_only_the_partitions_that_needed_it() -> None:
    store = MemoryObjectStore()
    coordinator = StubCoordinator()
    good, lost = Layout("wal/good.wal"), Layout("wal/lost.wal")
    coordinator.add(A, good.place(build_batch([b"a"]), 0))
    coordinator.add(B, good.place(build_batch([b"b"]), 0))
    coordinator.add(B, lost.place(build_batch([b"b-lost"]), 1))
    coordinator.add(C, lost.place(build_batch([b"c-lost"]), 0))
    await store.put(good.key, good.data)  # lost.wal never reaches the store
    results = await _fetch(_reader(store, coordinator), {A: 0, B: 0, C: 0})
    assert results[A].error == ErrorCode.NONE
    assert [r.value for r in records_of(results[A].records)] == [b"a"]
    for tp in (B, C):
        assert results[tp].error == ErrorCode.KAFKA_STORAGE_ERROR
        assert results[tp].records == b""
        assert results[tp].high_watermark > 0


@pytest.mark.parametrize("damage", ["crc", "framing", "offsets"])
async def test_a_corrupt_stored_batch_fails_only_its_partition(damage: str) -> None:
    store = MemoryObjectStore()
    coordinator = StubCoordinator()
    obj = Layout("wal/bad.wal")
    coordinator.add(A, obj.place(build_batch([b"fine"]), 0))
    info = obj.place(build_batch([b"soon-broken", b"x"]), 0)
    if damage == "crc":
        obj.data[info.byte_offset + info.size - 1] ^= 0xFF  # a record byte under the CRC
    elif damage == "framing":
        info = BatchInfo(**{**_fields(info), "size": info.size - 3})  # range cuts the batch
    else:
        info = BatchInfo(**{**_fields(info), "last_offset": info.last_offset + 1})
    coordinator.add(B, info)
    await store.put(obj.key, obj.data)
    reader = _reader(store, coordinator)
    results = await _fetch(reader, {A: 0, B: 0})
    assert results[A].error == ErrorCode.NONE
    assert results[B].error == ErrorCode.KAFKA_STORAGE_ERROR
    assert results[B].records == b""
    assert reader.stats().corrupt_batches == 1


def _fields(info: BatchInfo) -> dict[str, Any]:
    return {f: getattr(info, f) for f in info.__struct_fields__}


async def test_read_committed_stops_at_the_last_stable_offset() -> None:
    store, coordinator = await _three_partitions_in_one_object()
    coordinator.lso[A] = 2
    reader = _reader(store, coordinator)
    committed = await _fetch(reader, {A: 0}, IsolationLevel.READ_COMMITTED)
    assert [r.offset for r in records_of(committed[A].records)] == [0, 1]
    assert committed[A].last_stable_offset == 2
    assert committed[A].high_watermark == 3
    assert committed[A].aborted_transactions == []
    uncommitted = await _fetch(reader, {A: 0})
    assert [r.offset for r in records_of(uncommitted[A].records)] == [0, 1, 2]


async def test_coordinator_errors_pass_through_per_partition() -> None:
    store, coordinator = await _three_partitions_in_one_object()
    results = await _fetch(_reader(store, coordinator), {A: 0, TopicPartition("nope", 0): 0})
    assert results[A].error == ErrorCode.NONE
    assert results[TopicPartition("nope", 0)].error == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
    coordinator.fail = True
    failed = await _fetch(_reader(store, coordinator), {A: 0, B: 0})
    assert {r.error for r in failed.values()} == {ErrorCode.KAFKA_STORAGE_ERROR}


async def test_empty_fetch_asks_nobody() -> None:
    store, coordinator = await _three_partitions_in_one_object()
    assert await _fetch(_reader(store, coordinator), {}) == {}
    assert coordinator.calls == 0


spans = st.lists(
    st.tuples(
        st.sampled_from(["k1", "k2", "k3"]),
        st.integers(min_value=0, max_value=500),
        st.integers(min_value=1, max_value=60),
    ).map(lambda t: Span(t[0], t[1], t[1] + t[2])),
    max_size=40,
)


@settings(deadline=None)
@given(spans, st.integers(min_value=0, max_value=20))
def test_coalesce_covers_every_range_with_disjoint_spans(ranges: list[Span], gap: int) -> None:
    merged = coalesce(ranges, gap)
    for r in ranges:
        holders = [s for s in merged if s.key == r.key and s.start <= r.start and r.end <= s.end]
        assert len(holders) == 1
    for first, second in itertools.pairwise(merged):
        if first.key == second.key:
            assert first.end + gap < second.start  # otherwise they would have merged
    # Nothing outside the inputs' reach (plus allowed gaps) is read.
    assert sum(s.end - s.start for s in merged) <= sum(r.end - r.start for r in ranges) + gap * len(
        ranges
    )


async def test_a_broker_serves_its_own_recent_writes_from_its_segment_cache() -> None:
    store = MemoryObjectStore()
    coordinator = InMemoryBatchCoordinator()
    await coordinator.create_topic("t", 2)
    config = BrokerConfig(wal=WalConfig(commit_interval_ms=5))
    t0, t1 = TopicPartition("t", 0), TopicPartition("t", 1)
    async with (
        DisklessBroker(1, store, coordinator, config) as writer,
        DisklessBroker(2, store, coordinator, config) as other,
    ):
        await writer.produce({t0: build_batch([b"x"]), t1: build_batch([b"y"])})
        before = store.stats()
        own = await writer.fetch({t0: 0, t1: 0})
        assert store.stats().minus(before).ranged_gets == 0
        assert writer.stats().fetch.cache_hits == 1
        theirs = await other.fetch({t0: 0, t1: 0})
        assert store.stats().minus(before).ranged_gets == 1  # both partitions, one object, one GET
    for results in (own, theirs):
        assert [r.value for r in records_of(results[t0].records)] == [b"x"]
        assert [r.value for r in records_of(results[t1].records)] == [b"y"]


@pytest.mark.parametrize("level", [5, -1, 2])
async def test_an_unknown_isolation_level_is_refused(level: int) -> None:
    coordinator = InMemoryBatchCoordinator()
    await coordinator.create_topic("t", 1)
    t0 = TopicPartition("t", 0)
    async with DisklessBroker(1, MemoryObjectStore(), coordinator) as broker:
        with pytest.raises(ValueError, match="isolation_level"):
            await broker.fetch({t0: 0}, isolation_level=cast(IsolationLevel, level))
        with pytest.raises(ValueError, match="isolation_level"):
            await broker.list_offsets({t0: -1}, isolation_level=cast(IsolationLevel, level))
        assert (await broker.fetch({t0: 0}, isolation_level=IsolationLevel(1)))[t0].error is (
            ErrorCode.NONE
        )
