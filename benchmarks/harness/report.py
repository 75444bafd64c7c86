"""The report: JSON results, a Markdown summary, PNG plots, and the table printed at the end."""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, Final

import msgspec

from benchmarks.harness.analysis import Analysis, Latency
from benchmarks.harness.baselines import PutBaseline, SqliteBaseline
from benchmarks.harness.consolidate import (
    ConsolidationReport,
    consolidation_lines,
    consolidation_markdown,
)
from benchmarks.harness.consume_report import (
    E2E_PLOT,
    ConsumeReport,
    consume_lines,
    consume_markdown,
    plot_e2e_cdf,
)
from benchmarks.harness.cost import CostModel
from benchmarks.harness.execute import TaskStats
from benchmarks.harness.metrics_snapshot import METRICS_FILE, write_metrics
from benchmarks.harness.placement import TaskPlace
from benchmarks.harness.spec import GB, CostRates, RunSpec, WorkloadSpec
from benchmarks.harness.verify import Verification

RESULTS_FILE: Final = "results.json"
SUMMARY_FILE: Final = "summary.md"
LATENCY_PLOT: Final = "latency_cdf.png"
THROUGHPUT_PLOT: Final = "throughput.png"
OBJECTS_PLOT: Final = "object_sizes.png"
SWEEP_RESULTS_FILE: Final = "sweep.json"
SWEEP_SUMMARY_FILE: Final = "sweep.md"
SWEEP_PLOT: Final = "sweep.png"


class Baselines(msgspec.Struct, frozen=True, kw_only=True):
    put: PutBaseline
    sqlite: SqliteBaseline


class Headline(msgspec.Struct, frozen=True, kw_only=True):
    """The figures the default report leads with, each beside this machine's limit."""

    mb_per_s: float
    """Sustained: acknowledged MB/s while every producer was busy."""
    whole_run_mb_per_s: float
    raw_put_mb_per_s: float
    mb_per_s_of_raw_put: float
    p99_ms: float
    raw_put_p99_ms: float
    objects_per_gb: float
    objects_per_gb_floor: float
    """GB / buffer_max_bytes: every object a full segment (fewer objects cannot carry a GB)."""
    puts_per_gb: float
    commits_per_s: float
    objects_per_commit: float = 0.0
    """Objects per coordinator step: above 1 when uploaded objects queued for their turn."""
    raw_sqlite_txns_per_s: float
    commits_of_raw_sqlite: float
    batches_per_s: float
    raw_sql_rows_per_s: float
    write_usd_per_gb: float
    usd_per_gb: float
    """Writes plus one cold full read."""
    classic_usd_per_gb: float
    classic_over_diskless_write: float
    classic_over_diskless: float


class RunReport(msgspec.Struct, kw_only=True):
    started_at: str
    label: str
    workload: WorkloadSpec
    wal: dict[str, int]
    store: str
    coordinator: str
    rates: CostRates
    master: str = "local"
    """The Spark master the run used: local[N], or a cluster's spark://HOST:PORT."""
    headline: Headline
    analysis: Analysis
    cost: CostModel
    cost_assumptions: list[str]
    baselines: Baselines
    verification: Verification
    errors: dict[str, int]
    notes: list[str]
    phases_s: dict[str, float]
    tasks: list[TaskSummary] = msgspec.field(default_factory=list)
    consolidation: ConsolidationReport | None = None
    """The consolidation phase and the read-back after it (None: not run)."""
    consume: ConsumeReport | None = None
    """The consume phase: consumer groups reading while the producers ran (None: not run)."""


class TaskSummary(msgspec.Struct, frozen=True, kw_only=True):
    """One execution task: its share of the load and its brokers' own counters."""

    task: int
    brokers: list[int]
    producers: int
    requests_planned: int
    requests_sent: int
    build_s: float
    seconds: float
    store: dict[str, int]
    broker_stats: dict[str, Any]
    """Each broker's `stats` (produce, fetch, WAL), latency sample lists left out."""
    place: TaskPlace | None = None
    """Where the task ran (its executor)."""


