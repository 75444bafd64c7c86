"""`python -m benchmarks.harness`: generate, execute, verify, analyse, price and report a run
(`run`), or a sweep of runs, from the command line (`options`).

Exit status: 0 when every run verified, 1 when a verification failed, 2 on bad arguments,
3 when the run itself failed (the error is printed), 4 when Spark would not stop.
"""

from __future__ import annotations

import itertools
import os
import sys
import threading
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Final

import msgspec

from benchmarks.harness.options import LOCAL_MASTER, Options, parse_args
from benchmarks.harness.progress import PHASES, Progress
from benchmarks.harness.report import (
    RunReport,
    SweepPoint,
    summary_table,
    write_report,
    write_sweep,
)
from benchmarks.harness.run import run_once, succeeded
from benchmarks.harness.spec import WorkloadSpec, apply_overrides

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

SPARK_STOP_TIMEOUT_S: Final = 60.0


def _finish(report: RunReport, directory: Path, progress: Progress) -> None:
    with progress.phase("report"):
        report.phases_s = dict(progress.times)
        write_report(report, directory)


def main(argv: Sequence[str] | None = None) -> int:
    spec, options, sweep = parse_args(argv)
    progress = Progress(options.progress, phases=1 + len(PHASES[1:]) * _combinations(sweep))
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
    progress: Progress,
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
