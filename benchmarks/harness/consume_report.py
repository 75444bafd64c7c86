"""The consume phase's verdict and figures, in the driver.

Every group's read of every partition is expanded back into records and audited against the
acknowledgements exactly as the read-back is (`audit.check_partition`, in Spark tasks); each
acknowledged batch's end-to-end latency is the time its group received it minus the time its
producer sent it. CPU per MB is process CPU time on both sides: the execution tasks' while
their producers ran, the reader processes' while their members read, less the members' own
decoding. The idle figure is a reader process's CPU with its members attached and long-polling
minus the same process's with them detached, per member.
"""

from __future__ import annotations

import bisect
import math
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Final

import msgspec

from benchmarks.harness.audit import ExpectedBatch, PartitionVerdict, check_partition
from benchmarks.harness.consumer import ConsumerResult, PartitionRead, Run
from benchmarks.harness.execute import KIND_BATCH, ResultRow, TaskStats
from benchmarks.harness.placement import TaskPlace
from benchmarks.harness.spec import GB, MB, WorkloadSpec
from benchmarks.harness.verify import Verification, expected_by_partition, summarize
from benchmarks.harness.workload import all_partitions
from diskless import TopicPartition

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

E2E_PLOT: Final = "e2e_latency_cdf.png"
CPU_SOURCE: Final = (
    "CPU is process CPU time (user + system, all threads): the execution tasks' processes "
    "(brokers and producer loops, batches built beforehand) while their producers ran, and "
    "the reader processes' (one broker and one member of each group) from the producers' start, "
    "when their members start, until they caught up, less the members' own joining and decoding "
    "(timed on their loop)."
)


class E2ELatency(msgspec.Struct, frozen=True, kw_only=True):
    count: int
    mean: float
    p50: float
    p90: float
    p99: float
    max: float


class IdleConsumers(msgspec.Struct, frozen=True, kw_only=True):
    consumers: int
    seconds: float
    cores_attached: float
    """Reader processes' CPU (in cores) with every member attached and long-polling."""
    cores_detached: float
    """The same processes with the members gone: the brokers alone."""
    cores_per_consumer: float
    fetches_per_s: float
    """`DisklessBroker.fetch` calls per second while attached and idle, all members."""
    cpu_us_per_fetch: float
    coordinator_calls_per_s: float
    coordinator_calls_per_s_detached: float


class ConsumeReport(msgspec.Struct, kw_only=True):
    groups: int
    members: int
    """Group members, all groups: one per group in each reader process."""
    readers: list[TaskPlace]
    caught_up: bool
    records: int
    bytes_read: int
    seconds: float
    """From the first send until the last member caught up."""
    mb_per_s: float
    read_cpu_s: float
    client_cpu_s: float
    read_mb_per_core: float
    produce_cpu_s: float
    produce_mb_per_core: float
    e2e_ms: E2ELatency
    coordinator_calls: int
    coordinator_calls_per_s: float
    coordinator_calls_per_gb: float
    calls_by_method: dict[str, int]
    gets: int
    gets_per_gb: float
    fetches: int
    polls: int
    fetch_errors: int
    idle: IdleConsumers
    verification: Verification
    problems: list[str]
    e2e_latencies_ms: list[float]
    """Every (group, acknowledged batch) latency, sorted (for the CDF plot)."""
    fetch_wait_ms: int = 0


def end_to_end_ms(runs: Sequence[Run], sent: Sequence[tuple[int, float]]) -> list[float]:
    """For each acknowledged (base offset, send time), when the run holding it was received."""
    starts = [run[0] for run in runs]
    out: list[float] = []
    for base_offset, send_ts in sent:
        i = bisect.bisect_right(starts, base_offset) - 1
        if i >= 0 and base_offset < runs[i][0] + runs[i][1]:
            out.append((runs[i][8] - send_ts) * 1000.0)
    return out


