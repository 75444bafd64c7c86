"""A tiny workload through a real local Spark session, checked against what it really produced.

One Spark session serves the module. The report's numbers are recomputed from the execution rows
the tasks returned and from reading every partition back independently (a fresh broker in this
process), and must match exactly.
"""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

import msgspec
import pytest

from benchmarks.harness import workload as workloads
from benchmarks.harness.consolidate import CONSOLIDATOR_NODE_ID, gets_of, kb_per_retained_gb
from benchmarks.harness.consume_report import E2E_PLOT
from benchmarks.harness.env import open_broker, open_coordinator, open_store
from benchmarks.harness.execute import (
    KIND_BATCH,
    KIND_TASK,
    TXN_ABORTED,
    TXN_COMMITTED,
    result_schema,
    task_stats,
)
from benchmarks.harness.metrics_snapshot import metrics_text
from benchmarks.harness.options import Options
from benchmarks.harness.records import kafka_records
from benchmarks.harness.report import (
    LATENCY_PLOT,
    OBJECTS_PLOT,
    RESULTS_FILE,
    SUMMARY_FILE,
    THROUGHPUT_PLOT,
    write_report,
)
from benchmarks.harness.run import RunOutcome, run_once, succeeded
from benchmarks.harness.spark import REPO_ROOT
from benchmarks.harness.spec import CostRates, RunSpec, StoreSpec, WorkloadSpec
from benchmarks.harness.verify import verify
from diskless import TopicPartition
from testkit.metrics import promtool_check, samples
from tests.harness._spark_jvm import quick_jvm_env

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

# No warning filter is needed: the harness silences kafka-python's one import-time deprecation
# itself, and this Spark session raises none under filterwarnings=error.
pytestmark = pytest.mark.spark

TINY = WorkloadSpec(
    brokers=2,
    racks=2,
    tasks=2,
    partitions=6,
    producers=4,
    total_mb=3.0,
    duration_s=60.0,
    partitions_per_round=3,
    transactional_share=0.5,
    txn_requests=4,
    txn_abort_share=0.3,
    consumer_groups=2,
    consume_idle_s=0.5,
    fetch_wait_ms=100,
)


@pytest.fixture(scope="module")
def spark(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SparkSession]:
    from benchmarks.harness.spark import start_spark

    with pytest.MonkeyPatch.context() as patch:
        for name, value in quick_jvm_env(tmp_path_factory.mktemp("spark-conf")).items():
            patch.setenv(name, value)
        session = start_spark(2, app_name="diskless-harness-test")
        yield session
        session.stop()


@pytest.fixture(scope="module")
def outcome(spark: SparkSession, tmp_path_factory: pytest.TempPathFactory) -> RunOutcome:
    options = Options(
        report_dir=tmp_path_factory.mktemp("report"),
        data_dir=tmp_path_factory.mktemp("data"),
        keep_data=True,
        store=StoreSpec(kind="local", durable=False),
        wal={"commit_interval_ms": 50, "buffer_max_bytes": 256 * 1024},
        rates=CostRates(),
        workload_path=None,
        save_workload=None,
        put_baseline_s=0.3,
        sqlite_baseline_s=0.3,
        progress=False,
    )
    result = run_once(spark, TINY, options, "test run")
    write_report(result.report, options.report_dir)
    return result


