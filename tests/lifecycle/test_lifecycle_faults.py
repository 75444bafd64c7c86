"""Storage stays bounded under repeated failures, and nothing acknowledged is lost.

Thousands of produce requests go through several brokers whose commits fail at random at the
coordinator's store (before being applied, or applied with the answer lost; each commit is the
engine's real group step), whose uploads fail or lose their ack, and which crash at random (the
WAL writer closed without flushing: uploads and commits cancelled midway), each crash followed by
a new incarnation of the broker. A file manager runs all along, its own coordinator calls failing
now and then. Then the clock moves past the graces and the manager's cycles run: the object store
must hold exactly the objects the coordinator references as LIVE, and every acknowledged record
must still be readable at its offset. Real stores (local files, S3 over HTTP) and every
coordinator backend; the seed is printed first (DISKLESS_SEED reruns the same fault draws;
real-time interleavings still vary).
"""

from __future__ import annotations

import asyncio
import collections
import os
import random
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from kafka.record.default_records import DefaultRecordBatch

from diskless import BrokerConfig, DisklessBroker, ErrorCode, TopicPartition
from diskless.coordinator import (
    CallFaults,
    DeleteRecordsRequest,
    FaultyBatchCoordinator,
    FileState,
    StepFault,
    StoreCall,
)
from diskless.errors import BrokerClosedError
from diskless.lifecycle import FileManager, FileManagerStats
from diskless.storage import FaultyObjectStore, LocalObjectStore, ObjectStore, S3ObjectStore
from diskless.wal import WalConfig
from testkit.s3server import S3_CREDENTIALS, create_bucket
from testkit.wal import build_batch
from tests.lifecycle._helpers import PREFIX, CoordinatorFactory, config

TOPIC = "faults"
PARTITIONS = 4
BROKER_IDS = (1, 2, 3)
PRODUCERS_PER_BROKER = 6
READER_ID = 99


class ShiftedClock:
    """The real clock, whose wall time the test can move forward (past the graces) at will."""

    def __init__(self) -> None:
        self.offset_ms = 0

    def now_ms(self) -> int:
        return time.time_ns() // 1_000_000 + self.offset_ms

    def monotonic(self) -> float:
        return time.monotonic()

    async def sleep(self, seconds: float) -> None:
        await asyncio.sleep(max(0.0, seconds))


@dataclass
class Workload:
    seed: int
    requests: int
    rng: random.Random
    acked: dict[TopicPartition, dict[int, bytes]] = field(default_factory=dict)
    sent: int = 0
    failed: int = 0
    crashes: int = 0
    records_deleted: bool = False
    errors: collections.Counter[str] = field(default_factory=collections.Counter)


