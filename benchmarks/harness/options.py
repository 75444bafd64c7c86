"""The harness's command line: the workload spec, the run's options and the sweep it asks for."""

from __future__ import annotations

import argparse
import datetime
from collections.abc import Sequence
from pathlib import Path
from typing import Final

import msgspec

from benchmarks.harness import coordinators
from benchmarks.harness.spec import CostRates, StoreSpec, WorkloadSpec, apply_overrides

LOCAL_MASTER: Final = "local"


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