def task_summary(stats: TaskStats) -> TaskSummary:
    return TaskSummary(
        task=stats.task,
        brokers=stats.brokers,
        producers=stats.producers,
        requests_planned=stats.requests_planned,
        requests_sent=stats.requests_sent,
        build_s=stats.build_s,
        seconds=stats.ended_ts - stats.started_ts,
        store=stats.store,
        broker_stats=_without_samples(stats.broker_stats),
        place=stats.place,
    )


def _without_samples(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _without_samples(v) for k, v in value.items() if not k.endswith("_latency_s")}
    return value


def headline(
    analysis: Analysis, cost: CostModel, baselines: Baselines, buffer_max_bytes: int
) -> Headline:
    """The headline figures; `buffer_max_bytes` (the WAL's rotation size) sets the objects floor."""
    commits = analysis.commit_ms.count
    commits_per_s = commits / analysis.duration_s if analysis.duration_s > 0 else 0.0
    return Headline(
        mb_per_s=analysis.all_active_mb_per_s,
        whole_run_mb_per_s=analysis.mb_per_s,
        raw_put_mb_per_s=baselines.put.mb_per_s,
        mb_per_s_of_raw_put=_ratio(analysis.all_active_mb_per_s, baselines.put.mb_per_s),
        p99_ms=analysis.latency_ms.p99,
        raw_put_p99_ms=baselines.put.latency_p99_ms,
        objects_per_gb=cost.objects_per_gb,
        objects_per_gb_floor=GB / buffer_max_bytes,
        puts_per_gb=cost.puts_per_gb,
        commits_per_s=commits_per_s,
        objects_per_commit=_ratio(analysis.objects.count, commits),
        raw_sqlite_txns_per_s=baselines.sqlite.txns_per_s,
        commits_of_raw_sqlite=_ratio(commits_per_s, baselines.sqlite.txns_per_s),
        batches_per_s=analysis.batches_per_s,
        raw_sql_rows_per_s=baselines.sqlite.rows_per_s,
        write_usd_per_gb=cost.diskless_write_usd_per_gb,
        usd_per_gb=cost.diskless_usd_per_gb,
        classic_usd_per_gb=cost.classic_usd_per_gb,
        classic_over_diskless_write=cost.classic_over_diskless_write,
        classic_over_diskless=cost.classic_over_diskless,
    )


def _ratio(value: float, limit: float) -> float:
    return value / limit if limit > 0 else 0.0


def store_label(run: RunSpec) -> str:
    store = run.store
    if store.kind == "local":
        return "local directory" + ("" if store.durable else " (no fsync)")
    return f"S3 bucket {store.bucket} at {store.endpoint_url or 'AWS'}"


# --- text -------------------------------------------------------------------------------------


def _usd(value: float) -> str:
    return f"${value:.6f}" if value < 0.01 else f"${value:.4f}"


def _times(value: float) -> str:
    return "inf" if math.isinf(value) else f"{value:,.0f}x" if value >= 10 else f"{value:.1f}x"


