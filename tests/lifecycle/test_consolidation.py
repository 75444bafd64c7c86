"""Consolidation end to end, on every coordinator backend.

- Differential (seeded, printed): a workload of plain, idempotent and transactional producers
  (aborts included, one transaction left open) on CREATE_TIME and LOG_APPEND_TIME topics, then
  DeleteRecords and retention. Every fetch (both isolation levels, every start offset, several
  budgets, alone and with the other partitions) and every ListOffsets answer is byte-for-byte
  the same before and after the consolidator ran, and every fetch over the extents asks the
  coordinator once; WAL objects whose batches all moved become UNREFERENCED, and the file
  manager deletes them.
- Faults: a swap refused (the range changed) and a consolidator killed with SIGKILL between
  upload and swap (a child process, SQLite) each leave an orphan the file manager reclaims, and
  every fetch answers as before; a later consolidation moves the range once.
"""

from __future__ import annotations

import asyncio
import os
import random
import signal
import sys
from pathlib import Path
from typing import Any

import pytest

from diskless import BrokerConfig, DisklessBroker, ManualClock, SystemClock
from diskless._types import ErrorCode, IsolationLevel, OffsetSpec, TimestampType, TopicPartition
from diskless.coordinator import BatchCoordinator, FileState, SqliteBatchCoordinator, TopicConfig
from diskless.lifecycle import Consolidator, ConsolidatorConfig, FileManager
from diskless.records import InvalidBatch, split_batches
from diskless.storage import LocalObjectStore, MemoryObjectStore, ObjectStore
from diskless.txn import TransactionCoordinator
from diskless.wal import WalConfig
from testkit.backends import BACKENDS, open_coordinator
from testkit.batches import build_batch
from tests.lifecycle._helpers import count_calls

SEED = int(os.environ.get("DISKLESS_SIM_SEED", random.randrange(1 << 30)))
CT = [TopicPartition("ct", 0), TopicPartition("ct", 1)]
LAT = TopicPartition("lat", 0)
RET = TopicPartition("ret", 0)
TPS = [*CT, LAT, RET]
CONFIG = BrokerConfig(
    wal=WalConfig(commit_interval_ms=2, buffer_max_bytes=16 * 1024),
    fetch_cache_block_bytes=64 * 1024,
    fetch_cache_bytes_max=1 << 20,
)
BUDGETS = [(1, 1), (700, 100_000), (4_000, 6_000), (1 << 20, 1 << 20)]


@pytest.fixture(params=BACKENDS)
async def coordinator(request: pytest.FixtureRequest, tmp_path: Path) -> Any:
    made = open_coordinator(request.param, tmp_path, SystemClock())
    yield made
    await made.close()


async def _workload(rng: random.Random, broker: DisklessBroker, tc: TransactionCoordinator) -> None:
    await broker.create_topic("ct", 2)
    await broker.create_topic("lat", 1, TopicConfig(timestamp_type=TimestampType.LOG_APPEND_TIME))
    await broker.create_topic("ret", 1, TopicConfig(retention_bytes=6_000))
    idem = await tc.init_producer_id(None)
    sequences: dict[TopicPartition, int] = {}
    txn = await tc.init_producer_id("txn-a", 60_000)
    epoch = txn.producer_epoch
    txn_sequences: dict[TopicPartition, int] = {}

    def values() -> list[bytes]:
        return [rng.randbytes(rng.randint(5, 400)) for _ in range(rng.randint(1, 4))]

    for step in range(60):
        kind = rng.choice(["plain", "idem", "txn"])
        targets = rng.sample(TPS, k=rng.randint(1, 3))
        if kind == "plain":
            request = {tp: build_batch(values(), timestamp_ms=1_000 + step) for tp in targets}
        elif kind == "idem":
            request = {}
            for tp in targets:
                vs = values()
                request[tp] = build_batch(
                    vs,
                    producer_id=idem.producer_id,
                    producer_epoch=idem.producer_epoch,
                    base_sequence=sequences.get(tp, 0),
                    timestamp_ms=1_000 + rng.randint(0, 500),
                )
                sequences[tp] = sequences.get(tp, 0) + len(vs)
        else:
            added = await tc.add_partitions_to_txn("txn-a", txn.producer_id, epoch, targets)
            assert set(added) == {ErrorCode.NONE}, added
            request = {}
            for tp in targets:
                vs = values()
                request[tp] = build_batch(
                    vs,
                    producer_id=txn.producer_id,
                    producer_epoch=epoch,
                    base_sequence=txn_sequences.get(tp, 0),
                    transactional=True,
                    timestamp_ms=2_000 + step,
                )
                txn_sequences[tp] = txn_sequences.get(tp, 0) + len(vs)
        results = await broker.produce(request)
        assert all(r.error == ErrorCode.NONE for r in results.values()), results
        if kind == "txn" and step < 55:
            ended = await tc.end_txn("txn-a", txn.producer_id, epoch, rng.random() < 0.5)
            assert ended.error == ErrorCode.NONE, ended
            epoch = ended.producer_epoch
            txn_sequences = {}
    # the transaction of the last steps (if any) stays open: the LSO stays below the end


