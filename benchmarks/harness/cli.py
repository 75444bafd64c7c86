"""`python -m benchmarks.harness`: generate, execute, verify, analyse, price and report a run.

Exit status: 0 when every run verified, 1 when a verification failed, 2 on bad arguments,
3 when the run itself failed (the error is printed), 4 when Spark would not stop.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import datetime
import itertools
import os
import shutil
import sys
import tempfile
import threading
import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final, NamedTuple

import msgspec

from benchmarks.harness import coordinators
from benchmarks.harness import workload as workloads
from benchmarks.harness.analysis import analyze
from benchmarks.harness.baselines import put_baseline, sqlite_baseline
from benchmarks.harness.consolidate import ConsolidationReport, consolidate, gets_of
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
from benchmarks.harness.report import (
    Baselines,
    RunReport,
    SweepPoint,
    headline,
    store_label,
    summary_table,
    task_summary,
    write_report,
    write_sweep,
)
from benchmarks.harness.spec import (
    GB,
    MB,
    CostRates,
    RunSpec,
    StoreSpec,
    WorkloadSpec,
    apply_overrides,
)
from benchmarks.harness.verify import verify

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

WAL_PREFIX: Final = "wal/"
LOCAL_MASTER: Final = "local"
SPARK_STOP_TIMEOUT_S: Final = 60.0
PHASES: Final = (
    "spark",
    "topics",
    "workload",
    "execute",
    "verify",
    "analyse",
    "consolidate",
    "verify consolidated",
    "baselines",
    "report",
)


class Options(msgspec.Struct, kw_only=True):
    """Everything a run needs besides the workload spec, from the command line."""

    report_dir: Path
    data_dir: Path | None
    keep_data: bool
    store: StoreSpec
    wal: dict[str, int]
    rates: CostRates
    workload_path: Path | None
    save_workload: Path | None
    put_baseline_s: float
    sqlite_baseline_s: float
    progress: bool
    coordinator: str = coordinators.SQLITE_DEFAULT
    """A `--coordinator` URL in canonical form; each run resolves its own (`for_run`)."""
    master: str = LOCAL_MASTER
    """`local` (local[tasks]) or a standalone cluster's spark://HOST:PORT."""
    consolidate: bool = True
    """Consolidate everything after the first read-back, then read and verify it again."""


# --- the argument parser ------------------------------------------------------------------------


def _key_values(items: Sequence[str], what: str) -> dict[str, str]:
    out: dict[str, str] = {}
    for item in items:
        name, sep, value = item.partition("=")
        if not sep or not name or not value:
            raise SystemExit(f"bad {what} {item!r}: use NAME=VALUE")
        out[name.strip()] = value.strip()
    return out


def build_parser() -> argparse.ArgumentParser:
    defaults = WorkloadSpec()
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks.harness",
        description="PySpark benchmark of the diskless produce path: throughput, latency, "
        "object-storage cost, verified by reading everything back.",
    )
    w = parser.add_argument_group("workload (defaults are the embedded default run)")
    for name in WorkloadSpec.__struct_fields__:
        value = getattr(defaults, name)
        w.add_argument(
            f"--{name.replace('_', '-')}",
            dest=name,
            type=type(value),
            default=None,
            metavar=type(value).__name__.upper(),
            help=f"default {value}",
        )
    w.add_argument("--workload", type=Path, help="re-run a saved workload (parquet directory)")
    w.add_argument("--save-workload", type=Path, help="save the generated workload as parquet")
    e = parser.add_argument_group("environment")
    e.add_argument(
        "--wal",
        nargs="+",
        default=[],
        metavar="NAME=VALUE",
        help="WalConfig overrides, e.g. commit_interval_ms=100 buffer_max_bytes=4MiB",
    )
    e.add_argument(
        "--sweep",
        nargs="+",
        default=[],
        metavar="NAME=V1,V2",
        help="run every combination of these values (workload or WAL fields) and compare",
    )
    e.add_argument("--report-dir", type=Path, help="default reports/<timestamp>")
    e.add_argument("--data-dir", type=Path, help="objects and coordinator file (default: temp)")
    e.add_argument("--keep-data", action="store_true", help="keep the data directory")
    e.add_argument("--no-fsync", action="store_true", help="local store without fsync")
    e.add_argument("--s3-endpoint", help="S3-compatible endpoint URL (use S3, not a directory)")
    e.add_argument("--bucket", help="S3 bucket (with --s3-endpoint or for AWS)")
    e.add_argument("--s3-prefix", default="", help="key prefix inside the bucket")
    e.add_argument("--region", help="S3 region")
    e.add_argument("--put-baseline-s", type=float, default=4.0, help="raw PUT baseline length")
    e.add_argument("--sqlite-baseline-s", type=float, default=3.0, help="raw SQLite baseline")
    e.add_argument("--no-progress", action="store_true", help="no progress bars")
    e.add_argument(
        "--no-consolidation",
        action="store_true",
        help="skip the consolidation phase and the read-back of the consolidated data",
    )
    e.add_argument(
        "--master",
        default=LOCAL_MASTER,
        help="Spark master: local (default: local[tasks]) or spark://HOST:PORT of a standalone "
        "cluster, whose executors then run the workload, the brokers and the verification",
    )
    e.add_argument(
        "--coordinator",
        default=None,
        metavar="URL",
        help="batch coordinator: sqlite (default: a file in the run's data directory), "
        "sqlite:///PATH (one file per run beside PATH), postgresql://USER@HOST:PORT/DB (a "
        "database per run on that server, created through DB), or memory (single-task runs "
        "only)",
    )
    e.add_argument(
        "--memory-coordinator",
        action="store_true",
        help="the same as --coordinator memory",
    )
    c = parser.add_argument_group("cost model rates")
    rates = CostRates()
    for name in CostRates.__struct_fields__:
        value = getattr(rates, name)
        c.add_argument(
            f"--{name.replace('_', '-')}",
            dest=f"rate_{name}",
            type=type(value),
            default=value,
            help=f"default {value}",
        )
    return parser