@pytest.fixture
async def real_store(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[ObjectStore]:
    store: ObjectStore
    if request.param == "local":
        store = LocalObjectStore(tmp_path / "objects", durable=False)
    else:
        s3_endpoint: str = request.getfixturevalue("s3_endpoint")
        bucket = await create_bucket(s3_endpoint)
        store = S3ObjectStore(bucket, endpoint_url=s3_endpoint, **S3_CREDENTIALS)
    yield store
    await store.close()


def _seed() -> int:
    seed = int(os.environ.get("DISKLESS_SEED", random.randrange(2**32)))
    print(f"seed={seed} (rerun with DISKLESS_SEED={seed})")
    return seed


async def _crash(broker: DisklessBroker) -> None:
    """Kill a broker between upload and commit: uploads and commits under way are cancelled."""
    await broker.close(flush=False)


async def _run_workload(
    store: ObjectStore, coordinator: FaultyBatchCoordinator, clock: ShiftedClock, w: Workload
) -> FileManagerStats:
    """Run the brokers and a file manager until every request was sent; the manager's stats."""
    broker_config = BrokerConfig(
        wal=WalConfig(commit_interval_ms=5, upload_attempts=2, upload_backoff_ms=1),
        request_timeout_ms=10_000,
    )
    faulty_store = FaultyObjectStore(
        store, random.Random(w.rng.random()), put_fail_rate=0.03, put_lost_ack_rate=0.03
    )
    brokers: dict[int, DisklessBroker] = {}
    for broker_id in BROKER_IDS:
        brokers[broker_id] = DisklessBroker(
            broker_id, faulty_store, coordinator, broker_config, clock=clock
        )
        await brokers[broker_id].start()
    counter = iter(range(w.requests))

    async def producer(broker_id: int, number: int) -> None:
        rng = random.Random(w.rng.random())
        for n in counter:
            tp = TopicPartition(TOPIC, rng.randrange(PARTITIONS))
            values = [f"{broker_id}.{number}.{n}.{i}".encode() for i in range(rng.randint(1, 3))]
            w.sent += 1
            try:
                results = await brokers[broker_id].produce({tp: build_batch(values)})
            except BrokerClosedError:  # crashed: back off until its next incarnation is up
                w.failed += 1
                w.errors["broker closed"] += 1
                await asyncio.sleep(0.005)
                continue
            result = results[tp]
            if result.error != ErrorCode.NONE:
                w.failed += 1
                w.errors[f"{result.error.name}: {result.error_message}"[:60]] += 1
                continue
            acked = w.acked.setdefault(tp, {})
            for i, value in enumerate(values):
                assert result.base_offset + i not in acked, "an offset was acknowledged twice"
                acked[result.base_offset + i] = value
            if n % 97 == 0:
                await _maybe_crash(broker_id, rng)
            if n >= w.requests // 2 and not w.records_deleted:  # some objects: unreferenced
                w.records_deleted = True
                [deleted] = await coordinator.delete_records([DeleteRecordsRequest(tp, -1)])
                assert deleted.error == 0

    async def _maybe_crash(broker_id: int, rng: random.Random) -> None:
        if rng.random() < 0.6:
            return
        w.crashes += 1
        await _crash(brokers[broker_id])  # its producers get BrokerClosedError meanwhile
        restarted = DisklessBroker(broker_id, faulty_store, coordinator, broker_config, clock=clock)
        await restarted.start()  # a new epoch: the old incarnation's late commits are fenced
        brokers[broker_id] = restarted

    # The file manager's own calls to the coordinator fail now and then too.
    manager_coordinator = FaultyBatchCoordinator(
        coordinator.inner,
        random.Random(w.rng.random()),
        writes=CallFaults(fail_rate=0.05, lost_answer_rate=0.05),
        reads=CallFaults(fail_rate=0.05),
    )
    # A cycle has few calls, so the rates alone may miss a short run: its first read fails.
    manager_coordinator.store.schedule(StoreCall.READ, StepFault.FAIL)
    manager = FileManager(faulty_store, manager_coordinator, config(period_ms=50), clock)
    manager.start()
    try:
        await asyncio.gather(
            *(
                producer(broker_id, number)
                for broker_id in BROKER_IDS
                for number in range(PRODUCERS_PER_BROKER)
            )
        )
    finally:
        await manager.close()
        for broker in brokers.values():
            await broker.close()
    return manager.stats()


async def _read_all(
    reader: DisklessBroker, partitions: list[TopicPartition]
) -> dict[TopicPartition, tuple[int, dict[int, bytes]]]:
    """Per partition: (log start offset, offset -> value) of everything readable, via fetch.

    All partitions go in each fetch, so the read path coalesces one object's ranges into one GET.
    """
    probe = await reader.fetch(dict.fromkeys(partitions, 0))
    assert {r.error for r in probe.values()} <= {ErrorCode.NONE, ErrorCode.OFFSET_OUT_OF_RANGE}
    found: dict[TopicPartition, dict[int, bytes]] = {tp: {} for tp in partitions}
    offsets = {tp: probe[tp].log_start_offset for tp in partitions}
    while pending := {tp: o for tp, o in offsets.items() if o < probe[tp].high_watermark}:
        fetched = await reader.fetch(pending)
        for tp, offset in pending.items():
            assert fetched[tp].error == ErrorCode.NONE, fetched[tp]
            data, position = fetched[tp].records, 0
            while position < len(data):
                length = int.from_bytes(data[position + 8 : position + 12], "big", signed=True)
                batch = DefaultRecordBatch(data[position : position + 12 + length])
                assert batch.validate_crc()
                for record in batch:
                    assert record.value is not None
                    found[tp][record.offset] = record.value
                position += 12 + length
            next_offset = max(found[tp], default=offset - 1) + 1
            assert next_offset > offset, "fetch made no progress"
            offsets[tp] = next_offset
    return {tp: (probe[tp].log_start_offset, found[tp]) for tp in partitions}


async def _check_fault_run(
    store: ObjectStore, new_coordinator: CoordinatorFactory, requests: int
) -> None:
    w = Workload(seed=_seed(), requests=requests, rng=random.Random())
    w.rng.seed(w.seed)
    clock = ShiftedClock()
    inner = new_coordinator(clock)
    await inner.create_topic(TOPIC, PARTITIONS)
    coordinator = FaultyBatchCoordinator(
        inner,
        random.Random(w.rng.random()),
        commits=CallFaults(fail_rate=0.08, lost_answer_rate=0.04),
    )
    running_manager = await _run_workload(store, coordinator, clock, w)
    print(f"sent={w.sent} failed={w.failed} crashes={w.crashes} {w.errors.most_common(5)}")
    assert w.sent == requests
    assert 0 < w.failed < requests
    assert w.crashes > 0 and w.records_deleted
    injected = coordinator.store.injected
    assert injected[StoreCall.COMMIT, StepFault.FAIL] > 0
    assert injected[StoreCall.COMMIT, StepFault.LOST_ANSWER] > 0
    assert running_manager.cycle_errors > 0  # its own calls failed too
    before = [info.key async for info in store.list_all(PREFIX)]
    orphans_before = [
        key for key, info in zip(before, await inner.file_info(before), strict=True) if info is None
    ]
    assert orphans_before, "the faults should have left orphans behind"

    # Past every grace: cycles until the manager finds nothing more to do.
    manager = FileManager(store, inner, config(), clock)
    for _ in range(6):
        clock.offset_ms += max(config().orphan_grace_ms, config().unreferenced_grace_ms) + 1_000
        report = await manager.run_cycle()
        assert report.errors == 0
    assert manager.stats().orphans_condemned >= len(orphans_before)

    # The store holds exactly the LIVE objects: no orphan left, no referenced object deleted.
    remaining = [info.key async for info in store.list_all(PREFIX)]
    infos = await inner.file_info(remaining)
    assert [info.state if info else None for info in infos] == [FileState.LIVE] * len(remaining)
    books = await inner.file_stats()
    assert (books.unreferenced_objects, books.condemned_objects) == (0, 0)
    assert books.live_objects == len(remaining)

    # Every acknowledged record is still readable at its offset.
    # Coalesce each object's ranges into one GET: the read-back stays quick on moto.
    reader_config = BrokerConfig(fetch_coalesce_gap_bytes_max=1 << 20)
    async with DisklessBroker(READER_ID, store, inner, reader_config, clock=clock) as reader:
        for tp, (log_start, readable) in (await _read_all(reader, sorted(w.acked))).items():
            checked = {o: v for o, v in w.acked[tp].items() if o >= log_start}
            assert checked, "every partition keeps acknowledged records to check"
            assert {o: readable.get(o) for o in checked} == checked
    await coordinator.close()


@pytest.mark.parametrize("real_store", ["local", "s3"], indirect=True)
async def test_storage_holds_exactly_the_live_objects_after_faults(
    request: pytest.FixtureRequest, real_store: ObjectStore, new_coordinator: CoordinatorFactory
) -> None:
    params = request.node.callspec.params
    other_s3 = params["real_store"] == "s3" and params["new_coordinator"] != "sqlite"
    if other_s3 and not request.config.getoption("--run-slow"):
        pytest.skip("slow: run with --run-slow (S3 with one coordinator by default)")
    await _check_fault_run(real_store, new_coordinator, requests=2_000)


@pytest.mark.slow
@pytest.mark.timeout(1200)
@pytest.mark.parametrize(
    ("real_store", "requests"), [("local", 20_000), ("s3", 6_000)], indirect=["real_store"]
)
async def test_storage_holds_exactly_the_live_objects_after_many_faults(
    real_store: ObjectStore, new_coordinator: CoordinatorFactory, requests: int
) -> None:
    await _check_fault_run(real_store, new_coordinator, requests=requests)