async def _observe(broker: DisklessBroker, rng: random.Random) -> list[Any]:
    """Every answer the differential compares, in a fixed order."""
    seen: list[Any] = []
    ends = await broker.list_offsets(dict.fromkeys(TPS, OffsetSpec.LATEST))
    starts = await broker.list_offsets(dict.fromkeys(TPS, OffsetSpec.EARLIEST))
    seen += [ends, starts]
    for isolation in IsolationLevel:
        seen.append(await broker.list_offsets(dict.fromkeys(TPS, OffsetSpec.MAX_TIMESTAMP)))
        for tp in TPS:
            for offset in range(starts[tp].offset, ends[tp].offset + 1):
                partition_max, fetch_max = BUDGETS[offset % len(BUDGETS)]
                alone = await broker.fetch(
                    {tp: offset},
                    max_bytes=fetch_max,
                    partition_max_bytes=partition_max,
                    isolation_level=isolation,
                )
                others = {o: rng.randint(starts[o].offset, ends[o].offset) for o in TPS if o != tp}
                order = [*others, tp] if offset % 2 else [tp, *others]
                together = await broker.fetch(
                    {o: others.get(o, offset) for o in order},
                    max_bytes=fetch_max,
                    partition_max_bytes=partition_max,
                    isolation_level=isolation,
                )
                seen += [(tp, offset, isolation, alone), (order, together)]
    for tp in TPS:
        for ts in [0, 1_000, 1_020, 1_400, 2_010, 2_040, 5_000, *rng.sample(range(3_000), 5)]:
            seen.append((tp, ts, await broker.list_offsets({tp: ts})))
        # log append times: what the topic stamped, found through MAX_TIMESTAMP and around it
        top = (await broker.list_offsets({tp: OffsetSpec.MAX_TIMESTAMP}))[tp].timestamp
        for ts in (top - 5, top, top + 1):
            seen.append((tp, ts, await broker.list_offsets({tp: ts})))
    return seen