def audit_read(
    read: PartitionRead, expected: list[ExpectedBatch], sent: list[tuple[int, float]]
) -> tuple[PartitionVerdict, list[float]]:
    """One group's read of one partition against its acknowledged batches, and its batches'
    end-to-end latencies. Fetch errors that were retried are not failures: what the member
    finally read is audited."""
    verdict = check_partition(
        TopicPartition(read.topic, read.partition),
        expected,
        read.records(),
        read.log_start,
        read.high_watermark,
        read.read_bytes,
        markers=read.marker_list(),
    )
    verdict.problems = [f"group {read.group}: {p}" for p in verdict.problems]
    return verdict, end_to_end_ms(read.runs, sent)


def _quantile(ordered: Sequence[float], q: float) -> float:
    """Linear interpolation between closest ranks (Spark's `percentile`)."""
    if not ordered:
        return 0.0
    position = q * (len(ordered) - 1)
    lo, hi = math.floor(position), math.ceil(position)
    return ordered[lo] + (ordered[hi] - ordered[lo]) * (position - lo)


def e2e_latency(ordered: Sequence[float]) -> E2ELatency:
    return E2ELatency(
        count=len(ordered),
        mean=sum(ordered) / len(ordered) if ordered else 0.0,
        p50=_quantile(ordered, 0.5),
        p90=_quantile(ordered, 0.9),
        p99=_quantile(ordered, 0.99),
        max=ordered[-1] if ordered else 0.0,
    )


def _ratio(a: float, b: float) -> float:
    return a / b if b > 0 else 0.0


def _idle(readers: Sequence[ConsumerResult]) -> IdleConsumers:
    consumers = sum(r.members for r in readers)
    attached = sum(_ratio(r.idle.cpu_s, r.idle.seconds) for r in readers)
    detached = sum(_ratio(r.baseline.cpu_s, r.baseline.seconds) for r in readers)
    fetches_per_s = sum(_ratio(r.idle.fetches, r.idle.seconds) for r in readers)
    return IdleConsumers(
        consumers=consumers,
        seconds=min((r.idle.seconds for r in readers), default=0.0),
        cores_attached=attached,
        cores_detached=detached,
        cores_per_consumer=_ratio(attached - detached, consumers),
        fetches_per_s=fetches_per_s,
        cpu_us_per_fetch=_ratio(attached - detached, fetches_per_s) * 1e6,
        coordinator_calls_per_s=sum(
            _ratio(r.idle.coordinator_calls, r.idle.seconds) for r in readers
        ),
        coordinator_calls_per_s_detached=sum(
            _ratio(r.baseline.coordinator_calls, r.baseline.seconds) for r in readers
        ),
    )


