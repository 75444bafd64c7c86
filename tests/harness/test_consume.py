"""Unit tests of the consume phase's pieces: what a member keeps of what it read (runs) stands
for exactly the records it read, the audit of a group's read fails on tampering, end-to-end
latency finds each acknowledged batch's receipt, and the figures follow from the readers'
windows."""

from __future__ import annotations

import asyncio
import os
import random
import time
from pathlib import Path
from typing import Any

import pytest

from benchmarks.harness.audit import ExpectedBatch, ReadRecord
from benchmarks.harness.consume import announce_done
from benchmarks.harness.consume_report import (
    _idle,
    _quantile,
    audit_read,
    e2e_latency,
    end_to_end_ms,
)
from benchmarks.harness.consumer import (
    ConsumerPlan,
    ConsumerResult,
    Member,
    PartitionRead,
    Window,
    consume,
    long_poll,
    runs_of,
)
from benchmarks.harness.env import create_topics, open_broker, open_coordinator, open_store
from benchmarks.harness.records import build_batch
from benchmarks.harness.spec import PRODUCER_ID_BASE, RunSpec, StoreSpec, WorkloadSpec
from benchmarks.harness.workload import WorkloadRow, all_partitions
from diskless import DisklessBroker, ErrorCode, FetchResult, TopicPartition
from diskless.coordinator import InMemoryBatchCoordinator
from diskless.storage import MemoryObjectStore
from testkit.postgres import database_dsn

# One producer's three batches, then another's, as a partition holds them after acks.
EXPECTED = [
    ExpectedBatch(base_offset=0, records=3, producer_id=1000, producer_seq=10, value_bytes=50),
    ExpectedBatch(base_offset=3, records=2, producer_id=1001, producer_seq=0, value_bytes=70),
    ExpectedBatch(base_offset=5, records=4, producer_id=1000, producer_seq=13, value_bytes=50),
]
SENT = [(0, 100.0), (3, 100.5), (5, 101.0)]


def _records(expected: list[ExpectedBatch]) -> list[ReadRecord]:
    return [
        ReadRecord(b.base_offset + i, b.producer_id, b.producer_id, b.producer_seq + i,
                   b.value_bytes, True)
        for b in expected
        for i in range(b.records)
    ]  # fmt: skip


def _read(records: list[ReadRecord], received: float = 102.0, hw: int = 9) -> PartitionRead:
    read = PartitionRead(group=1, topic="bench-0", partition=2, high_watermark=hw)
    read.runs = runs_of(records, received)
    return read


def test_runs_stand_for_exactly_the_records_read() -> None:
    seed = int(os.environ.get("DISKLESS_SIM_SEED", random.randrange(1 << 32)))
    print(f"seed {seed}")
    rng = random.Random(seed)
    for _ in range(200):
        records, offset = [], rng.randrange(100)
        for _ in range(rng.randrange(1, 40)):
            # mostly continuations, sometimes anything that breaks a run
            pid, seq = rng.choice([(7, 0), (8, 5)]), rng.randrange(3)
            records.append(
                ReadRecord(offset, pid[0], pid[0] + rng.choice([0, 0, 0, 1]), pid[1] + offset
                           + seq, rng.choice([10, 10, 10, 11]), rng.random() > 0.05,
                           rng.random() > 0.9)
            )  # fmt: skip
            offset += rng.choice([1, 1, 1, 2])
        read = PartitionRead(group=0, topic="t", partition=0, runs=runs_of(records, 1.0))
        assert read.records() == records
        assert len(read.runs) <= len(records)


def test_a_batch_is_one_run_and_consecutive_batches_of_a_producer_merge() -> None:
    records = _records(EXPECTED)
    runs = runs_of(records, 5.0)
    # 1000's batches at 0 and 5 are not adjacent; 1001's batch sits between them.
    assert [(r[0], r[1]) for r in runs] == [(0, 3), (3, 2), (5, 4)]
    merged = runs_of(_records([EXPECTED[0], EXPECTED[2]._replace(base_offset=3)]), 5.0)
    assert [(r[0], r[1]) for r in merged] == [(0, 7)]


def test_a_clean_group_read_passes_and_finds_every_batchs_latency() -> None:
    verdict, latencies = audit_read(_read(_records(EXPECTED)), EXPECTED, SENT)
    assert verdict.ok, verdict.problems
    assert verdict.read_records == verdict.expected_records == 9
    assert latencies == pytest.approx([2000.0, 1500.0, 1000.0])