def _read_everything(data_dir: Path, spec: WorkloadSpec) -> dict[TopicPartition, list[bytes]]:
    """Every partition's batches, fetched by a broker of our own (not the harness's reader)."""
    run = RunSpec(
        store=StoreSpec(kind="local", root=str(data_dir / "objects"), durable=False),
        coordinator=f"sqlite://{data_dir / 'coordinator.sqlite'}",
    )
    _, memory_records = kafka_records()

    async def read() -> dict[TopicPartition, list[bytes]]:
        store, coordinator = open_store(run.store), open_coordinator(run)
        out: dict[TopicPartition, list[bytes]] = {}
        async with open_broker(99, "az1", store, coordinator, run) as broker:
            for tp in workloads.all_partitions(spec):
                offset, batches = 0, []
                while True:
                    answer = (await broker.fetch({tp: offset}))[tp]
                    if offset >= answer.high_watermark:
                        break
                    records = memory_records(answer.records)
                    while (batch := records.next_batch()) is not None:
                        if batch.base_offset >= offset:
                            if not batch.is_control_batch:  # markers are not produced bytes
                                batches.append(bytes(batch._buffer))
                            offset = batch.base_offset + batch.last_offset_delta + 1
                out[tp] = batches
        await store.close()
        await coordinator.close()
        return out

    return asyncio.run(read())


def _objects(outcome: RunOutcome) -> list[tuple[str, int]]:
    async def listing() -> list[tuple[str, int]]:
        store = open_store(StoreSpec(root=str(outcome.data_dir / "objects")))
        found = [(i.key, i.size) async for i in store.list_all("wal/")]
        await store.close()
        return found

    return asyncio.run(listing())


def _consolidated(key: str) -> bool:
    return f"-b{CONSOLIDATOR_NODE_ID}-" in key


def test_the_report_counts_exactly_what_the_tasks_acknowledged(outcome: RunOutcome) -> None:
    report, rows = outcome.report, outcome.rows
    batches = [r for r in rows if r.kind == KIND_BATCH]
    planned = list(workloads.generate_rows(TINY))
    assert len(batches) == len(planned), "every planned batch was sent"
    acked = [r for r in batches if r.error == 0]
    assert len(acked) == len(batches), report.errors
    a = report.analysis
    assert a.batches_sent == len(batches)
    assert a.batches_acked == len(acked)
    assert a.records_acked == sum(r.records for r in acked) == sum(r.records for r in planned)
    assert a.bytes_acked == sum(r.batch_bytes for r in acked)
    assert a.requests_sent == len({r.request_id for r in batches})
    assert a.latency_ms.count == a.requests_sent
    assert sum(lat.count for lat in a.latency_ms_by_broker.values()) == a.requests_sent
    kinds = a.latency_ms_by_producer_kind
    assert set(kinds) == {"idempotent", "transactional"}
    assert sum(lat.count for lat in kinds.values()) == a.requests_sent
    assert sum(mb for _, mb in a.throughput_by_second) * 1e6 == pytest.approx(a.bytes_acked)
    assert 0 < a.all_active_s <= a.duration_s
    assert report.headline.mb_per_s == a.all_active_mb_per_s
    assert report.headline.whole_run_mb_per_s == a.mb_per_s
    assert report.cost.produced_gb * 1e9 == pytest.approx(a.bytes_acked)


def test_the_metrics_snapshot_passes_promtool_and_counts_the_run(outcome: RunOutcome) -> None:
    report = outcome.report
    text = metrics_text(
        [t.broker_stats for t in report.tasks], [t.store for t in report.tasks], report.rates
    )
    promtool_check(text.decode())
    found = samples(text.decode())

    def total(name: str, **labels: str) -> float:
        return sum(
            v
            for (n, ls), v in found.items()
            if n == name and all((k, w) in ls for k, w in labels.items())
        )

    assert total("diskless_wal_batches_committed_total") == report.analysis.batches_acked
    assert total("diskless_object_store_requests_total", kind="PUT") == sum(
        t.store["put_requests"] for t in report.tasks
    )
    assert total("diskless_object_store_bytes_total", direction="written") == sum(
        t.store["bytes_in"] for t in report.tasks
    )


