"""Verification: read every partition back through `broker.fetch` in Spark tasks and audit it
against the acks (`audit`), partition by partition; the run passes only if every partition
does."""

from __future__ import annotations

import asyncio
import contextlib
import zlib
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any, Final

import msgspec

from benchmarks.harness.audit import ExpectedBatch, PartitionVerdict, ReadRecord, check_partition
from benchmarks.harness.coordinators import is_shared
from benchmarks.harness.env import open_broker, open_coordinator, open_store
from benchmarks.harness.placement import TaskPlace, here
from benchmarks.harness.readback import committed_view, read_partitions
from benchmarks.harness.spec import RunSpec, WorkloadSpec
from benchmarks.harness.workload import all_partitions, broker_nodes
from diskless import IsolationLevel, TopicPartition
from diskless.storage import ObjectStore

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

READER_BROKER_ID_BASE: Final = 10_000
"""Read-back brokers get ids far from the workload's, so they fence nobody."""


Groups = list[tuple[TopicPartition, list[ExpectedBatch]]]


def verify_task(
    task: int, groups: Groups, spec: WorkloadSpec, run: RunSpec
) -> tuple[list[PartitionVerdict], dict[str, int]]:
    """Read back and audit `groups`; also return the task's object-store counters."""
    return asyncio.run(_verify_task(task, groups, spec, run))


async def _verify_task(
    task: int, groups: Groups, spec: WorkloadSpec, run: RunSpec
) -> tuple[list[PartitionVerdict], dict[str, int]]:
    store = open_store(run.store)
    coordinator = open_coordinator(run)
    rack = broker_nodes(spec)[task % spec.brokers].rack or ""
    async with contextlib.AsyncExitStack() as stack:
        stack.push_async_callback(store.close)
        stack.push_async_callback(coordinator.close)
        broker = await stack.enter_async_context(
            open_broker(READER_BROKER_ID_BASE + task, rack, store, coordinator, run)
        )
        return await audit(broker, store, groups)


async def audit(
    broker: Any, store: ObjectStore, groups: Groups
) -> tuple[list[PartitionVerdict], dict[str, int]]:
    """Read `groups` back through `broker` and audit each; also the store requests of the first
    (read_uncommitted) full read.

    When any acknowledged batch is transactional, the partitions are read a second time with
    read_committed and that view is audited too.
    """
    before = store.stats()
    partitions = [tp for tp, _ in groups]
    read = await read_partitions(broker, partitions)
    first_read = store.stats().minus(before)  # the cost model prices one full read
    transactional = any(b.transactional for _, batches in groups for b in batches)
    committed = (
        await read_partitions(broker, partitions, IsolationLevel.READ_COMMITTED)
        if transactional
        else {}
    )
    verdicts: list[PartitionVerdict] = []
    for tp, expected in groups:
        cursor = read[tp]
        if isinstance(cursor, str):
            verdict = check_partition(tp, expected, [], 0, 0, read_errors=1)
            verdict.note(cursor)
            verdicts.append(verdict)
            continue
        view: list[ReadRecord] | None = None
        problem = None
        if transactional:
            rc = committed[tp]
            if isinstance(rc, str):
                problem = f"read_committed: {rc}"
            else:
                view = committed_view(rc.records, rc.markers, rc.aborted)
                if rc.last_stable != rc.high_watermark:
                    problem = f"last stable offset {rc.last_stable} < hw {rc.high_watermark}"
        verdict = check_partition(
            tp,
            expected,
            cursor.records,
            cursor.log_start,
            cursor.high_watermark,
            cursor.read_bytes,
            read_errors=1 if problem else 0,
            markers=cursor.markers,
            committed=view,
        )
        if problem:
            verdict.note(problem)
        verdicts.append(verdict)
    return verdicts, msgspec.structs.asdict(first_read)


class Verification(msgspec.Struct, kw_only=True):
    passed: bool
    partitions: int
    partitions_failed: int
    expected_records: int
    read_records: int
    read_bytes: int
    unacknowledged_present: int
    missing: int
    mismatched: int
    duplicates: int
    gaps: int
    order_violations: int
    markers: int = 0
    read_committed_checked: bool = False
    committed_expected: int = 0
    committed_read: int = 0
    committed_missing: int = 0
    committed_extra: int = 0
    problems: list[str]
    store: dict[str, int]
    verdicts: list[PartitionVerdict]
    readers: list[TaskPlace] = msgspec.field(default_factory=list)
    """Where the read-back tasks ran."""