@pytest.mark.parametrize(
    ("tamper", "counter"),
    [
        (lambda rs: rs[:4] + rs[5:], "missing"),
        (lambda rs: [*rs[:2], rs[2]._replace(key_seq=99), *rs[3:]], "mismatched"),
        (lambda rs: [*rs[:6], rs[6]._replace(value_ok=False), *rs[7:]], "mismatched"),
        (lambda rs: [*rs, rs[-1]._replace(offset=9, key_seq=rs[-1].key_seq)], "duplicate_records"),
        (lambda rs: rs[:-1], "gaps"),
    ],
)
def test_a_tampered_group_read_fails(tamper: object, counter: str) -> None:
    records = tamper(_records(EXPECTED))  # type: ignore[operator]
    hw = max(r.offset for r in records) + 1 if counter == "duplicate_records" else 9
    verdict, _ = audit_read(_read(records, hw=hw), EXPECTED, SENT)
    assert not verdict.ok
    assert getattr(verdict, counter) > 0, verdict
    assert all(p.startswith("group 1: ") for p in verdict.problems)


def test_end_to_end_uses_the_receipt_of_the_run_holding_each_batch() -> None:
    first = runs_of(_records(EXPECTED[:2]), 101.0)
    second = runs_of(_records(EXPECTED[2:]), 103.0)
    assert end_to_end_ms([*first, *second], SENT) == pytest.approx([1000.0, 500.0, 2000.0])
    # A batch nobody received has no latency (the audit fails it as missing).
    assert end_to_end_ms(first, SENT) == pytest.approx([1000.0, 500.0])
    assert end_to_end_ms([], SENT) == []


def test_percentiles_interpolate_between_ranks() -> None:
    values = [float(v) for v in range(1, 101)]
    e = e2e_latency(values)
    assert (e.count, e.max, e.mean) == (100, 100.0, 50.5)
    assert e.p50 == pytest.approx(50.5) and e.p90 == pytest.approx(90.1)
    assert e.p99 == pytest.approx(99.01)
    assert _quantile([], 0.5) == 0.0 and e2e_latency([]).count == 0


def _window(seconds: float, cpu_s: float, calls: int, fetches: int) -> Window:
    return Window(
        seconds=seconds, cpu_s=cpu_s, coordinator_calls=calls, fetches=fetches, polls=0,
        gets=0, client_cpu_s=0.0,
    )  # fmt: skip


def _reader(members: int, idle: Window, baseline: Window) -> ConsumerResult:
    nothing = _window(1.0, 0.0, 0, 0)
    return ConsumerResult(
        task=0, broker_id=30_000, members=members, started_ts=0.0, producers_done_ts=0.0,
        caught_up_ts=0.0, caught_up=True, consume=nothing, idle=idle, baseline=baseline,
        calls_by_method={}, reads=[],
    )  # fmt: skip


def test_an_idle_consumer_costs_the_attached_cpu_beyond_the_detached_per_member() -> None:
    readers = [
        _reader(2, _window(2.0, 0.5, 400, 200), _window(2.0, 0.1, 4, 0)),
        _reader(2, _window(4.0, 0.6, 200, 400), _window(1.0, 0.0, 0, 0)),
    ]
    idle = _idle(readers)
    assert idle.consumers == 4
    assert idle.cores_attached == pytest.approx(0.25 + 0.15)
    assert idle.cores_detached == pytest.approx(0.05)
    assert idle.cores_per_consumer == pytest.approx(0.35 / 4)
    assert idle.fetches_per_s == pytest.approx(100 + 100)
    assert idle.cpu_us_per_fetch == pytest.approx(0.35 / 200 * 1e6)
    assert idle.coordinator_calls_per_s == pytest.approx(200 + 50)
    assert idle.coordinator_calls_per_s_detached == pytest.approx(2)


# --- a reader against a real broker, coordinator and store -----------------------------------


def _row(partition: int, index: int, records: int) -> WorkloadRow:
    producer_id = PRODUCER_ID_BASE + partition
    return WorkloadRow(
        request_id=index, producer_index=partition, producer_id=producer_id, producer_epoch=0,
        transactional=False, rack="az1", task=0, broker_id=0, request_index=index,
        send_offset_ms=-1.0, topic="bench-0", partition=partition, records=records,
        value_bytes=40 + partition, base_sequence=index * records,
        producer_seq=index * records, txn_index=-1, txn_commit=False,
    )  # fmt: skip