def parse_args(argv: Sequence[str] | None) -> tuple[WorkloadSpec, Options, dict[str, list[str]]]:
    parser = build_parser()
    args = parser.parse_args(argv)
    overrides = {
        name: str(getattr(args, name))
        for name in WorkloadSpec.__struct_fields__
        if getattr(args, name) is not None
    }
    try:
        wal_text = _key_values(args.wal, "--wal")
        spec, wal = apply_overrides(WorkloadSpec(), {}, {**overrides, **wal_text})
        sweep = {k: v.split(",") for k, v in _key_values(args.sweep, "--sweep").items()}
        for name, values in sweep.items():
            for value in values:
                apply_overrides(spec, wal, {name: value})
    except ValueError as exc:
        parser.error(str(exc))
    if args.bucket and not args.s3_endpoint and not args.region:
        parser.error("--bucket needs --s3-endpoint or --region")
    if args.s3_endpoint and not args.bucket:
        parser.error("--s3-endpoint needs --bucket")
    if args.master != LOCAL_MASTER and not args.master.startswith("spark://"):
        parser.error(f"--master {args.master!r}: use local or spark://HOST:PORT")
    if args.memory_coordinator and args.coordinator is not None:
        parser.error("--memory-coordinator and --coordinator: give one")
    try:
        coordinator = coordinators.parse(
            "memory" if args.memory_coordinator else args.coordinator or "sqlite"
        )
    except ValueError as exc:
        parser.error(f"--coordinator {exc}")
    store = (
        StoreSpec(
            kind="s3",
            endpoint_url=args.s3_endpoint,
            bucket=args.bucket,
            prefix=args.s3_prefix,
            region=args.region,
        )
        if args.bucket
        else StoreSpec(kind="local", durable=not args.no_fsync)
    )
    stamp = datetime.datetime.now().strftime("%Y%m%d-%H%M%S")
    options = Options(
        report_dir=args.report_dir or Path("reports") / stamp,
        data_dir=args.data_dir,
        keep_data=args.keep_data,
        store=store,
        wal=wal,
        rates=CostRates(**{n: getattr(args, f"rate_{n}") for n in CostRates.__struct_fields__}),
        workload_path=args.workload,
        save_workload=args.save_workload,
        put_baseline_s=args.put_baseline_s,
        sqlite_baseline_s=args.sqlite_baseline_s,
        progress=not args.no_progress,
        coordinator=coordinator,
        master=args.master,
        consolidate=not args.no_consolidation,
    )
    if not coordinators.is_shared(coordinator) and spec.effective_tasks != 1:
        parser.error("an in-memory coordinator needs a single task: add --tasks 1")
    return spec, options, sweep


# --- one run ------------------------------------------------------------------------------------


class _Progress:
    """A phase bar, and during execution a bar of MB landed in the (local) object store."""

    def __init__(self, enabled: bool, phases: int = len(PHASES)) -> None:
        self.enabled = enabled
        self.bar: Any = None
        if enabled:
            from tqdm import tqdm  # type: ignore[import-untyped]

            self.bar = tqdm(total=phases, desc="bench", unit="phase", leave=False)
        self.times: dict[str, float] = {}

    @contextlib.contextmanager
    def phase(self, name: str) -> Iterator[None]:
        if self.bar is not None:
            self.bar.set_description(f"bench: {name}")
        started = time.perf_counter()
        yield
        self.times[name] = self.times.get(name, 0.0) + time.perf_counter() - started
        if self.bar is not None:
            self.bar.update(1)

    @contextlib.contextmanager
    def watch_store(self, root: Path | None, total_mb: float) -> Iterator[None]:
        if not self.enabled or root is None:
            yield
            return
        from tqdm import tqdm

        stop = threading.Event()
        bar = tqdm(total=round(total_mb), desc="produced", unit="MB", leave=False)

        def poll() -> None:
            while not stop.wait(0.5):
                bar.n = min(round(_tree_bytes(root / WAL_PREFIX) / MB), bar.total)
                bar.refresh()

        thread = threading.Thread(target=poll, daemon=True)
        thread.start()
        try:
            yield
        finally:
            stop.set()
            thread.join()
            bar.close()

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()
            self.bar = None

    def write(self, text: str) -> None:
        if self.bar is not None:
            self.bar.write(text)
        else:
            print(text)