def headline_lines(report: RunReport) -> list[str]:
    h = report.headline
    v = report.verification
    failed = sum(report.errors.values())
    errors = (
        [
            f"Errors: {failed:,} batches failed: "
            + ", ".join(f"{k} {n:,}" for k, n in report.errors.items())
        ]
        if failed
        else []
    )
    return [
        *errors,
        f"Sustained throughput: {h.mb_per_s:.1f} MB/s "
        f"(raw PUT limit {h.raw_put_mb_per_s:.1f} MB/s: {h.mb_per_s_of_raw_put:.0%}; "
        f"whole run incl. the tail {h.whole_run_mb_per_s:.1f} MB/s)",
        f"p99 produce latency: {h.p99_ms:.1f} ms (raw PUT p99 {h.raw_put_p99_ms:.1f} ms)",
        f"Objects per GB: {h.objects_per_gb:.1f} (floor at full segments "
        f"{h.objects_per_gb_floor:.1f})",
        f"PUTs per GB: {h.puts_per_gb:.1f} (PUT cost {_usd(h.write_usd_per_gb)}/GB with storage)",
        f"Coordinator commits: {h.commits_per_s:.1f}/s, {h.objects_per_commit:.1f} objects each "
        f"(raw SQLite limit {h.raw_sqlite_txns_per_s:,.0f} txn/s: {h.commits_of_raw_sqlite:.1%}); "
        f"batches {h.batches_per_s:,.0f}/s (raw SQLite {h.raw_sql_rows_per_s:,.0f} rows/s)",
        f"Cost per GB: {_usd(h.write_usd_per_gb)} diskless writes vs "
        f"{_usd(h.classic_usd_per_gb)} classic (cross-AZ replication and RF disks) "
        f"({_times(h.classic_over_diskless_write)} more); with one cold read-back "
        f"{_usd(h.usd_per_gb)} ({_times(h.classic_over_diskless)})",
        f"Verification: {'PASSED' if v.passed else 'FAILED'} "
        f"({v.read_records:,} records read back, {v.expected_records:,} acknowledged, "
        f"{v.partitions_failed} of {v.partitions} partitions failed)",
        *(consolidation_lines(report.consolidation) if report.consolidation else []),
        *(consume_lines(report.consume, h.p99_ms) if report.consume else []),
    ]


def _task_lines(tasks: Sequence[TaskSummary]) -> list[str]:
    lines = []
    for t in tasks:
        unsent = t.requests_planned - t.requests_sent
        lines.append(
            f"- task {t.task}: brokers {t.brokers}, {t.producers} producers, "
            f"{t.requests_sent:,} of {t.requests_planned:,} planned requests sent"
            + (f" ({unsent:,} not sent: duration cap or a refused transaction)" if unsent else "")
            + f", {t.seconds:.1f} s producing after {t.build_s:.1f} s building batches"
            + (f", on {t.place}" if t.place is not None else "")
        )
    return lines


def _latency_row(name: str, lat: Latency) -> str:
    return (
        f"| {name} | {lat.count:,} | {lat.mean:.1f} | {lat.p50:.1f} | {lat.p95:.1f} | "
        f"{lat.p99:.1f} | {lat.p999:.1f} | {lat.max:.1f} |"
    )