@pytest.mark.parametrize("backend", ["sqlite", "postgres"])
async def test_a_reader_reads_what_is_produced_while_it_runs_then_measures_idling(
    backend: str, tmp_path: Path
) -> None:
    """The reader process's own logic in this process: two groups read three partitions while
    a broker of the test's produces into them, each group's read audits clean against the acks,
    and the idle windows see the members' fetches attached and none detached."""
    coordinator_url = (
        f"sqlite://{tmp_path / 'coordinator.sqlite'}"
        if backend == "sqlite"
        else database_dsn(tmp_path, "consume")
    )
    run = RunSpec(
        store=StoreSpec(kind="local", root=str(tmp_path / "objects"), durable=False),
        coordinator=coordinator_url,
        wal={"commit_interval_ms": 20},
    )
    spec = WorkloadSpec(
        brokers=1, racks=1, tasks=1, partitions=3, consumer_groups=2, consume_idle_s=0.3,
        fetch_wait_ms=100,
    )  # fmt: skip
    plan = ConsumerPlan(
        task=0, tasks=1, broker_id=30_000, rack="az1", groups=2,
        partitions=[(tp.topic, tp.partition) for tp in all_partitions(spec)], spec=spec, run=run,
        result_path=str(tmp_path / "result.json"), producers_wait_s=60.0,
    )  # fmt: skip
    store, coordinator = open_store(run.store), open_coordinator(run)
    await create_topics(coordinator, spec)
    go = asyncio.Event()  # the producers' start: the members, and the window, begin with it
    reading = asyncio.create_task(consume(plan, go=go.wait))
    await asyncio.sleep(0.5)
    go_ts = time.time()
    go.set()
    expected: dict[tuple[str, int], list[ExpectedBatch]] = {}
    sent: dict[tuple[str, int], list[tuple[int, float]]] = {}
    try:
        async with open_broker(0, "az1", store, coordinator, run) as broker:
            for index in range(4):
                for partition in range(3):
                    row = _row(partition, index, records=4)
                    tp = TopicPartition(row.topic, row.partition)
                    send_ts = time.time()
                    answer = (await broker.produce({tp: build_batch(row, 0)}, acks=-1))[tp]
                    assert answer.error == ErrorCode.NONE, answer
                    expected.setdefault((row.topic, partition), []).append(
                        ExpectedBatch(answer.base_offset, row.records, row.producer_id,
                                      row.producer_seq, row.value_bytes)
                    )  # fmt: skip
                    sent.setdefault((row.topic, partition), []).append(
                        (answer.base_offset, send_ts)
                    )
                await asyncio.sleep(0.05)
            await announce_done(run, 0)
            result = await asyncio.wait_for(reading, 60)
    finally:
        reading.cancel()  # (done already, unless the test failed)
    await coordinator.close()
    await store.close()
    assert result.caught_up and not result.problem
    assert result.started_ts >= go_ts
    assert result.members == 2 and len(result.reads) == 6
    assert {(r.group, r.partition) for r in result.reads} == {
        (g, p) for g in (0, 1) for p in (0, 1, 2)
    }
    for read in result.reads:
        key = (read.topic, read.partition)
        verdict, latencies = audit_read(read, expected[key], sent[key])
        assert verdict.ok, verdict.problems
        assert verdict.read_records == sum(b.records for b in expected[key]) == read.high_watermark
        assert len(latencies) == 4 and min(latencies) > 0
    assert result.calls_by_method.get("find_batches", 0) > 0
    assert result.consume.polls > 0 and result.consume.fetches >= result.consume.polls
    assert result.idle.fetches > 0 and result.baseline.fetches == result.baseline.polls == 0


class _WaitingBroker(DisklessBroker):
    """A broker that notes the min_bytes and max_wait_ms each fetch asked for."""

    asked: list[tuple[int, int]]

    async def fetch(  # type: ignore[override]
        self, offsets: Any, *, min_bytes: int = 0, max_wait_ms: int = 0, **budgets: Any
    ) -> dict[TopicPartition, FetchResult]:
        self.asked.append((min_bytes, max_wait_ms))
        return await super().fetch(offsets, min_bytes=min_bytes, max_wait_ms=max_wait_ms, **budgets)


async def test_an_empty_fetch_is_one_call_the_broker_holds() -> None:
    coordinator, store = InMemoryBatchCoordinator(), MemoryObjectStore()
    await coordinator.create_topic("t", 1)
    tp = TopicPartition("t", 0)
    broker = _WaitingBroker(0, store, coordinator, rack="az1")
    broker.asked = []
    async with broker:
        member = Member(0, [tp])
        answers = await long_poll(broker, {tp: 0}, 100, asyncio.Event(), member)
        assert answers[tp].error == ErrorCode.NONE and answers[tp].records == b""
        assert member.fetches == 1 and broker.asked == [(1, 100)]
        stopped = asyncio.Event()
        stopped.set()  # a member being detached: no waiting on its behalf
        await asyncio.wait_for(long_poll(broker, {tp: 0}, 600_000, stopped, member), 30)
        assert member.fetches == 2 and broker.asked[-1] == (0, 600_000)
    await coordinator.close()