def test_reading_back_independently_finds_the_same_records_bytes_and_objects(
    outcome: RunOutcome,
) -> None:
    report = outcome.report
    read = _read_everything(outcome.data_dir, TINY)
    read_batches = [b for batches in read.values() for b in batches]
    assert sum(len(b) for b in read_batches) == report.analysis.bytes_acked
    assert len(read_batches) == report.analysis.batches_acked
    v = report.verification
    assert v.passed, v.problems
    assert v.read_records == v.expected_records == report.analysis.records_acked
    # Half the producers are transactional: read_committed shows exactly the committed part.
    rows = [r for r in outcome.rows if r.kind == KIND_BATCH and r.error == 0]
    transactions = {(r.producer_id, r.txn_index): r.txn_outcome for r in rows if r.txn_index >= 0}
    # A marker on every partition of every transaction.
    marked = {
        (r.producer_index, r.txn_index, r.topic, r.partition)
        for r in workloads.generate_rows(TINY)
        if r.txn_index >= 0
    }
    assert v.read_committed_checked and v.markers == len(marked) > 0
    assert set(transactions.values()) == {TXN_ABORTED, TXN_COMMITTED}
    visible = sum(r.records for r in rows if r.txn_index < 0 or r.txn_outcome == TXN_COMMITTED)
    assert v.committed_read == v.committed_expected == visible < v.expected_records
    assert v.read_bytes >= report.analysis.bytes_acked

    objects = [(key, size) for key, size in _objects(outcome) if not _consolidated(key)]
    assert report.analysis.objects.count == len(objects) > 0
    assert report.analysis.objects.total_bytes == sum(size for _, size in objects)
    # Local objects are single PUTs: PUTs per GB is objects per GB.
    assert report.cost.puts_per_gb == pytest.approx(report.cost.objects_per_gb)
    # Objects waiting for their turn commit together: at most one commit step per object, and
    # every acknowledged batch went through one of them.
    steps = report.analysis.commit_ms.count
    assert 0 < steps <= len(objects)
    assert report.analysis.batches_per_commit * steps == pytest.approx(
        report.analysis.batches_acked
    )
    assert report.headline.objects_per_commit == pytest.approx(len(objects) / steps)


def test_everything_was_consolidated_and_read_back_verified_from_there(
    outcome: RunOutcome,
) -> None:
    """The consolidation phase moved every batch into consolidated objects: the coordinator keeps
    no batch rows, its metadata per retained GB and the read-back's GETs per GB fell, and the
    second read-back audited the consolidated data as the first audited the WAL objects."""
    report = outcome.report
    c = report.consolidation
    assert c is not None
    f = c.figures
    assert f.before.batch_rows > 0 and f.before.extent_rows == 0
    assert f.after.batch_rows == 0 and f.after.extent_rows == f.stats.extents_committed > 0
    assert f.stats.failures == f.stats.swaps_refused == 0
    consolidated = [size for key, size in _objects(outcome) if _consolidated(key)]
    assert len(consolidated) == f.stats.objects_uploaded == f.stats.extents_committed
    assert sum(consolidated) == f.stats.bytes_uploaded >= f.stats.bytes_moved > 0
    # Retained: the acknowledged batches and the transaction markers, the same after as before.
    assert f.after.retained_bytes == f.before.retained_bytes > report.analysis.bytes_acked
    assert (
        f.stats.batches_moved
        == f.before.batch_rows
        == report.analysis.batches_acked + (report.verification.markers)
    )
    before_kb, after_kb = kb_per_retained_gb(f.before), kb_per_retained_gb(f.after)
    assert before_kb is not None and after_kb is not None and after_kb < before_kb
    assert c.gets_per_gb_after < c.gets_per_gb_before
    v = c.verification
    assert v.passed, v.problems
    assert v.read_records == v.expected_records == report.verification.read_records
    assert v.committed_read == report.verification.committed_read
    assert v.markers == report.verification.markers
    # The cost model prices the read of the consolidated data.
    assert report.cost.gets_per_gb == pytest.approx(gets_of(v) / report.cost.produced_gb)
    assert c.gets_per_gb_after == pytest.approx(report.cost.gets_per_gb)
    assert succeeded(report)