def markdown(report: RunReport) -> str:
    a, c, b, v, w = (
        report.analysis,
        report.cost,
        report.baselines,
        report.verification,
        report.workload,
    )
    lines = [
        f"# diskless benchmark: {report.label}",
        "",
        f"Started {report.started_at}; Spark master: {report.master}; store: {report.store}; "
        f"coordinator: {report.coordinator}.",
        "",
        "## Headline",
        "",
        *[f"- {line}" for line in headline_lines(report)],
        "",
        "## Workload",
        "",
        f"- {w.brokers} brokers in {w.racks} racks, {w.effective_tasks} Spark tasks, "
        f"{w.topics} topic(s) x {w.partitions} partitions, {w.producers} producers "
        f"({w.max_in_flight} in flight each), seed {w.seed}",
        f"- record bytes {w.record_bytes}, records per batch {w.batch_records}, "
        f"{w.partitions_per_round} partitions per send round, Zipf key skew {w.key_skew}",
        f"- {'closed loop' if w.rate_mb_s == 0 else f'target {w.rate_mb_s} MB/s'}, "
        f"up to {w.total_mb} MB or {w.duration_s} s, acks={w.acks}",
        f"- WAL overrides: {report.wal or 'none (library defaults)'}",
        "",
        "## Throughput",
        "",
        "| requests | batches acked | batches failed | records | MB | seconds | MB/s | "
        "batches/s | requests/s |",
        "|---|---|---|---|---|---|---|---|---|",
        f"| {a.requests_sent:,} | {a.batches_acked:,} | {a.batches_failed:,} | "
        f"{a.records_acked:,} | {a.bytes_acked / 1e6:,.1f} | {a.duration_s:.1f} | "
        f"{a.mb_per_s:.2f} | {a.batches_per_s:,.0f} | {a.requests_per_s:,.0f} |",
        "",
        f"Sustained while every producer was busy (the first {a.all_active_s:.1f} s): "
        f"{a.all_active_mb_per_s:.1f} MB/s; whole run {a.mb_per_s:.1f} MB/s.",
        "",
        *_task_lines(report.tasks),
        "",
        "## Latency (ms)",
        "",
        "| | count | mean | p50 | p95 | p99 | p99.9 | max |",
        "|---|---|---|---|---|---|---|---|",
        _latency_row("produce (all brokers)", a.latency_ms),
        *[_latency_row(f"produce, broker {k}", lat) for k, lat in a.latency_ms_by_broker.items()],
        *[
            _latency_row(f"produce, {kind} producers", lat)
            for kind, lat in a.latency_ms_by_producer_kind.items()
        ],
        _latency_row("coordinator commit", a.commit_ms),
        _latency_row("object upload (PUT)", a.upload_ms),
        "",
        f"Batches per commit: {a.batches_per_commit:.1f}.",
        "",
        "## Objects",
        "",
        f"- {a.objects.count:,} objects, {a.objects.total_bytes / 1e6:,.1f} MB; size mean "
        f"{a.objects.mean_bytes / 1e3:,.1f} kB, p50 {a.objects.p50_bytes / 1e3:,.1f} kB, "
        f"p90 {a.objects.p90_bytes / 1e3:,.1f} kB, max {a.objects.max_bytes / 1e3:,.1f} kB",
        "",
        "## Cost per GB produced",
        "",
        "| | requests per GB | $ per GB |",
        "|---|---|---|",
        f"| diskless PUT | {c.puts_per_gb:.1f} | {_usd(c.diskless_put_usd_per_gb)} |",
        f"| diskless GET (one full read) | {c.gets_per_gb:.1f} | "
        f"{_usd(c.diskless_get_usd_per_gb)} |",
        f"| diskless storage | | {_usd(c.diskless_storage_usd_per_gb)} |",
        f"| **diskless writes (PUT + storage)** | | **{_usd(c.diskless_write_usd_per_gb)}** |",
        f"| diskless writes + one read | | {_usd(c.diskless_usd_per_gb)} |",
        f"| classic cross-AZ ({c.classic_cross_az_gb_per_gb:.3f} GB per GB) | | "
        f"{_usd(c.classic_cross_az_usd_per_gb)} |",
        f"| classic storage (RF {report.rates.replication_factor} on block storage) | | "
        f"{_usd(c.classic_storage_usd_per_gb)} |",
        f"| **classic** | | **{_usd(c.classic_usd_per_gb)}** |",
        "",
        f"Rates: PUT ${report.rates.put_per_1000}/1000, GET ${report.rates.get_per_1000}/1000, "
        f"object storage ${report.rates.storage_gb_month}/GB-month, block storage "
        f"${report.rates.block_storage_gb_month}/GB-month at "
        f"{report.rates.block_storage_utilization:.0%} use, for {report.rates.retention_hours} h, "
        f"cross-AZ ${report.rates.cross_az_per_gb}/GB, RF {report.rates.replication_factor}, "
        f"{report.rates.azs} AZs. Assumptions:",
        "",
        *[f"- {line}" for line in report.cost_assumptions],
        "",
        "## Baselines (this machine, same run)",
        "",
        f"- Raw PUT: {b.put.puts:,} objects of {b.put.object_bytes / 1e3:,.1f} kB, "
        f"{b.put.concurrency} concurrent: {b.put.puts_per_s:,.1f} PUT/s, "
        f"{b.put.mb_per_s:.1f} MB/s, p50 {b.put.latency_p50_ms:.1f} ms, "
        f"p99 {b.put.latency_p99_ms:.1f} ms",
        f"- Raw SQLite: {b.sqlite.rows_per_txn} rows per transaction: "
        f"{b.sqlite.txns_per_s:,.0f} txn/s, {b.sqlite.rows_per_s:,.0f} rows/s, "
        f"p50 {b.sqlite.txn_p50_ms:.2f} ms, p99 {b.sqlite.txn_p99_ms:.2f} ms",
        "",
        "## Verification",
        "",
        f"- {'PASSED' if v.passed else 'FAILED'}: {v.partitions} partitions read back through "
        f"`broker.fetch`; {v.expected_records:,} acknowledged records, {v.read_records:,} read "
        f"({v.read_bytes / 1e6:,.1f} MB), missing {v.missing}, mismatched {v.mismatched}, "
        f"duplicates {v.duplicates}, gaps {v.gaps}, order violations {v.order_violations}, "
        f"present but unacknowledged {v.unacknowledged_present}",
        *(
            [
                f"- read_committed: {v.committed_read:,} records shown, "
                f"{v.committed_expected:,} acknowledged idempotent or committed; missing "
                f"{v.committed_missing}, aborted or unacknowledged shown {v.committed_extra}; "
                f"{v.markers:,} transaction markers"
            ]
            if v.read_committed_checked
            else ["- read_committed: not checked (no transactional producers)"]
        ),
        *[f"- problem: {p}" for p in v.problems],
        "",
        *(consolidation_markdown(report.consolidation) if report.consolidation else []),
        *(consume_markdown(report.consume, a.latency_ms.p99) if report.consume else []),
        "## Errors",
        "",
        *([f"- {name}: {n} batches" for name, n in report.errors.items()] or ["- none"]),
        "",
        "## Notes",
        "",
        *[f"- {note}" for note in report.notes],
        "",
        "Phases (s): " + ", ".join(f"{k} {t:.1f}" for k, t in report.phases_s.items()),
        "",
        f"Plots: {LATENCY_PLOT}, {THROUGHPUT_PLOT}, {OBJECTS_PLOT}.",
        "",
    ]
    return "\n".join(lines)