def consume_report(
    spark: SparkSession,
    rows: Sequence[ResultRow],
    tasks: Sequence[TaskStats],
    spec: WorkloadSpec,
    bytes_acked: int,
) -> ConsumeReport | None:
    """The consume phase's report (None: the run had none)."""
    readers = [t.consumer for t in tasks if t.consumer is not None]
    if not readers:
        return None
    batches = [r for r in rows if r.kind == KIND_BATCH]
    acked = [r for r in batches if r.error == 0]
    expected = dict(expected_by_partition(acked, spec))
    sent: dict[TopicPartition, list[tuple[int, float]]] = {tp: [] for tp in expected}
    for row in acked:
        sent[TopicPartition(row.topic, row.partition)].append((row.base_offset, row.send_ts))
    items = [
        (read, expected[tp], sent[tp])
        for reader in readers
        for read in reader.reads
        for tp in [TopicPartition(read.topic, read.partition)]
    ]
    audited: list[tuple[PartitionVerdict, list[float]]] = (
        spark.sparkContext.parallelize(items, max(1, spec.effective_tasks))
        .map(lambda item: audit_read(*item))
        .collect()
    )
    problems = [f"reader of task {r.task}: {r.problem}" for r in readers if r.problem]
    wanted = {(g, tp) for g in range(spec.consumer_groups) for tp in all_partitions(spec)}
    read_by = {(read.group, TopicPartition(read.topic, read.partition)) for read, _, _ in items}
    if wanted - read_by:
        problems.append(f"{len(wanted - read_by)} (group, partition) pairs nobody read")
    verification = summarize([v for v, _ in audited], read_committed=False)
    if problems:
        verification.passed = False
        verification.problems = problems + verification.problems
    latencies = sorted(ms for _, ms_list in audited for ms in ms_list)
    t0 = min((r.send_ts for r in batches), default=min(r.started_ts for r in readers))
    seconds = max(max(r.caught_up_ts for r in readers) - t0, 1e-9)
    bytes_read = sum(read.read_bytes for r in readers for read in r.reads)
    read_cpu = sum(r.consume.cpu_s - r.consume.client_cpu_s for r in readers)
    produce_cpu = sum(t.cpu_s for t in tasks)
    calls = sum(r.consume.coordinator_calls for r in readers)
    by_method: dict[str, int] = {}
    for r in readers:
        for name, count in r.calls_by_method.items():
            by_method[name] = by_method.get(name, 0) + count
    gb_read = bytes_read / GB
    gets = sum(r.consume.gets for r in readers)
    return ConsumeReport(
        groups=spec.consumer_groups,
        members=sum(r.members for r in readers),
        readers=[r.place for r in readers if r.place is not None],
        caught_up=all(r.caught_up for r in readers),
        records=verification.read_records,
        bytes_read=bytes_read,
        seconds=seconds,
        mb_per_s=bytes_read / MB / seconds,
        read_cpu_s=read_cpu,
        client_cpu_s=sum(r.consume.client_cpu_s for r in readers),
        read_mb_per_core=_ratio(bytes_read / MB, read_cpu),
        produce_cpu_s=produce_cpu,
        produce_mb_per_core=_ratio(bytes_acked / MB, produce_cpu),
        e2e_ms=e2e_latency(latencies),
        coordinator_calls=calls,
        coordinator_calls_per_s=calls / seconds,
        coordinator_calls_per_gb=_ratio(calls, gb_read),
        calls_by_method=dict(sorted(by_method.items())),
        gets=gets,
        gets_per_gb=_ratio(gets, gb_read),
        fetches=sum(r.consume.fetches for r in readers),
        polls=sum(r.consume.polls for r in readers),
        fetch_errors=sum(read.errors for r in readers for read in r.reads),
        idle=_idle(readers),
        verification=verification,
        problems=problems,
        e2e_latencies_ms=latencies,
        fetch_wait_ms=spec.fetch_wait_ms,
    )


# --- text and plot ------------------------------------------------------------------------------


def consume_lines(c: ConsumeReport, produce_p99_ms: float) -> list[str]:
    v, e, idle = c.verification, c.e2e_ms, c.idle
    return [
        f"Consume: {c.groups} group(s) read {c.bytes_read / MB:,.1f} MB at {c.mb_per_s:.1f} MB/s "
        f"(first send to caught up); read {c.read_mb_per_core:.1f} MB/s per core vs produce "
        f"{c.produce_mb_per_core:.1f} MB/s per core",
        f"End to end, produce to consume: p50 {e.p50:.1f} ms, p90 {e.p90:.1f} ms, "
        f"p99 {e.p99:.1f} ms, max {e.max:.1f} ms (produce p99 {produce_p99_ms:.1f} ms)",
        f"Coordinator calls while consuming: {c.coordinator_calls_per_s:,.1f}/s, "
        f"{c.coordinator_calls_per_gb:,.0f} per GB read; an idle consumer costs "
        f"{idle.cores_per_consumer:.1%} of a core ({idle.cpu_us_per_fetch:,.0f} us per idle fetch)",
        f"Consume verification: {'PASSED' if v.passed else 'FAILED'} "
        f"({v.read_records:,} records read by {c.groups} group(s), "
        f"{v.expected_records:,} acknowledged across them, {v.partitions_failed} of "
        f"{v.partitions} group-partitions failed)",
    ]


