"""ListOffsets by time and MAX_TIMESTAMP are record-exact, as Kafka answers, on every backend.

- Regression: ten batches of twenty records, batch k stamped base + 1000k + 10j for its record
  j; a lookup answers the record inside the batch (offset 67 for base + 3070), not the batch's
  first offset.
- Differential (seeded, printed; DISKLESS_SIM_SEED replays): random batches of 1 to 60 records,
  every codec, CreateTime timestamps out of order within and across batches, a LogAppendTime
  topic, transactions committed and aborted (markers answer too, as in Kafka) and one left open,
  part of the log consolidated into extents, and DeleteRecords moving the log start into a
  batch, into an extent and into a LogAppendTime batch. Every answer, for both isolation levels,
  is checked against an oracle built from the records themselves (fetched and decoded by
  kafka-python), and a lookup reads at most one batch (two when the log start cuts the first).
"""

from __future__ import annotations

import asyncio
import os
import random
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from diskless import BrokerConfig, DisklessBroker, SystemClock
from diskless._types import ErrorCode, IsolationLevel, OffsetSpec, TimestampType, TopicPartition
from diskless.coordinator import BatchCoordinator, FindBatchesRequest, TopicConfig
from diskless.lifecycle import Consolidator, ConsolidatorConfig
from diskless.storage import MemoryObjectStore
from diskless.txn import TransactionCoordinator
from diskless.wal import WalConfig
from testkit.backends import BACKENDS, open_coordinator
from testkit.batches import Batch, Record, build_batch, decode
from testkit.oracle import CODECS
from testkit.oracle import build_batch as build_compressed

SEED = int(os.environ.get("DISKLESS_SIM_SEED", random.randrange(1 << 30)))
CT = [TopicPartition("ct", 0), TopicPartition("ct", 1)]
LAT = TopicPartition("lat", 0)
TPS = [*CT, LAT]
CONFIG = BrokerConfig(
    wal=WalConfig(commit_interval_ms=2, buffer_max_bytes=16 * 1024),
    fetch_cache_block_bytes=64 * 1024,
    fetch_cache_bytes_max=1 << 20,
)
COUNTS = [1, 1, 2, 3, 5, 17, 60]
Answer = tuple[int, int]


