"""Reconciliation cost of the file manager against a bare listing of the same objects.

    .venv/bin/python -m benchmarks.bench_lifecycle [--store memory|local] [--objects N]
                                                   [--orphan-percent P] [--dir DIR]

N WAL objects (default 10,000), a millisecond apart in key time, are uploaded; all but P% are
committed to a SQLite coordinator (one batch each), the rest are orphans. Then, in the same run:
- baseline: a bare paged listing of the prefix (`list_all`), what any scan must pay at least;
- first cycle: a new manager (watermark 0) lists everything, asks the coordinator about every
  key (one `file_info` call per page) and condemns the orphans;
- steady cycle: a second cycle with nothing new — the watermark skips everything reconciled;
- incremental cycle: after 10% more objects arrive, only those are listed and looked up.
Each row: the objects the case covers, its listing and file_info calls, its wall time, and that
time per 10,000 objects.
"""

from __future__ import annotations

import argparse
import asyncio
import shutil
import tempfile
import time
from pathlib import Path

from diskless import ManualClock, TopicPartition
from diskless._object_keys import DEFAULT_OBJECT_PREFIX, new_object_key
from diskless.coordinator import CommitBatch, SqliteBatchCoordinator
from diskless.lifecycle import FileManager, FileManagerConfig
from diskless.storage import LocalObjectStore, MemoryObjectStore, ObjectStore

TOPIC = "bench"
PARTITIONS = 16
OBJECT_BYTES = 256
BROKER = 1
PER = 10_000


async def _populate(
    store: ObjectStore,
    coordinator: SqliteBatchCoordinator,
    clock: ManualClock,
    epoch: int,
    count: int,
    orphan_percent: int,
    start: int,
) -> None:
    payload = bytes(OBJECT_BYTES)
    for i in range(start, start + count):
        key = new_object_key(DEFAULT_OBJECT_PREFIX, clock.now_ms(), BROKER, f"{i:016x}")
        await store.put(key, payload)
        if i % 100 >= orphan_percent:
            batch = CommitBatch(
                topic_partition=TopicPartition(TOPIC, i % PARTITIONS),
                byte_offset=0,
                size=OBJECT_BYTES,
                record_count=1,
                base_timestamp=clock.now_ms(),
                max_timestamp=clock.now_ms(),
                producer_id=-1,
                producer_epoch=-1,
                base_sequence=-1,
            )
            await coordinator.commit_file(key, BROKER, epoch, OBJECT_BYTES, [batch])
        await clock.advance(0.001)


def _row(name: str, objects: int, lists: int, lookups: int, seconds: float) -> str:
    per = seconds * 1000 * PER / max(objects, 1)
    return f"{name:<18} {objects:>8} {lists:>6} {lookups:>10} {seconds * 1000:>10.1f} {per:>12.1f}"


async def _run(store_kind: str, objects: int, orphan_percent: int, directory: Path) -> None:
    clock = ManualClock()
    store: ObjectStore = (
        MemoryObjectStore(clock)
        if store_kind == "memory"
        else LocalObjectStore(directory / "objects", durable=False)
    )
    coordinator = SqliteBatchCoordinator(
        directory / "coordinator.db", clock=clock, commit_age_max_ms=45_000
    )
    try:
        await coordinator.create_topic(TOPIC, PARTITIONS)
        epoch = await coordinator.register_broker(BROKER)
        print(f"populating {objects} objects ({orphan_percent}% orphans), {store_kind} store...")
        await _populate(store, coordinator, clock, epoch, objects, orphan_percent, 0)
        config = FileManagerConfig(
            orphan_grace_ms=60_000,
            commit_deadline_ms=30_000,
            clock_skew_max_ms=10_000,
            list_objects_per_cycle_max=max(objects * 2, 1),
            rescan_interval_ms=None,
        )
        await clock.advance(config.orphan_grace_ms / 1000 + 1)

        print(
            f"\n{'case':<18} {'objects':>8} {'lists':>6} {'file_info':>10} {'time ms':>10} "
            f"{'ms / 10,000':>12}"
        )
        before = store.stats()
        started = time.perf_counter()
        listed = 0
        async for _ in store.list_all(DEFAULT_OBJECT_PREFIX):
            listed += 1
        elapsed = time.perf_counter() - started
        print(_row("bare listing", listed, store.stats().minus(before).lists, 0, elapsed))

        manager = FileManager(store, coordinator, config, clock)
        for name in ("first cycle", "steady cycle"):
            stats_before = manager.stats()
            started = time.perf_counter()
            report = await manager.run_cycle()
            elapsed = time.perf_counter() - started
            lookups = manager.stats().file_info_calls - stats_before.file_info_calls
            # A cycle that lists nothing still costs its calls: report them per 10,000 objects
            # reconciled so far (everything is reconciled after the first cycle).
            print(
                _row(name, report.objects_listed or objects, report.listing_calls, lookups, elapsed)
            )
            if name == "first cycle":
                assert report.orphans_condemned == objects * orphan_percent // 100, report

        extra = max(objects // 10, 1)
        await _populate(store, coordinator, clock, epoch, extra, orphan_percent, objects)
        await clock.advance(config.orphan_grace_ms / 1000 + 1)
        stats_before = manager.stats()
        started = time.perf_counter()
        report = await manager.run_cycle()
        elapsed = time.perf_counter() - started
        lookups = manager.stats().file_info_calls - stats_before.file_info_calls
        print(
            _row("incremental cycle", report.objects_listed, report.listing_calls, lookups, elapsed)
        )
        print(
            f"\nwatermark lag after the cycles: {manager.stats().reconciliation_lag_ms} ms "
            f"(orphan grace {config.orphan_grace_ms} ms); orphans condemned: "
            f"{manager.stats().orphans_condemned}"
        )
    finally:
        await coordinator.close()
        await store.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--store", choices=("memory", "local"), default="memory")
    parser.add_argument("--objects", type=int, default=PER)
    parser.add_argument("--orphan-percent", type=int, default=5)
    parser.add_argument("--dir", type=Path, default=None, help="scratch directory (default: temp)")
    args = parser.parse_args()
    if not 0 <= args.orphan_percent <= 100:
        parser.error("--orphan-percent must be in [0, 100]")
    directory = Path(tempfile.mkdtemp(prefix="bench-lifecycle-", dir=args.dir))
    try:
        asyncio.run(_run(args.store, args.objects, args.orphan_percent, directory))
    finally:
        shutil.rmtree(directory, ignore_errors=True)


if __name__ == "__main__":
    main()