async def test_consolidation_changes_no_fetch_and_no_list_offsets_answer(
    coordinator: BatchCoordinator, monkeypatch: pytest.MonkeyPatch
) -> None:
    print(f"seed={SEED} (DISKLESS_SIM_SEED={SEED} replays it)")
    rng = random.Random(SEED)
    store = MemoryObjectStore()
    async with (
        DisklessBroker(1, store, coordinator, CONFIG) as broker,
        TransactionCoordinator(coordinator) as tc,
    ):
        await _workload(rng, broker, tc)
        ends = await broker.list_offsets(dict.fromkeys(TPS, OffsetSpec.LATEST))
        # the new log start falls inside a batch of several records (then inside an extent)
        batches = split_batches(
            (await broker.fetch({CT[1]: ends[CT[1]].offset // 3}))[CT[1]].records
        )
        assert not isinstance(batches, InvalidBatch)
        inside = next(b for b in batches if b.last_offset > b.base_offset)
        deleted = await broker.delete_records({CT[1]: inside.base_offset + 1})
        assert deleted[CT[1]].error == ErrorCode.NONE
        await coordinator.enforce_retention()
        wal_keys = {info.key async for info in store.list_all("wal/")}

        before = await _observe(broker, random.Random(SEED))
        consolidator = Consolidator(
            store, coordinator, ConsolidatorConfig(age_ms=0, object_bytes_max=3_000)
        )
        for _ in range(50):
            run = await consolidator.run_once()
            if run.candidates == 0:
                break
        stats = consolidator.stats()
        assert stats.extents_committed >= 8, stats
        assert stats.swaps_refused == 0 and stats.failures == 0, stats
        metadata = await coordinator.metadata_stats()
        assert metadata.extent_rows >= 8, metadata
        calls = count_calls(monkeypatch, coordinator, "find_batches")
        fetches = broker.stats().fetch.fetches
        after = await _observe(broker, random.Random(SEED))
        assert calls == [broker.stats().fetch.fetches - fetches]  # one call per fetch
        assert len(after) == len(before)
        for expected, got in zip(before, after, strict=True):
            assert got == expected, (SEED, expected, got)

        # WAL objects whose batches all moved are UNREFERENCED, and go after their grace
        infos = await coordinator.file_info(sorted(wal_keys))
        moved = [i.key for i in infos if i is not None and i.state == FileState.UNREFERENCED]
        assert moved, infos
        later = ManualClock(SystemClock().now_ms() + 3_600_000)
        manager = FileManager(store, coordinator, clock=later)
        await manager.run_cycle()
        remaining = {info.key async for info in store.list_all("wal/")}
        assert not remaining & set(moved)
        assert await _observe(broker, random.Random(SEED)) == before


async def test_a_refused_swap_leaves_an_orphan_that_the_file_manager_reclaims(
    coordinator: BatchCoordinator,
) -> None:
    store: ObjectStore = MemoryObjectStore()
    async with DisklessBroker(1, store, coordinator, CONFIG) as broker:
        await broker.create_topic("ct", 2)
        for i in range(6):
            results = await broker.produce({CT[0]: build_batch([b"v%d" % i] * 3)})
            assert results[CT[0]].error == ErrorCode.NONE
        before = await broker.fetch({CT[0]: 0}, max_bytes=1 << 20, partition_max_bytes=1 << 20)
        candidates = await coordinator.consolidation_candidates(SystemClock().now_ms(), 1 << 20, 10)
        assert len(candidates) == 1

        slow = Consolidator(store, coordinator, ConsolidatorConfig(age_ms=0))
        fast = Consolidator(store, coordinator, ConsolidatorConfig(age_ms=0, node_id=2))

        async def chosen_then_overtaken(*args: Any) -> Any:
            del coordinator.consolidation_candidates  # the real method again, for both
            found = await coordinator.consolidation_candidates(*args)
            assert (await fast.run_once()).extents_committed == 1  # swaps the same range first
            return found

        coordinator.consolidation_candidates = chosen_then_overtaken  # type: ignore[method-assign]
        run = await slow.run_once()
        assert (run.swaps_refused, run.extents_committed) == (1, 0), run
        assert slow.stats().swaps_refused == 1 and slow.stats().objects_uploaded == 1
        listed = sorted({i.key async for i in store.list_all("wal/")})
        infos = await coordinator.file_info(listed)
        orphans = {k for k, i in zip(listed, infos, strict=True) if i is None}
        assert len(orphans) == 1, orphans
        after = await broker.fetch({CT[0]: 0}, max_bytes=1 << 20, partition_max_bytes=1 << 20)
        assert after[CT[0]].records == before[CT[0]].records  # moved once, not twice
        later = ManualClock(SystemClock().now_ms() + 3_600_000)
        manager = FileManager(store, coordinator, clock=later)
        await manager.run_cycle()
        await later.advance(600)
        await manager.run_cycle()
        left = {i.key async for i in store.list_all("wal/")}
        assert not left & orphans, "the orphan was reclaimed"
        again = await broker.fetch({CT[0]: 0}, max_bytes=1 << 20, partition_max_bytes=1 << 20)
        assert again[CT[0]].records == before[CT[0]].records


async def test_a_consolidator_killed_between_upload_and_swap_loses_and_doubles_nothing(
    tmp_path: Path,
) -> None:
    db, objects = tmp_path / "coordinator.db", tmp_path / "objects"
    coordinator = SqliteBatchCoordinator(db)
    store = LocalObjectStore(objects)
    try:
        async with DisklessBroker(1, store, coordinator, CONFIG) as broker:
            await broker.create_topic("ct", 2)
            for i in range(8):
                results = await broker.produce(
                    {tp: build_batch([b"%d-%d" % (tp.partition, i)] * 2) for tp in CT}
                )
                assert all(r.error == ErrorCode.NONE for r in results.values())
            wide = {"max_bytes": 1 << 20, "partition_max_bytes": 1 << 20}
            before = await broker.fetch(dict.fromkeys(CT, 0), **wide)  # type: ignore[arg-type]
            known = {i.key async for i in store.list_all("wal/")}

            child = await asyncio.create_subprocess_exec(
                sys.executable, "-m", "tests.lifecycle._consolidator_child", str(db), str(objects)
            )
            assert await child.wait() == -signal.SIGKILL
            uploaded = {i.key async for i in store.list_all("wal/")} - known
            assert len(uploaded) == 1  # the object, never swapped in: an orphan
            assert await coordinator.file_info(sorted(uploaded)) == [None]
            assert await broker.fetch(dict.fromkeys(CT, 0), **wide) == before  # type: ignore[arg-type]

            consolidator = Consolidator(store, coordinator, ConsolidatorConfig(age_ms=0))
            run = await consolidator.run_once()
            assert run.extents_committed == 2 and run.swaps_refused == 0, run
            assert await broker.fetch(dict.fromkeys(CT, 0), **wide) == before  # type: ignore[arg-type]

            later = ManualClock(SystemClock().now_ms() + 3_600_000)
            manager = FileManager(store, coordinator, clock=later)
            await manager.run_cycle()
            await later.advance(600)
            await manager.run_cycle()
            left = {i.key async for i in store.list_all("wal/")}
            assert not uploaded & left, "the orphan was reclaimed"
            assert not known & left, "the WAL objects, all consolidated, were deleted"
            assert await broker.fetch(dict.fromkeys(CT, 0), **wide) == before  # type: ignore[arg-type]
    finally:
        await coordinator.close()
        await store.close()
