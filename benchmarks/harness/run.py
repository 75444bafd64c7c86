"""One run of the harness: topics, workload, execution, verification, analysis, consolidation,
baselines and the report's figures (not written: `cli` writes them)."""

from __future__ import annotations

import asyncio
import datetime
import shutil
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING, Final, NamedTuple

import msgspec

from benchmarks.harness import coordinators
from benchmarks.harness import workload as workloads
from benchmarks.harness.analysis import analyze
from benchmarks.harness.baselines import put_baseline, sqlite_baseline
from benchmarks.harness.consolidate import ConsolidationReport, consolidate, gets_of
from benchmarks.harness.consume import consuming
from benchmarks.harness.consume_report import consume_report
from benchmarks.harness.cost import ASSUMPTIONS, CostInputs, cost_model
from benchmarks.harness.env import create_topics, open_coordinator, open_store, wal_config
from benchmarks.harness.execute import (
    KIND_TASK,
    ResultRow,
    describe_errors,
    execute,
    results_frame,
    task_audit,
)
from benchmarks.harness.execute import task_stats as parse_task_stats
from benchmarks.harness.options import Options
from benchmarks.harness.progress import WAL_PREFIX, Progress
from benchmarks.harness.report import (
    Baselines,
    RunReport,
    headline,
    store_label,
    task_summary,
)
from benchmarks.harness.spec import GB, RunSpec, StoreSpec, WorkloadSpec
from benchmarks.harness.verify import verify

if TYPE_CHECKING:
    from pyspark.sql import SparkSession


async def _list_objects(store: StoreSpec, prefix: str) -> list[tuple[str, int]]:
    client = open_store(store)
    try:
        return [(info.key, info.size) async for info in client.list_all(prefix)]
    finally:
        await client.close()


async def _create_topics(run: RunSpec, spec: WorkloadSpec) -> None:
    coordinator = open_coordinator(run)
    try:
        await create_topics(coordinator, spec)
    finally:
        await coordinator.close()


NOTES: Final = [
    "Producers do not retry failed requests; a failed batch leaves its producer's later batches "
    "on that partition out of sequence (reported as errors, not verification failures).",
    "Latency is measured in the producer's task around `broker.produce` (same process as the "
    "broker: no network); record batches are built before the clock starts.",
]


class RunOutcome(NamedTuple):
    report: RunReport
    rows: list[ResultRow]
    """Every batch's timing and result, and each task's counters, as the tasks returned them."""
    data_dir: Path


def transactions_note(spec: WorkloadSpec) -> str:
    if spec.transactional_share == 0:
        return "No transactional producers (--transactional-share 0): read_committed not checked."
    return (
        f"{spec.transactional_share:.0%} of producers are transactional (Kafka transaction "
        f"version 2, {spec.txn_requests} requests per transaction, {spec.txn_abort_share:.0%} "
        "aborted as planned by the seed, and any with a failed batch): one library "
        "TransactionCoordinator per Spark task, over the shared batch coordinator."
    )


def consume_note(spec: WorkloadSpec, run: RunSpec) -> str:
    if consuming(spec, run):
        return (
            "Consume phase: each execution task starts a reader process (a broker and one member "
            "of each consumer group, for the task's share of the partitions) before its "
            "producers; end-to-end latency is a group's receipt of a batch minus its producer's "
            "send, on the hosts' wall clocks (on a cluster, their skew is in it)."
        )
    if spec.consumer_groups == 0:
        return "No consume phase (--consumer-groups 0)."
    return "No consume phase: a reader process cannot open an in-memory coordinator."


POSTGRESQL_NOTE: Final = (
    "PostgreSQL coordinator: the raw-insert baseline is still SQLite on the driver's disk (the "
    "same headline as a local run); `benchmarks.bench_coordinator` measures PostgreSQL commits "
    "against raw PostgreSQL inserts. Its metadata figures are relation sizes, which keep the "
    "space of deleted rows until VACUUM: after consolidation they shrink only after one."
)
MEMORY_NOTE: Final = (
    "In-memory coordinator: the read-back ran in the execution task through a producing broker, "
    "whose segment cache still held recent objects, so GETs per GB understate a cold read. "
    "No consolidation phase: the coordinator lived only in that task."
)