def test_every_group_read_every_acknowledged_record_while_the_producers_ran(
    outcome: RunOutcome,
) -> None:
    """Each consumer group read each partition from its reader process's broker, and its read
    audited clean against the acks; the figures follow from the readers' own counters."""
    report, rows = outcome.report, outcome.rows
    c = report.consume
    assert c is not None
    v = c.verification
    assert v.passed, v.problems
    assert c.groups == 2 and c.members == 2 * TINY.effective_tasks
    assert v.partitions == 2 * TINY.partitions
    assert v.read_records == v.expected_records == 2 * report.analysis.records_acked
    assert v.markers == 2 * report.verification.markers > 0  # aborted data read too, with markers
    assert c.bytes_read == 2 * report.verification.read_bytes
    assert c.records == v.read_records and c.caught_up and not c.problems
    # One latency per group and acknowledged batch, each from its send to its group's receipt.
    assert c.e2e_ms.count == len(c.e2e_latencies_ms) == 2 * report.analysis.batches_acked
    assert c.e2e_latencies_ms[0] > 0 and c.e2e_ms.max == c.e2e_latencies_ms[-1]
    assert c.e2e_ms.p50 <= c.e2e_ms.p90 <= c.e2e_ms.p99 <= c.e2e_ms.max
    # Each reader, a process of its own, began before its task's first send and caught up
    # after the last ack of any task.
    tasks = [task_stats(r) for r in rows if r.kind == KIND_TASK]
    readers = {t.task: t.consumer for t in tasks if t.consumer is not None}
    assert sorted(readers) == list(range(TINY.effective_tasks))
    batches = [r for r in rows if r.kind == KIND_BATCH]
    last_ack = max(r.ack_ts for r in batches)
    for task, reader in readers.items():
        first_send = min(r.send_ts for r in batches if r.task == task)
        assert reader.started_ts < first_send and reader.caught_up_ts > last_ack
    pids = {t.place.pid for t in tasks if t.place is not None}
    assert len(c.readers) == len(readers) and not pids & {p.pid for p in c.readers}
    # Reads go through the coordinator's lookup; the counters add up.
    assert c.calls_by_method.get("find_batches", 0) > 0
    assert c.coordinator_calls == sum(c.calls_by_method.values())
    assert c.coordinator_calls_per_gb == pytest.approx(c.coordinator_calls / (c.bytes_read / 1e9))
    assert c.fetches >= c.polls > 0
    assert c.read_cpu_s > 0 and c.produce_cpu_s == pytest.approx(sum(t.cpu_s for t in tasks))
    assert c.idle.consumers == c.members and c.idle.fetches_per_s > 0


def test_the_consolidated_read_back_fails_when_consolidated_data_is_lost(
    spark: SparkSession, outcome: RunOutcome, tmp_path: Path
) -> None:
    """The second read-back's audit is real: with one consolidated object gone (from a copy of
    the run's data), the same verification fails, for that object's partition only."""
    shutil.copytree(outcome.data_dir / "objects", tmp_path / "objects")
    for name in ("coordinator.sqlite", "coordinator.sqlite-wal"):
        if (outcome.data_dir / name).exists():
            shutil.copy(outcome.data_dir / name, tmp_path / name)
    victim = next(key for key, _ in _objects(outcome) if _consolidated(key))
    (tmp_path / "objects" / victim).unlink()
    run = RunSpec(
        store=StoreSpec(kind="local", root=str(tmp_path / "objects"), durable=False),
        coordinator=f"sqlite://{tmp_path / 'coordinator.sqlite'}",
    )
    verification = verify(spark, spark.createDataFrame(outcome.rows, result_schema()), TINY, run)
    assert not verification.passed
    assert verification.partitions_failed == 1, verification.problems