@pytest.fixture(params=BACKENDS)
async def coordinator(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[Any]:
    made = open_coordinator(request.param, tmp_path, SystemClock())
    yield made
    await made.close()


async def lookup(broker: DisklessBroker, tp: TopicPartition, ts: int) -> Answer:
    (result,) = (await broker.list_offsets({tp: ts})).values()
    assert result.error == ErrorCode.NONE, result
    return result.offset, result.timestamp


# --- regression -------------------------------------------------------------------------------
async def test_a_lookup_answers_the_record_inside_the_batch_not_its_first_offset(
    coordinator: BatchCoordinator,
) -> None:
    """Offsets 60-79 hold timestamps base+3000+10j: +3070 is offset 67, +3190 offset 79, and
    the last record's timestamp offset 199 (the batch answered 60, 60 and 180)."""
    base = int(time.time() * 1000) - 3_600_000
    tp = TopicPartition("regression", 0)
    async with DisklessBroker(1, MemoryObjectStore(), coordinator, CONFIG) as broker:
        await broker.create_topic(tp.topic, 1)
        for k in range(10):
            values = [b"r%d" % (20 * k + j) for j in range(20)]
            batch = build_batch(values, timestamp_ms=base + 1000 * k, timestamp_step=10)
            (result,) = (await broker.produce({tp: batch})).values()
            assert (result.error, result.base_offset) == (ErrorCode.NONE, 20 * k)
        assert await lookup(broker, tp, base + 3070) == (67, base + 3070)
        assert await lookup(broker, tp, base + 3065) == (67, base + 3070)
        assert await lookup(broker, tp, base + 3190) == (79, base + 3190)
        assert await lookup(broker, tp, base + 3191) == (80, base + 4000)
        assert await lookup(broker, tp, base + 9190) == (199, base + 9190)
        assert await lookup(broker, tp, base + 9191) == (-1, -1)
        assert await lookup(broker, tp, OffsetSpec.MAX_TIMESTAMP) == (199, base + 9190)
        reads = broker.stats().fetch.time_lookup_batches_read
        assert reads == 6, reads  # one batch per answer; none for the lookup past the end


async def test_a_record_found_at_the_last_stable_offset_answers_none(
    coordinator: BatchCoordinator,
) -> None:
    """Kafka filters what it found against the last fetchable offset. With the log start moved
    past an open transaction's first offset, the LSO is the log start, inside that batch: what
    READ_COMMITTED finds there is no answer; READ_UNCOMMITTED answers it."""
    base = int(time.time() * 1000) - 3_600_000
    tp = TopicPartition("txn", 0)
    async with (
        DisklessBroker(1, MemoryObjectStore(), coordinator, CONFIG) as broker,
        TransactionCoordinator(coordinator) as tc,
    ):
        await broker.create_topic(tp.topic, 1)
        await broker.produce({tp: build_batch([b"a", b"b", b"c"], timestamp_ms=base)})  # 0-2
        txn = await tc.init_producer_id("t", 60_000)
        pid, epoch = txn.producer_id, txn.producer_epoch
        assert await tc.add_partitions_to_txn("t", pid, epoch, [tp]) == [ErrorCode.NONE]
        batch = build_batch(
            [b"d", b"e", b"f", b"g"],
            producer_id=pid,
            producer_epoch=epoch,
            base_sequence=0,
            transactional=True,
            timestamp_ms=base + 10,
        )
        (opened,) = (await broker.produce({tp: batch})).values()  # 3-6, left open
        assert (opened.error, opened.base_offset) == (ErrorCode.NONE, 3)
        committed = IsolationLevel.READ_COMMITTED
        answer = await broker.list_offsets({tp: base + 1}, isolation_level=committed)
        assert (answer[tp].offset, answer[tp].timestamp) == (1, base + 1)
        answer = await broker.list_offsets({tp: base + 10}, isolation_level=committed)
        assert (answer[tp].offset, answer[tp].timestamp) == (-1, -1)
        assert (await broker.delete_records({tp: 5}))[tp].error == ErrorCode.NONE
        answer = await broker.list_offsets({tp: base + 10}, isolation_level=committed)
        assert (answer[tp].error, answer[tp].offset, answer[tp].timestamp) == (0, -1, -1)
        assert await lookup(broker, tp, base + 10) == (5, base + 12)
        assert await lookup(broker, tp, OffsetSpec.MAX_TIMESTAMP) == (6, base + 13)


async def test_a_batch_that_cannot_be_read_fails_only_its_partition(
    coordinator: BatchCoordinator,
) -> None:
    """A corrupt batch and a missing object each answer KAFKA_STORAGE_ERROR for their own
    partition; the others of the request are answered."""
    base = int(time.time() * 1000) - 3_600_000
    store = MemoryObjectStore()
    tps = [TopicPartition("r", p) for p in range(3)]
    async with DisklessBroker(1, store, coordinator, CONFIG) as writer:
        await writer.create_topic("r", len(tps))
        for tp in tps:  # one object each
            batch = build_batch([b"a", b"b", b"c"], timestamp_ms=base, timestamp_step=10)
            (result,) = (await writer.produce({tp: batch})).values()
            assert result.error == ErrorCode.NONE
    found = await coordinator.find_batches(
        [FindBatchesRequest(tp, 0, 1 << 20) for tp in tps], 1 << 30
    )
    corrupt, missing, good = (f.batches for f in found)
    assert len({corrupt[0].object_key, missing[0].object_key, good[0].object_key}) == 3
    data = bytearray(await store.get(corrupt[0].object_key))
    data[corrupt[0].byte_offset + corrupt[0].size - 1] ^= 0xFF  # the last record: the CRC fails
    await store.put(corrupt[0].object_key, bytes(data))
    assert await store.delete_many([missing[0].object_key]) == [missing[0].object_key]
    async with DisklessBroker(2, store, coordinator, CONFIG) as reader:  # no segment cache
        answers = await reader.list_offsets(dict.fromkeys(tps, base + 15))
        assert [answers[tp].error for tp in tps] == [
            ErrorCode.KAFKA_STORAGE_ERROR,
            ErrorCode.KAFKA_STORAGE_ERROR,
            ErrorCode.NONE,
        ]
        assert (answers[tps[2]].offset, answers[tps[2]].timestamp) == (2, base + 20)
        assert reader.stats().fetch.corrupt_batches == 1


# --- differential -----------------------------------------------------------------------------
def _stamps(rng: random.Random, center: int, count: int) -> list[int]:
    stamps = [center + rng.randrange(-1_500, 1_500) for _ in range(count)]
    return sorted(stamps) if rng.random() < 0.3 else stamps


def _batch(rng: random.Random, center: int, **producer: Any) -> bytes:
    codecs = [value for value, available in CODECS.values() if available()]
    stamps = _stamps(rng, center, rng.choice(COUNTS))
    records = [(ts, None, rng.randbytes(rng.randrange(0, 120)), []) for ts in stamps]
    return build_compressed(records, compression=rng.choice(codecs), **producer)


class Workload:
    def __init__(self, rng: random.Random, broker: DisklessBroker, tc: TransactionCoordinator):
        self.rng, self.broker, self.tc = rng, broker, tc
        self.base = int(time.time() * 1000) - 5_000_000
        self.step = 0
        self.sequences: dict[TopicPartition, int] = {}

    async def start(self) -> None:
        await self.broker.create_topic("ct", 2)
        config = TopicConfig(timestamp_type=TimestampType.LOG_APPEND_TIME)
        await self.broker.create_topic("lat", 1, config)
        self.txn = await self.tc.init_producer_id("txn", 60_000)
        self.epoch = self.txn.producer_epoch

    async def run(self, steps: int, leave_open: bool = False) -> None:
        rng = self.rng
        for i in range(steps):
            self.step += 1
            center = self.base + 1_000 * self.step
            targets = rng.sample(TPS, k=rng.randint(1, len(TPS)))
            if rng.random() < 0.7:
                request = {tp: _batch(rng, center) for tp in targets}
                results = await self.broker.produce(request)
                assert all(r.error == ErrorCode.NONE for r in results.values()), results
                continue
            pid = self.txn.producer_id
            added = await self.tc.add_partitions_to_txn("txn", pid, self.epoch, targets)
            assert set(added) == {ErrorCode.NONE}, added
            request = {}
            for tp in targets:
                data = _batch(
                    rng,
                    center,
                    transactional=True,
                    producer_id=pid,
                    producer_epoch=self.epoch,
                    base_sequence=self.sequences.get(tp, 0),
                )
                request[tp] = data
                self.sequences[tp] = self.sequences.get(tp, 0) + len(_records(data))
            results = await self.broker.produce(request)
            assert all(r.error == ErrorCode.NONE for r in results.values()), results
            if leave_open and i == steps - 1:
                return
            ended = await self.tc.end_txn("txn", pid, self.epoch, rng.random() < 0.5)
            assert ended.error == ErrorCode.NONE, ended
            self.epoch = ended.producer_epoch
            self.sequences = {}


def _records(data: bytes) -> list[tuple[int, int]]:
    return [(r.offset, r.timestamp) for batch in decode(data) for r in batch.records]


class Log:
    """One partition's records as kafka-python decodes them, and the oracle over them."""

    def __init__(self, batches: list[Batch], log_start: int, lso: int, hwm: int) -> None:
        self.batches, self.log_start, self.lso, self.hwm = batches, log_start, lso, hwm
        self.kept = [
            (r.offset, r.timestamp) for b in batches for r in b.records if r.offset >= log_start
        ]

    def end(self, isolation: IsolationLevel) -> int:
        return self.lso if isolation == IsolationLevel.READ_COMMITTED else self.hwm

    def by_time(self, target: int, isolation: IsolationLevel) -> Answer:
        """Kafka: the first record at or after the log start whose timestamp reaches the target,
        unless it lies at or past the last fetchable offset."""
        found = next(((o, ts) for o, ts in self.kept if ts >= target), (-1, -1))
        return found if found[0] < self.end(isolation) else (-1, -1)

    def max_timestamp(self, isolation: IsolationLevel) -> Answer | None:
        """Kafka: the first record holding the largest timestamp; None when a record below the
        log start could hold it (Kafka would answer that record: ours answers the log start)."""
        top = max(ts for _, ts in self.kept)
        below = [r.timestamp for b in self.batches for r in b.records if r.offset < self.log_start]
        if below and max(below) >= top:
            return None
        found = next((o, ts) for o, ts in self.kept if ts == top)
        return found if found[0] < self.end(isolation) else (-1, -1)

    def cut(self) -> bool:
        """The log start lies inside a batch."""
        return any(b.base_offset < self.log_start for b in self.batches)

    def cut_records(self) -> list[Record]:
        return [r for b in self.batches for r in b.records if r.offset < self.log_start]


async def _log(broker: DisklessBroker, tp: TopicPartition) -> Log:
    start = (await broker.list_offsets({tp: OffsetSpec.EARLIEST}))[tp].offset
    batches: list[Batch] = []
    offset = start
    while True:
        result = (await broker.fetch({tp: offset}, max_bytes=1 << 22))[tp]
        assert result.error == ErrorCode.NONE, result
        got = decode(result.records)
        batches += got
        if not got or got[-1].last_offset + 1 >= result.high_watermark:
            break
        offset = got[-1].last_offset + 1
    return Log(batches, start, result.last_stable_offset, result.high_watermark)


async def _check(broker: DisklessBroker, rng: random.Random) -> int:
    logs = {tp: await _log(broker, tp) for tp in TPS}
    checked = 0
    for tp, log in logs.items():
        stamps = sorted({ts for b in log.batches for r in b.records for ts in [r.timestamp]})
        targets = [0, stamps[-1], stamps[-1] + 1, *rng.sample(stamps, min(40, len(stamps)))]
        targets += [ts + 1 for ts in rng.sample(stamps, min(20, len(stamps)))]
        # The records the log start cut off: their timestamps reach past the kept ones'.
        targets += [r.timestamp + d for r in log.cut_records() for d in (0, 1)]
        for isolation in IsolationLevel:
            for target in targets:
                reads = broker.stats().fetch.time_lookup_batches_read
                answer = await broker.list_offsets({tp: target}, isolation_level=isolation)
                got = (answer[tp].error, answer[tp].offset, answer[tp].timestamp)
                assert got == (ErrorCode.NONE, *log.by_time(target, isolation)), (
                    SEED,
                    tp,
                    target,
                    isolation,
                )
                read = broker.stats().fetch.time_lookup_batches_read - reads
                assert read <= (2 if log.cut() else 1), (SEED, tp, target, read)
                checked += 1
            top = await broker.list_offsets(
                {tp: OffsetSpec.MAX_TIMESTAMP}, isolation_level=isolation
            )
            expected = log.max_timestamp(isolation)
            if expected is not None:
                assert (top[tp].offset, top[tp].timestamp) == expected, (SEED, tp, isolation)
                checked += 1
    # Every partition in one request, as a consumer asks.
    for isolation in IsolationLevel:
        target = rng.choice([ts for log in logs.values() for _, ts in log.kept])
        answers = await broker.list_offsets(dict.fromkeys(TPS, target), isolation_level=isolation)
        for tp in TPS:
            got = (answers[tp].offset, answers[tp].timestamp)
            assert got == logs[tp].by_time(target, isolation), (SEED, tp, target, isolation)
    return checked


async def _delete_inside_a_batch(broker: DisklessBroker, tp: TopicPartition, after: int) -> None:
    """The log start moves inside a batch at or after `after`, just past its record with the
    largest timestamp when that is not its last: its kept records are then all earlier, and a
    lookup for that timestamp answers from a later batch."""
    log = await _log(broker, tp)
    batches = [b for b in log.batches if b.base_offset >= after and len(b.records) > 1]
    point = None
    for b in batches:
        top = max(b.records, key=lambda r: (r.timestamp, -r.offset))
        if top.offset < b.last_offset:
            point = top.offset + 1
            break
    if point is None:
        point = batches[0].base_offset + 1
    deleted = await broker.delete_records({tp: point})
    assert deleted[tp].error == ErrorCode.NONE, deleted


async def test_lookups_by_time_match_the_records(coordinator: BatchCoordinator) -> None:
    print(f"seed={SEED} (DISKLESS_SIM_SEED={SEED} replays it)")
    rng = random.Random(SEED)
    store = MemoryObjectStore()
    async with (
        DisklessBroker(1, store, coordinator, CONFIG) as broker,
        TransactionCoordinator(coordinator) as tc,
    ):
        workload = Workload(rng, broker, tc)
        await workload.start()
        await workload.run(30)
        ends = await broker.list_offsets(dict.fromkeys(TPS, OffsetSpec.LATEST))
        await asyncio.sleep(0.01)  # every batch committed before the consolidator's cut-off
        consolidator = Consolidator(
            store, coordinator, ConsolidatorConfig(age_ms=0, object_bytes_max=3_000)
        )
        for _ in range(50):
            if (await consolidator.run_once()).candidates == 0:
                break
        assert consolidator.stats().extents_committed >= 3, consolidator.stats()
        await workload.run(25, leave_open=True)
        checked = await _check(broker, rng)
        # The log start moves inside a batch: of an extent, of a row, of a LogAppendTime row.
        await _delete_inside_a_batch(broker, CT[0], 0)
        await _delete_inside_a_batch(broker, CT[1], ends[CT[1]].offset)
        await _delete_inside_a_batch(broker, LAT, ends[LAT].offset // 2)
        checked += await _check(broker, rng)
    assert checked > 500, checked