def run_once(
    spark: SparkSession,
    spec: WorkloadSpec,
    options: Options,
    label: str,
    progress: Progress | None = None,
) -> RunOutcome:
    """One run: topics, workload, execution, verification, analysis, baselines (not written).

    Objects and the coordinator file go to a fresh directory under `options.data_dir` (a temp
    directory by default), removed afterwards unless `options.keep_data` (a coordinator file
    placed elsewhere by `--coordinator sqlite:///PATH` is removed with it).
    """
    progress = progress if progress is not None else Progress(enabled=False)
    started_at = datetime.datetime.now().astimezone().isoformat(timespec="seconds")
    data_dir = Path(tempfile.mkdtemp(prefix="diskless-bench-", dir=options.data_dir))
    try:
        store = options.store
        local_root: Path | None = None
        if store.kind == "local":
            local_root = data_dir / "objects"
            store = msgspec.structs.replace(store, root=str(local_root))
        else:
            prefix = f"{store.prefix}{data_dir.name}/"
            store = msgspec.structs.replace(store, prefix=prefix)
        run = RunSpec(
            store=store,
            coordinator=coordinators.for_run(options.coordinator, data_dir),
            wal=options.wal,
            run_dir=str(data_dir),
        )
        with progress.phase("topics"):
            coordinators.prepare(options.coordinator, run.coordinator)
            if coordinators.is_shared(run.coordinator):  # (an in-memory one is its task's own)
                asyncio.run(_create_topics(run, spec))
        with progress.phase("workload"):
            if options.workload_path is not None:
                frame, spec = workloads.load(spark, options.workload_path)
            else:
                frame = workloads.generate(spark, spec)
            if options.save_workload is not None:
                workloads.save(frame, spec, options.save_workload)
            frame = frame.cache()
            frame.count()
        with progress.phase("execute"), progress.watch_store(local_root, spec.total_mb):
            rows = execute(spark, frame, spec, run)
        frame.unpersist()
        tasks = [parse_task_stats(r) for r in rows if r.kind == KIND_TASK]
        results = results_frame(spark, rows).cache()
        with progress.phase("verify"):
            in_task = next((task_audit(t) for t in tasks if t.audit is not None), None)
            verification = verify(spark, results, spec, run, in_task)
        with progress.phase("analyse"):
            objects = asyncio.run(_list_objects(store, WAL_PREFIX))
            analysis = analyze(spark, results, rows, tasks, objects)
        with progress.phase("verify consumed"):
            consumed = consume_report(spark, rows, tasks, spec, analysis.bytes_acked)
        consolidation: ConsolidationReport | None = None
        if options.consolidate and coordinators.is_shared(run.coordinator):
            with progress.phase("consolidate"):
                figures = consolidate(spark, run)
            with progress.phase("verify consolidated"):
                after = verify(spark, results, spec, run)
            produced_gb = max(1, analysis.bytes_acked) / GB
            consolidation = ConsolidationReport(
                figures=figures,
                verification=after,
                gets_per_gb_before=gets_of(verification) / produced_gb,
                gets_per_gb_after=gets_of(after) / produced_gb,
            )
        results.unpersist()
        with progress.phase("baselines"):
            put = put_baseline(
                spark, spec, run, round(analysis.objects.mean_bytes), options.put_baseline_s
            )
            sqlite = sqlite_baseline(
                data_dir / "baseline.sqlite",
                round(analysis.batches_per_commit),
                options.sqlite_baseline_s,
            )
        store_put_requests = sum(t.store.get("put_requests", 0) for t in tasks)
        gets = gets_of(consolidation.verification if consolidation else verification)
        cost = cost_model(
            CostInputs(
                produced_bytes=max(1, analysis.bytes_acked),
                put_requests=store_put_requests,
                get_requests=gets,
                objects=analysis.objects.count,
                stored_bytes=analysis.objects.total_bytes,
            ),
            options.rates,
        )
        baselines = Baselines(put=put, sqlite=sqlite)
        report = RunReport(
            started_at=started_at,
            label=label,
            workload=spec,
            wal=options.wal,
            store=store_label(run),
            coordinator=coordinators.describe(run.coordinator, spec.effective_tasks),
            rates=options.rates,
            master=str(spark.sparkContext.master),
            headline=headline(analysis, cost, baselines, wal_config(run).buffer_max_bytes),
            analysis=analysis,
            cost=cost,
            cost_assumptions=list(ASSUMPTIONS),
            baselines=baselines,
            verification=verification,
            errors=describe_errors(rows),
            notes=[transactions_note(spec), *NOTES, consume_note(spec, run)]
            + ([] if coordinators.is_shared(run.coordinator) else [MEMORY_NOTE])
            + ([POSTGRESQL_NOTE] if coordinators.is_postgresql(run.coordinator) else []),
            phases_s=dict(progress.times),
            tasks=[task_summary(t) for t in tasks],
            consolidation=consolidation,
            consume=consumed,
        )
        return RunOutcome(report, rows, data_dir)
    finally:
        if options.keep_data:
            kept = coordinators.for_run(options.coordinator, data_dir)
            progress.write(f"data kept in {data_dir} (coordinator {kept})")
        else:
            shutil.rmtree(data_dir, ignore_errors=True)
            resolved = coordinators.for_run(options.coordinator, data_dir)
            try:
                coordinators.remove(options.coordinator, resolved)
            except Exception as exc:  # (never hide the run's own failure behind this one)
                progress.write(f"could not remove the coordinator {resolved}: {exc}")


def succeeded(report: RunReport) -> bool:
    """Verified, and something was acknowledged (a run where every request failed proves
    nothing, even though nothing acknowledged went missing)."""
    consolidated = report.consolidation is None or report.consolidation.verification.passed
    consumed = report.consume is None or report.consume.verification.passed
    return (
        report.verification.passed
        and consolidated
        and consumed
        and report.analysis.batches_acked > 0
    )
