"""Property: over a coordinator that answers extents as the contract allows (the extent holding
the fetch offset counted as empty, later ones at full size: a superset of what the budgets
take), every fetch and every ListOffsets answer is byte-for-byte what it was over the same
batches as rows, and every fetch asks the coordinator once (seed printed).

The coordinator here is a small model of the contract, so that the read path is checked on its
own; the differential test over the real coordinators is in tests/lifecycle."""

from __future__ import annotations

import itertools
import random
from collections.abc import Sequence
from typing import cast

import pytest

from diskless._types import ControlType, ErrorCode, IsolationLevel, TimestampType, TopicPartition
from diskless.coordinator import (
    BatchCoordinator,
    BatchInfo,
    ExtentIndex,
    FindBatchesRequest,
    FindBatchesResponse,
    ListOffsetsResponse,
    TimeLookup,
)
from diskless.coordinator._rules.fetch import ExtentBudget
from diskless.read import FetchReader, ObjectCache, read_as_served
from diskless.storage import MemoryObjectStore
from diskless.wal import encode_extent
from testkit.batches import build_batch

TPS = [TopicPartition("ct", 0), TopicPartition("lat", 0), TopicPartition("ct", 1)]


class _Row:
    def __init__(self, info: BatchInfo) -> None:
        self.info, self.size, self.is_extent = info, info.size, info.extent is not None


class ModelCoordinator:
    """find_batches over a fixed table of rows and extents, as the contract says (the shared
    rule's budget over extents)."""

    def __init__(self, table: dict[TopicPartition, list[BatchInfo]]) -> None:
        self.table = table
        self.calls = 0

    async def find_batches(
        self, requests: Sequence[FindBatchesRequest], fetch_max_bytes: int
    ) -> list[FindBatchesResponse]:
        self.calls += 1
        budget = ExtentBudget(fetch_max_bytes)
        out = []
        for r in requests:
            infos = self.table[r.topic_partition]
            hwm = infos[-1].last_offset + 1
            if not 0 <= r.offset <= hwm:
                out.append(FindBatchesResponse(ErrorCode.OFFSET_OUT_OF_RANGE, []))
                continue
            taken = budget.take((_Row(b) for b in infos if b.last_offset >= r.offset), r.max_bytes)
            out.append(
                FindBatchesResponse(
                    ErrorCode.NONE,
                    [c.info for c in taken],
                    log_start_offset=0,
                    high_watermark=hwm,
                    last_stable_offset=hwm,
                )
            )
        return out


def _workload(rng: random.Random) -> tuple[bytes, dict[TopicPartition, list[BatchInfo]]]:
    """One WAL object holding the data batches of three partitions; markers as rows."""
    wal = bytearray()
    table: dict[TopicPartition, list[BatchInfo]] = {tp: [] for tp in TPS}
    offsets = dict.fromkeys(TPS, 0)
    for i in range(rng.randint(30, 60) * len(TPS)):
        tp = rng.choice(TPS)
        lat = tp.topic == "lat"
        base = offsets[tp]
        common = {
            "timestamp_type": TimestampType.LOG_APPEND_TIME if lat else TimestampType.CREATE_TIME,
            "log_append_time": 5_000 + i if lat else -1,
            "producer_id": 7,
            "producer_epoch": 0,
        }
        if rng.random() < 0.15:
            info = BatchInfo(
                "",
                0,
                78,
                base,
                base,
                control=rng.choice([ControlType.COMMIT, ControlType.ABORT]),
                max_timestamp=5_000 + i,
                **common,  # type: ignore[arg-type]
            )
        else:
            count = rng.randint(1, 4)
            batch = build_batch(
                [rng.randbytes(rng.randint(10, 2500)) for _ in range(count)],
                timestamp_ms=1_000 + rng.randint(0, 3_000),
            )
            info = BatchInfo(
                "wal/0.wal",
                len(wal),
                len(batch),
                base,
                base + count - 1,
                max_timestamp=int.from_bytes(batch[35:43], "big"),
                **common,  # type: ignore[arg-type]
            )
            wal += batch
        table[tp].append(info)
        offsets[tp] = info.last_offset + 1
    return bytes(wal), table


async def _consolidate(
    rng: random.Random, store: MemoryObjectStore, table: dict[TopicPartition, list[BatchInfo]]
) -> dict[TopicPartition, list[BatchInfo]]:
    """Each partition's rows cut into runs, some of which become extents."""
    cache = ObjectCache(store, block_bytes=4096, bytes_max=1 << 22)
    after: dict[TopicPartition, list[BatchInfo]] = {}
    for n, (tp, rows) in enumerate(table.items()):
        out: list[BatchInfo] = []
        i = 0
        while i < len(rows):
            run = rows[i : i + rng.randint(1, 15)]
            i += len(run)
            if rng.random() < 0.25:
                out.extend(run)
                continue
            served = await read_as_served(cache, run)
            data, footer_at = encode_extent(tp, served, index_interval_bytes=rng.choice([1, 3000]))
            key = f"ext/{n}-{i}.ext"
            await store.put(key, data)
            out.append(
                BatchInfo(
                    key,
                    0,
                    footer_at,
                    run[0].base_offset,
                    run[-1].last_offset,
                    run[0].timestamp_type,
                    -1,
                    max(int.from_bytes(b[35:43], "big") for b in served),
                    extent=ExtentIndex(footer_at, len(data) - footer_at),
                )
            )
        after[tp] = out
    return after