def summarize(
    verdicts: list[PartitionVerdict],
    store_stats: Iterable[dict[str, int]] = (),
    read_committed: bool = False,
    readers: Iterable[TaskPlace] = (),
) -> Verification:
    """The run's verdict: passed only if every partition was read and audited clean."""
    real = list(verdicts)
    store: dict[str, int] = {}
    for stats in store_stats:
        for name, value in stats.items():
            store[name] = store.get(name, 0) + value
    failed = [v for v in real if not v.ok]
    problems = [f"{v.topic}-{v.partition}: {p}" for v in failed for p in v.problems][:20]
    return Verification(
        passed=bool(real) and not failed,
        partitions=len(real),
        partitions_failed=len(failed),
        expected_records=sum(v.expected_records for v in real),
        read_records=sum(v.read_records for v in real),
        read_bytes=sum(v.read_bytes for v in real),
        unacknowledged_present=sum(v.unacknowledged_present for v in real),
        missing=sum(v.missing for v in real),
        mismatched=sum(v.mismatched for v in real),
        duplicates=sum(v.duplicate_offsets + v.duplicate_records for v in real),
        gaps=sum(v.gaps for v in real),
        order_violations=sum(v.order_violations for v in real),
        markers=sum(v.markers for v in real),
        read_committed_checked=read_committed,
        committed_expected=sum(v.committed_expected for v in real),
        committed_read=sum(v.committed_read for v in real),
        committed_missing=sum(v.committed_missing for v in real),
        committed_extra=sum(v.committed_extra for v in real),
        problems=problems,
        store=store,
        verdicts=sorted(real, key=lambda v: (v.topic, v.partition)),
        readers=list(readers),
    )


def expected_batch(row: Any) -> ExpectedBatch:
    """An acknowledged result row as the audit expects it."""
    return ExpectedBatch(
        row.base_offset,
        row.records,
        row.producer_id,
        row.producer_seq,
        row.value_bytes,
        row.wire_producer_id,
        row.txn_index < 0 or row.txn_outcome == 1,
        row.txn_index >= 0,
        row.txn_index < 0 or row.txn_outcome in (0, 1),
    )


def expected_by_partition(
    acked: Iterable[Any], spec: WorkloadSpec
) -> list[tuple[TopicPartition, list[ExpectedBatch]]]:
    """Every partition of the workload with its acknowledged batches (local, for tests)."""
    groups: dict[TopicPartition, list[ExpectedBatch]] = {tp: [] for tp in all_partitions(spec)}
    for row in acked:
        groups[TopicPartition(row.topic, row.partition)].append(expected_batch(row))
    return list(groups.items())


def verify(
    spark: SparkSession,
    results: DataFrame,
    spec: WorkloadSpec,
    run: RunSpec,
    in_task: tuple[list[PartitionVerdict], dict[str, int]] | None = None,
) -> Verification:
    """The read-back job: partitions spread over Spark tasks, each auditing its own.

    An in-memory coordinator lives only in its execution task, so such a (single-task) run was
    read back and audited there, through one of its brokers; `in_task` holds those results.
    """
    from pyspark.sql import functions as F

    if not is_shared(run.coordinator):
        if in_task is None:
            raise ValueError("an in-memory coordinator run must be audited in its task")
        verdicts, store_stats = in_task
        return summarize(verdicts, [store_stats], spec.transactional_share > 0)

    tasks = spec.effective_tasks
    acked = results.filter((F.col("kind") == "batch") & (F.col("error") == 0))
    expected = acked.groupBy("topic", "partition").agg(
        F.collect_list(
            F.struct(
                "base_offset",
                "records",
                "producer_id",
                "producer_seq",
                "value_bytes",
                "wire_producer_id",
                ((F.col("txn_index") < 0) | (F.col("txn_outcome") == 1)).alias("visible"),
                (F.col("txn_index") >= 0).alias("transactional"),
                ((F.col("txn_index") < 0) | F.col("txn_outcome").isin(0, 1)).alias("outcome_known"),
            )
        ).alias("batches")
    )
    everything = spark.createDataFrame(
        [(tp.topic, tp.partition) for tp in all_partitions(spec)], "topic string, partition int"
    )
    joined = everything.join(expected, ["topic", "partition"], "left")

    def run_partition(index: int, rows: Iterable[Any]) -> list[tuple[str, Any]]:
        groups = [
            (
                TopicPartition(row.topic, row.partition),
                [ExpectedBatch(*b) for b in (row.batches or [])],
            )
            for row in rows
        ]
        verdicts, store_stats = verify_task(index, groups, spec, run)
        return [("verdict", v) for v in verdicts] + [("store", store_stats), ("place", here())]

    keyed = joined.rdd.map(lambda row: (spread(row.topic, row.partition, tasks), row))
    out = (
        keyed.partitionBy(tasks, lambda key: key)
        .map(lambda pair: pair[1])
        .mapPartitionsWithIndex(run_partition)
        .collect()
    )
    return summarize(
        [payload for kind, payload in out if kind == "verdict"],
        [payload for kind, payload in out if kind == "store"],
        spec.transactional_share > 0,
        [payload for kind, payload in out if kind == "place"],
    )


def spread(topic: str, partition: int, tasks: int) -> int:
    """A stable task for a partition (Python's str hash differs between worker processes)."""
    return zlib.crc32(f"{topic}-{partition}".encode()) % tasks