def _tree_bytes(root: Path) -> int:
    total = 0
    for directory, _, files in os.walk(root):
        for name in files:
            with contextlib.suppress(OSError):
                total += os.stat(os.path.join(directory, name)).st_size
    return total


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
    progress: _Progress | None = None,
) -> RunOutcome:
    """One run: topics, workload, execution, verification, analysis, baselines (not written).

    Objects and the coordinator file go to a fresh directory under `options.data_dir` (a temp
    directory by default), removed afterwards unless `options.keep_data` (a coordinator file
    placed elsewhere by `--coordinator sqlite:///PATH` is removed with it).
    """
    progress = progress if progress is not None else _Progress(enabled=False)
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
            notes=[transactions_note(spec), *NOTES]
            + ([] if coordinators.is_shared(run.coordinator) else [MEMORY_NOTE])
            + ([POSTGRESQL_NOTE] if coordinators.is_postgresql(run.coordinator) else []),
            phases_s=dict(progress.times),
            tasks=[task_summary(t) for t in tasks],
            consolidation=consolidation,
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
    return report.verification.passed and consolidated and report.analysis.batches_acked > 0


def _finish(report: RunReport, directory: Path, progress: _Progress) -> None:
    with progress.phase("report"):
        report.phases_s = dict(progress.times)
        write_report(report, directory)


def main(argv: Sequence[str] | None = None) -> int:
    spec, options, sweep = parse_args(argv)
    progress = _Progress(options.progress, phases=1 + len(PHASES[1:]) * _combinations(sweep))
    spark: SparkSession | None = None
    try:
        with progress.phase("spark"):
            from benchmarks.harness.spark import start_spark

            master = None if options.master == LOCAL_MASTER else options.master
            spark = start_spark(spec.effective_tasks, master=master)
        if sweep:
            return _sweep(spark, spec, options, sweep, progress)
        report = run_once(spark, spec, options, "default run", progress).report
        _finish(report, options.report_dir, progress)
        progress.close()
        print(summary_table(report))
        print(f"report: {options.report_dir}")
        return 0 if succeeded(report) else 1
    except Exception as exc:
        progress.close()
        print(f"benchmark failed: {type(exc).__name__}: {exc}", file=sys.stderr)
        return 3
    finally:
        progress.close()
        if spark is not None:
            _stop_spark(spark)


def _combinations(sweep: dict[str, list[str]]) -> int:
    count = 1
    for values in sweep.values():
        count *= len(values)
    return count


def _stop_spark(spark: SparkSession) -> None:
    """Stop Spark, but never let a wedged JVM or worker hold the process hostage."""
    stopper = threading.Thread(target=spark.stop, daemon=True)
    stopper.start()
    stopper.join(SPARK_STOP_TIMEOUT_S)
    if stopper.is_alive():
        print(f"Spark did not stop within {SPARK_STOP_TIMEOUT_S} s; exiting", file=sys.stderr)
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(4)


def _sweep(
    spark: SparkSession,
    spec: WorkloadSpec,
    options: Options,
    sweep: dict[str, list[str]],
    progress: _Progress,
) -> int:
    names = list(sweep)
    points: list[SweepPoint] = []
    for values in itertools.product(*(sweep[n] for n in names)):
        settings = dict(zip(names, values, strict=True))
        point_spec, wal = apply_overrides(spec, options.wal, settings)
        label = ", ".join(f"{k}={v}" for k, v in settings.items())
        slug = "-".join(f"{k}={v}" for k, v in settings.items()).replace("/", "_")
        directory = options.report_dir / slug
        point_options = msgspec.structs.replace(options, wal=wal)
        progress.times.clear()
        report = run_once(spark, point_spec, point_options, label, progress).report
        _finish(report, directory, progress)
        progress.write(summary_table(report))
        points.append(
            SweepPoint(
                settings=settings,
                report_dir=str(directory),
                verified=succeeded(report),
                headline=report.headline,
            )
        )
    write_sweep(points, options.report_dir)
    progress.close()
    print((options.report_dir / "sweep.md").read_text())
    print(f"report: {options.report_dir}")
    return 0 if all(p.verified for p in points) else 1