def _timestamp(info: BatchInfo) -> int:
    if info.timestamp_type == TimestampType.LOG_APPEND_TIME and info.control is None:
        return info.log_append_time
    return info.max_timestamp


@pytest.mark.seeds(4)
async def test_fetches_and_list_offsets_over_extents_match_rows(seed: int) -> None:
    print(f"seed={seed}")
    rng = random.Random(seed)
    store = MemoryObjectStore()
    wal, table = _workload(rng)
    await store.put("wal/0.wal", wal)
    after = await _consolidate(rng, store, table)
    assert any(b.extent is not None for rows in after.values() for b in rows)
    before_reader = FetchReader(store, cast(BatchCoordinator, ModelCoordinator(table)))
    models = [ModelCoordinator(after), ModelCoordinator(after)]
    after_readers = [
        FetchReader(store, cast(BatchCoordinator, models[0])),
        FetchReader(
            store,
            cast(BatchCoordinator, models[1]),
            object_cache=ObjectCache(store, block_bytes=2048, bytes_max=1 << 16),
        ),
    ]
    budgets = [(1, 1), (3000, 100_000), (6000, 9000), (1 << 20, 1 << 20), (20_000, 7_000)]
    ends = {tp: rows[-1].last_offset + 1 for tp, rows in table.items()}
    fetches = 0
    for tp in TPS:
        for offset in range(ends[tp] + 1):
            others = [o for o in TPS if o != tp]
            order = [tp, *others] if offset % 2 else [*others, tp]
            request = {o: (offset if o == tp else rng.randrange(ends[o] + 1)) for o in order}
            partition_max, fetch_max = budgets[offset % len(budgets)]
            expected = await before_reader.fetch(
                request, max_bytes=fetch_max, partition_max_bytes=partition_max
            )
            for reader in after_readers:
                got = await reader.fetch(
                    request, max_bytes=fetch_max, partition_max_bytes=partition_max
                )
                assert list(got) == list(expected)
                for o in order:
                    assert got[o] == expected[o], (seed, o, request, partition_max, fetch_max)
            fetches += 1
    assert fetches > 100
    assert [model.calls for model in models] == [fetches, fetches]  # one call per fetch

    # ListOffsets: the record the rows answer against the one the extent's index finds
    reader = after_readers[1]
    for tp in TPS:
        rows, extents = table[tp], after[tp]
        stamps = sorted({_timestamp(r) for r in rows})
        for ts in itertools.chain(stamps, [s + 1 for s in stamps], [0]):
            hit = next((r for r in rows if _timestamp(r) >= ts), None)
            if hit is None:
                continue
            holder = next(e for e in extents if e.base_offset <= hit.base_offset <= e.last_offset)
            if holder.extent is None:
                continue
            start = rng.randint(0, hit.base_offset)
            if any(_timestamp(r) >= ts for r in rows if start <= r.last_offset < hit.base_offset):
                start = hit.base_offset  # an earlier batch would answer; ask from here
            end = ends[tp]
            by_rows, by_extent = await reader.resolve_list_offsets(
                [
                    ListOffsetsResponse(ErrorCode.NONE, lookup=TimeLookup(ts, start, end, [hit])),
                    ListOffsetsResponse(
                        ErrorCode.NONE, lookup=TimeLookup(ts, start, end, [holder])
                    ),
                ]
            )
            assert by_rows.error == ErrorCode.NONE and by_rows.offset >= start, (seed, tp, ts)
            assert hit.base_offset <= by_rows.offset <= hit.last_offset, (seed, tp, ts)
            assert by_rows.timestamp >= ts, (seed, tp, ts)
            assert by_extent == by_rows, (seed, tp, ts)


async def test_a_corrupt_batch_inside_an_extent_fails_only_its_partition() -> None:
    rng = random.Random(99)
    store = MemoryObjectStore()
    wal, table = _workload(rng)
    await store.put("wal/0.wal", wal)
    after = await _consolidate(rng, store, table)
    victim = next(b for b in after[TPS[0]] if b.extent is not None)
    data = bytearray(await store.get(victim.object_key))
    data[victim.size // 2] ^= 0xFF  # inside some batch: its CRC (or framing) fails
    await store.put(victim.object_key, bytes(data))
    reader = FetchReader(store, cast(BatchCoordinator, ModelCoordinator(after)))
    results = await reader.fetch(
        {TPS[0]: victim.base_offset, TPS[1]: 0},
        max_bytes=1 << 24,
        partition_max_bytes=1 << 24,
        isolation_level=IsolationLevel.READ_UNCOMMITTED,
    )
    assert results[TPS[0]].error == ErrorCode.KAFKA_STORAGE_ERROR
    assert results[TPS[1]].error == ErrorCode.NONE and results[TPS[1]].records
    assert reader.stats().corrupt_batches == 1