def summary_table(report: RunReport) -> str:
    """The printed summary: headline lines under a title, fixed width."""
    width = 78
    title = f" diskless benchmark: {report.label} "
    setting = (
        f"Spark master {report.master}; store: {report.store}; coordinator: {report.coordinator}"
    )
    body = headline_lines(report)
    return "\n".join(["=" * width, title.center(width, "="), setting, *body, "=" * width])


# --- files ------------------------------------------------------------------------------------


def _plt() -> Any:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def plot_latency_cdf(path: Path, latencies_ms: Sequence[float]) -> None:
    plt = _plt()
    fig, ax = plt.subplots(figsize=(7, 4.5))
    n = len(latencies_ms)
    if n:
        ax.plot(list(latencies_ms), [(i + 1) / n for i in range(n)])
    ax.set_xscale("log")
    ax.set_xlabel("produce latency (ms, log scale)")
    ax.set_ylabel("fraction of requests")
    ax.set_title("Produce latency CDF")
    ax.grid(True, which="both", alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


def plot_throughput(path: Path, by_second: Sequence[tuple[int, float]]) -> None:
    plt = _plt()
    fig, ax = plt.subplots(figsize=(7, 4.5))
    ax.plot([s for s, _ in by_second], [mb for _, mb in by_second], marker=".")
    ax.set_xlabel("seconds since the first request")
    ax.set_ylabel("MB acknowledged per second")
    ax.set_title("Throughput over time")
    ax.grid(True, alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


def plot_object_sizes(path: Path, sizes: Sequence[int]) -> None:
    plt = _plt()
    fig, ax = plt.subplots(figsize=(7, 4.5))
    if sizes:
        ax.hist([s / 1e6 for s in sizes], bins=40)
    ax.set_xlabel("object size (MB)")
    ax.set_ylabel("objects")
    ax.set_title(f"WAL object sizes ({len(sizes)} objects)")
    ax.grid(True, alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


def write_report(report: RunReport, directory: Path) -> list[Path]:
    """Write results.json, summary.md, the plots (the end-to-end CDF with a consume phase) and
    the run's metrics snapshot (`metrics.prom`, as a broker's `/metrics` would serve them)."""
    directory.mkdir(parents=True, exist_ok=True)
    paths = [directory / name for name in (RESULTS_FILE, SUMMARY_FILE)]
    paths[0].write_bytes(msgspec.json.format(msgspec.json.encode(report)) + b"\n")
    paths[1].write_text(markdown(report))
    plot_latency_cdf(directory / LATENCY_PLOT, report.analysis.request_latencies_ms)
    plot_throughput(directory / THROUGHPUT_PLOT, report.analysis.throughput_by_second)
    plot_object_sizes(directory / OBJECTS_PLOT, report.analysis.object_sizes)
    paths += [directory / name for name in (LATENCY_PLOT, THROUGHPUT_PLOT, OBJECTS_PLOT)]
    if report.consume is not None:
        plot_e2e_cdf(
            directory / E2E_PLOT,
            report.consume.e2e_latencies_ms,
            report.analysis.request_latencies_ms,
        )
        paths.append(directory / E2E_PLOT)
    broker_stats = [t.broker_stats for t in report.tasks]
    store_stats = [t.store for t in report.tasks]
    paths.append(write_metrics(directory / METRICS_FILE, broker_stats, store_stats, report.rates))
    return paths


# --- sweeps -----------------------------------------------------------------------------------

SWEEP_COLUMNS: Final[tuple[tuple[str, Callable[[Headline], str]], ...]] = (
    ("MB/s", lambda h: f"{h.mb_per_s:.2f}"),
    ("% raw PUT", lambda h: f"{h.mb_per_s_of_raw_put:.0%}"),
    ("p99 ms", lambda h: f"{h.p99_ms:.1f}"),
    ("objects/GB", lambda h: f"{h.objects_per_gb:.1f}"),
    ("PUTs/GB", lambda h: f"{h.puts_per_gb:.1f}"),
    ("write $/GB", lambda h: _usd(h.write_usd_per_gb)),
    ("+read $/GB", lambda h: _usd(h.usd_per_gb)),
    ("classic $/GB", lambda h: _usd(h.classic_usd_per_gb)),
)


class SweepPoint(msgspec.Struct, kw_only=True):
    settings: dict[str, str]
    report_dir: str
    verified: bool
    headline: Headline


def sweep_markdown(points: Sequence[SweepPoint]) -> str:
    keys = list(points[0].settings) if points else []
    header = [*keys, *(name for name, _ in SWEEP_COLUMNS), "verified"]
    lines = [
        "# diskless benchmark sweep",
        "",
        "| " + " | ".join(header) + " |",
        "|" + "---|" * len(header),
    ]
    for point in points:
        cells = [point.settings[k] for k in keys]
        cells += [fmt(point.headline) for _, fmt in SWEEP_COLUMNS]
        cells.append("yes" if point.verified else "NO")
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join([*lines, "", f"Plot: {SWEEP_PLOT}.", ""])


def write_sweep(points: Sequence[SweepPoint], directory: Path) -> list[Path]:
    directory.mkdir(parents=True, exist_ok=True)
    json_path = directory / SWEEP_RESULTS_FILE
    md_path = directory / SWEEP_SUMMARY_FILE
    plot_path = directory / SWEEP_PLOT
    json_path.write_bytes(msgspec.json.format(msgspec.json.encode(list(points))) + b"\n")
    md_path.write_text(sweep_markdown(points))
    plt = _plt()
    fig, (left, right) = plt.subplots(1, 2, figsize=(11, 4.5))
    labels = [", ".join(f"{k}={v}" for k, v in p.settings.items()) for p in points]
    xs = list(range(len(points)))
    left.bar(xs, [p.headline.mb_per_s for p in points])
    left.set_ylabel("MB/s")
    left.set_title("Throughput")
    right.bar(xs, [p.headline.p99_ms for p in points], color="tab:orange")
    right.set_ylabel("p99 produce latency (ms)")
    right.set_title("p99 latency")
    for ax in (left, right):
        ax.set_xticks(xs)
        ax.set_xticklabels(labels, rotation=30, ha="right", fontsize=8)
        ax.grid(True, axis="y", alpha=0.3)
    fig.tight_layout()
    fig.savefig(plot_path, dpi=100)
    plt.close(fig)
    return [json_path, md_path, plot_path]