def _holding(c: ConsumeReport) -> str:
    return (
        f"the broker held an empty fetch (min_bytes 1, max_wait {c.fetch_wait_ms} ms) "
        "until data arrived"
    )


def consume_markdown(c: ConsumeReport, produce_p99_ms: float) -> list[str]:
    v, e, idle = c.verification, c.e2e_ms, c.idle
    methods = ", ".join(f"{name} {n:,}" for name, n in c.calls_by_method.items()) or "none"
    return [
        "## Consume phase",
        "",
        f"{c.groups} consumer group(s) read every partition while the producers ran "
        f"(read_uncommitted), {c.members} members in {len(c.readers)} reader process(es), each "
        f"with a broker of its own, fetching through `DisklessBroker.fetch`; {_holding(c)}.",
        "",
        "| records | MB read | seconds | MB/s | read MB/s per core | produce MB/s per core |",
        "|---|---|---|---|---|---|",
        f"| {c.records:,} | {c.bytes_read / MB:,.1f} | {c.seconds:.1f} | {c.mb_per_s:.1f} | "
        f"{c.read_mb_per_core:.1f} | {c.produce_mb_per_core:.1f} |",
        "",
        f"- CPU: reading {c.read_cpu_s:.1f} s (the members' joining and decoding, "
        f"{c.client_cpu_s:.1f} s, left out), producing {c.produce_cpu_s:.1f} s. {CPU_SOURCE}",
        f"- End to end (ms, {e.count:,} group-batches): mean {e.mean:.1f}, p50 {e.p50:.1f}, "
        f"p90 {e.p90:.1f}, p99 {e.p99:.1f}, max {e.max:.1f}; produce p99 {produce_p99_ms:.1f}",
        f"- Coordinator calls by the readers while consuming: {c.coordinator_calls:,} "
        f"({c.coordinator_calls_per_s:,.1f}/s, {c.coordinator_calls_per_gb:,.0f} per GB read): "
        f"{methods}",
        f"- Object GETs: {c.gets:,} ({c.gets_per_gb:,.1f} per GB read); {c.polls:,} consumer "
        f"fetches answered, {c.fetches:,} broker fetches; {c.fetch_errors} fetch errors retried",
        f"- Idle ({idle.seconds:.1f} s each way, nothing produced): {idle.consumers} members "
        f"attached {idle.cores_attached:.1%} of a core, detached {idle.cores_detached:.1%}: "
        f"{idle.cores_per_consumer:.2%} of a core per idle consumer, {idle.fetches_per_s:,.0f} "
        f"fetches/s, {idle.cpu_us_per_fetch:,.0f} us per fetch; coordinator calls "
        f"{idle.coordinator_calls_per_s:,.1f}/s attached, "
        f"{idle.coordinator_calls_per_s_detached:,.1f}/s detached",
        f"- Verification: {'PASSED' if v.passed else 'FAILED'}: {v.partitions} group-partitions; "
        f"{v.read_records:,} records read for {v.expected_records:,} acknowledged, missing "
        f"{v.missing}, mismatched {v.mismatched}, duplicates {v.duplicates}, gaps {v.gaps}, "
        f"order violations {v.order_violations}, present but unacknowledged "
        f"{v.unacknowledged_present}",
        *[f"- problem: {p}" for p in v.problems],
        *[f"- reader: {place}" for place in c.readers],
        "",
        f"Plot: {E2E_PLOT}.",
        "",
    ]


def plot_e2e_cdf(path: Path, e2e_ms: Sequence[float], produce_ms: Sequence[float]) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 4.5))
    series: list[tuple[str, Sequence[float]]] = [
        ("produce to consume", e2e_ms),
        ("produce (request)", produce_ms),
    ]
    for label, values in series:
        n = len(values)
        if n:
            ax.plot([max(v, 0.01) for v in values], [(i + 1) / n for i in range(n)], label=label)
    ax.set_xscale("log")
    ax.set_xlabel("latency (ms, log scale)")
    ax.set_ylabel("fraction")
    ax.set_title("End-to-end latency CDF")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