def test_a_run_without_consolidation_leaves_the_batch_rows(
    spark: SparkSession, tmp_path: Path
) -> None:
    options = Options(
        report_dir=tmp_path / "report",
        data_dir=tmp_path,
        keep_data=False,
        store=StoreSpec(kind="local", durable=False),
        wal={"commit_interval_ms": 50},
        rates=CostRates(),
        workload_path=None,
        save_workload=None,
        put_baseline_s=0.1,
        sqlite_baseline_s=0.1,
        progress=False,
        consolidate=False,
    )
    small = msgspec.structs.replace(TINY, total_mb=0.3, transactional_share=0.0, consumer_groups=0)
    report = run_once(spark, small, options, "no consolidation").report
    assert report.consolidation is None and report.consume is None
    assert report.verification.passed
    write_report(report, options.report_dir)
    summary = (options.report_dir / SUMMARY_FILE).read_text()
    assert "Verification: PASSED" in summary and "Consolidation" not in summary
    assert "Consume" not in summary and "No consume phase (--consumer-groups 0)." in summary
    assert not (options.report_dir / E2E_PLOT).exists()


def test_the_report_files_are_written(outcome: RunOutcome, tmp_path: Path) -> None:
    directory = tmp_path / "again"
    write_report(outcome.report, directory)
    results = json.loads((directory / RESULTS_FILE).read_text())
    assert results["headline"]["mb_per_s"] == pytest.approx(
        outcome.report.analysis.all_active_mb_per_s
    )
    assert results["verification"]["passed"] is True
    summary = (directory / SUMMARY_FILE).read_text()
    for line in (
        "Sustained throughput:",
        "p99 produce latency:",
        "Objects per GB:",
        "PUTs per GB:",
        "Cost per GB:",
        "Verification: PASSED",
        "raw PUT limit",
        "raw SQLite limit",
        "Consolidation:",
        "Verification after consolidation: PASSED",
        "## Consolidation",
        "classic storage",
        "Consume: 2 group(s) read",
        "End to end, produce to consume: p50",
        "an idle consumer costs",
        "Consume verification: PASSED",
        "## Consume phase",
    ):
        assert line in summary
    for name in (LATENCY_PLOT, THROUGHPUT_PLOT, OBJECTS_PLOT, E2E_PLOT):
        png = (directory / name).read_bytes()
        assert png.startswith(b"\x89PNG") and len(png) > 1000


def test_generation_in_spark_is_seeded_and_round_trips_through_parquet(
    spark: SparkSession, tmp_path: Path
) -> None:
    def collect(spec: WorkloadSpec) -> list[tuple[object, ...]]:
        frame = workloads.generate(spark, spec)
        return sorted(tuple(r) for r in frame.collect())

    small = msgspec.structs.replace(TINY, total_mb=0.5)
    first = collect(small)
    assert first == collect(small)
    assert first == sorted(tuple(r) for r in workloads.generate_rows(small))
    assert first != collect(msgspec.structs.replace(small, seed=small.seed + 1))
    workloads.save(workloads.generate(spark, small), small, tmp_path / "w")
    frame, spec = workloads.load(spark, tmp_path / "w")
    assert spec == small
    assert sorted(tuple(r) for r in frame.collect()) == first


def test_starting_spark_prints_nothing_on_the_terminal(tmp_path: Path) -> None:
    """The JVM's banner and log lines go to the driver log, not to the harness's stderr."""
    script = (
        "from benchmarks.harness.spark import start_spark\n"
        "spark = start_spark(1)\n"
        "assert spark.range(5).count() == 5\n"
        "spark.stop()\n"
    )
    started = subprocess.run(
        [sys.executable, "-c", script],
        capture_output=True,
        text=True,
        timeout=180,
        cwd=REPO_ROOT,
        env={**os.environ, **quick_jvm_env(tmp_path / "spark-conf")},
        check=False,
    )
    assert started.returncode == 0, started.stderr
    assert started.stderr == "" and started.stdout == "", (started.stdout, started.stderr)
