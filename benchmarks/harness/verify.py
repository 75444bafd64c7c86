"""Verification: read every partition back through `broker.fetch` and audit it against the acks.

For each partition, every acknowledged record must be present exactly once at its acknowledged
offset (same producer, same producer sequence, same value), offsets must run contiguously from
the log start to the high watermark, no (producer, sequence) may appear twice, and each producer's
records must appear in its sequence order. Records present but never acknowledged (a request
that timed out after its batch was committed) are counted, not failed: Kafka allows them.

The audit (`check_partition`) is a pure function so that tests can tamper with its inputs.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import struct
import zlib
from collections import Counter
from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING, Any, Final, NamedTuple

import msgspec

from benchmarks.harness.coordinators import is_shared
from benchmarks.harness.env import open_broker, open_coordinator, open_store
from benchmarks.harness.placement import TaskPlace, here
from benchmarks.harness.records import kafka_records, parse_record_key, record_value
from benchmarks.harness.spec import RunSpec, WorkloadSpec
from benchmarks.harness.workload import all_partitions, broker_nodes
from diskless import ErrorCode, IsolationLevel, TopicPartition
from diskless.storage import ObjectStore

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

FETCH_BYTES_MAX: Final = 52_428_800
PARTITION_FETCH_BYTES_MAX: Final = 1_048_576
"""Kafka's consumer defaults (fetch.max.bytes, max.partition.fetch.bytes)."""
PROBLEMS_KEPT_MAX: Final = 5
READER_BROKER_ID_BASE: Final = 10_000
"""Read-back brokers get ids far from the workload's, so they fence nobody."""
EMPTY_FETCHES_MAX: Final = 3
_CONTROL_KEY: Final = struct.Struct(">hh")
"""A control record's key: version, type (0 abort, 1 commit)."""


class ExpectedBatch(NamedTuple):
    """An acknowledged batch: its records sit at base_offset .. base_offset + records - 1."""

    base_offset: int
    records: int
    producer_id: int
    producer_seq: int
    value_bytes: int
    wire_producer_id: int = -1
    """The producer id in the batch header (-1: the same as `producer_id`)."""
    visible: bool = True
    """Whether read_committed must show it: idempotent, or its transaction committed."""
    transactional: bool = False
    outcome_known: bool = True
    """False when ending its transaction failed: read_committed may then show it or not."""


class ReadRecord(NamedTuple):
    """One record read back: its offset, its batch's producer id, and its key and value."""

    offset: int
    batch_producer_id: int
    key_producer_id: int
    key_seq: int
    value_bytes: int
    value_ok: bool
    """Whether the value is the deterministic filler of its sequence."""
    transactional: bool = False


class Marker(NamedTuple):
    """A transaction marker (control batch) read back."""

    offset: int
    producer_id: int
    commit: bool


class PartitionVerdict(msgspec.Struct, kw_only=True):
    topic: str
    partition: int
    expected_records: int
    read_records: int
    read_bytes: int
    log_start_offset: int
    high_watermark: int
    missing: int = 0
    mismatched: int = 0
    duplicate_offsets: int = 0
    duplicate_records: int = 0
    gaps: int = 0
    order_violations: int = 0
    overlapping_acks: int = 0
    unacknowledged_present: int = 0
    markers: int = 0
    committed_expected: int = 0
    committed_read: int = 0
    committed_missing: int = 0
    committed_extra: int = 0
    """read_committed showed a record of an aborted transaction or one never acknowledged."""
    read_errors: int = 0
    problems: list[str] = msgspec.field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not (
            self.missing
            or self.mismatched
            or self.duplicate_offsets
            or self.duplicate_records
            or self.gaps
            or self.order_violations
            or self.overlapping_acks
            or self.committed_missing
            or self.committed_extra
            or self.read_errors
        )

    def note(self, problem: str) -> None:
        if len(self.problems) < PROBLEMS_KEPT_MAX:
            self.problems.append(problem)


def check_partition(
    tp: TopicPartition,
    expected: Iterable[ExpectedBatch],
    records: list[ReadRecord],
    log_start_offset: int,
    high_watermark: int,
    read_bytes: int = 0,
    read_errors: int = 0,
    markers: Sequence[Marker] = (),
    committed: list[ReadRecord] | None = None,
) -> PartitionVerdict:
    """Audit one partition's read-back records against its acknowledged batches.

    `records` and `markers` come from a read_uncommitted read; `committed`, when given, is what
    a read_committed read showed after Kafka's client-side filtering of aborted transactions.
    """
    verdict = PartitionVerdict(
        topic=tp.topic,
        partition=tp.partition,
        expected_records=0,
        read_records=len(records),
        read_bytes=read_bytes,
        log_start_offset=log_start_offset,
        high_watermark=high_watermark,
        read_errors=read_errors,
    )
    if read_errors:
        verdict.note(f"{read_errors} fetch errors")
    # What the acks promise, offset by offset.
    promised: dict[int, tuple[int, int, int, int]] = {}
    visible: set[int] = set()
    unknown: set[int] = set()
    for batch in expected:
        wire = batch.wire_producer_id if batch.wire_producer_id >= 0 else batch.producer_id
        for i in range(batch.records):
            offset = batch.base_offset + i
            if offset in promised:
                verdict.overlapping_acks += 1
                verdict.note(f"offset {offset} acknowledged twice")
            promised[offset] = (batch.producer_id, batch.producer_seq + i, batch.value_bytes, wire)
            if not batch.outcome_known:
                unknown.add(offset)
            elif batch.visible:
                visible.add(offset)
    verdict.expected_records = len(promised)
    verdict.markers = len(markers)

    by_offset: dict[int, ReadRecord] = {}
    for record in records:
        if record.offset in by_offset:
            verdict.duplicate_offsets += 1
            verdict.note(f"offset {record.offset} read twice")
        by_offset[record.offset] = record
    # Contiguity: exactly the offsets [log start, high watermark), each once (markers included).
    for marker in markers:
        if marker.offset in by_offset:
            verdict.duplicate_offsets += 1
            verdict.note(f"offset {marker.offset} holds a record and a marker")
    present = sorted(set(by_offset) | {m.offset for m in markers})
    if present and (present[0] != log_start_offset or present[-1] != high_watermark - 1):
        verdict.gaps += 1
        verdict.note(
            f"read offsets {present[0]}..{present[-1]}, log is "
            f"{log_start_offset}..{high_watermark - 1}"
        )
    if not present and high_watermark > log_start_offset:
        verdict.gaps += 1
        verdict.note(f"nothing read, log is {log_start_offset}..{high_watermark - 1}")
    for previous, current in itertools.pairwise(present):
        if current != previous + 1:
            verdict.gaps += 1
            verdict.note(f"gap between offsets {previous} and {current}")

    for offset, (producer_id, seq, value_bytes, wire) in promised.items():
        found = by_offset.get(offset)
        if found is None:
            verdict.missing += 1
            verdict.note(f"acknowledged offset {offset} (producer {producer_id} #{seq}) missing")
        elif (
            found.batch_producer_id != wire
            or found.key_producer_id != producer_id
            or found.key_seq != seq
            or found.value_bytes != value_bytes
            or not found.value_ok
        ):
            verdict.mismatched += 1
            verdict.note(
                f"offset {offset}: expected producer {producer_id} #{seq}, read producer "
                f"{found.key_producer_id} #{found.key_seq} (value ok: {found.value_ok})"
            )
    verdict.unacknowledged_present = sum(1 for offset in by_offset if offset not in promised)

    identities = Counter((r.key_producer_id, r.key_seq) for r in by_offset.values())
    for (producer_id, seq), count in identities.items():
        if count > 1:
            verdict.duplicate_records += count - 1
            verdict.note(f"producer {producer_id} #{seq} stored {count} times")
    last_seq: dict[int, int] = {}
    for offset in sorted(by_offset):
        record = by_offset[offset]
        previous_seq = last_seq.get(record.key_producer_id)
        if previous_seq is not None and record.key_seq <= previous_seq:
            verdict.order_violations += 1
            verdict.note(
                f"offset {offset}: producer {record.key_producer_id} #{record.key_seq} "
                f"after #{previous_seq}"
            )
        last_seq[record.key_producer_id] = record.key_seq
    if committed is not None:
        _check_committed(
            verdict, [r for r in committed if r.offset not in unknown], visible, by_offset
        )
    return verdict


def _check_committed(
    verdict: PartitionVerdict,
    committed: list[ReadRecord],
    visible: set[int],
    uncommitted: dict[int, ReadRecord],
) -> None:
    """read_committed must show exactly the acknowledged idempotent and committed records."""
    shown = {r.offset: r for r in committed}
    verdict.committed_expected = len(visible)
    verdict.committed_read = len(shown)
    for offset in sorted(visible - shown.keys()):
        verdict.committed_missing += 1
        verdict.note(f"read_committed misses acknowledged committed offset {offset}")
    for offset in sorted(shown.keys() - visible):
        record = uncommitted.get(offset)
        if record is not None and not record.transactional and offset not in visible:
            # an unacknowledged idempotent record (a timed-out request that did commit)
            continue
        verdict.committed_extra += 1
        verdict.note(f"read_committed shows offset {offset}, aborted or never acknowledged")


def decode_records(blob: bytes) -> tuple[list[ReadRecord], int, list[Marker]]:
    """Records of fetched bytes (kafka-python decodes them), the next offset to fetch, and the
    transaction markers met."""
    _, memory_records = kafka_records()
    out: list[ReadRecord] = []
    markers: list[Marker] = []
    next_offset = -1
    records = memory_records(blob)
    while True:
        batch = records.next_batch()
        if batch is None:
            break
        if not batch.validate_crc():
            raise ValueError(f"CRC mismatch in batch at offset {batch.base_offset}")
        next_offset = max(next_offset, batch.base_offset + batch.last_offset_delta + 1)
        producer_id = batch.producer_id
        if batch.is_control_batch:
            for record in batch:
                _, control_type = _CONTROL_KEY.unpack(bytes(record.key)[: _CONTROL_KEY.size])
                markers.append(Marker(record.offset, producer_id, control_type == 1))
            continue
        transactional = bool(batch.is_transactional)
        for record in batch:
            key_producer, seq = parse_record_key(bytes(record.key))
            value = bytes(record.value) if record.value is not None else b""
            out.append(
                ReadRecord(
                    record.offset,
                    producer_id,
                    key_producer,
                    seq,
                    len(value),
                    value == record_value(len(value), seq),
                    transactional,
                )
            )
    return out, next_offset, markers


def committed_view(
    records: list[ReadRecord], markers: list[Marker], aborted: list[tuple[int, int]]
) -> list[ReadRecord]:
    """What a Kafka consumer delivers under read_committed: records of a producer are dropped
    from an aborted transaction's first offset up to that producer's ABORT marker."""
    starts = sorted((first, producer) for producer, first in aborted)
    events = sorted(
        [(r.offset, 0, r) for r in records] + [(m.offset, 1, m) for m in markers],
        key=lambda event: event[0],
    )
    active: set[int] = set()
    shown: list[ReadRecord] = []
    next_start = 0
    for offset, kind, item in events:
        while next_start < len(starts) and starts[next_start][0] <= offset:
            active.add(starts[next_start][1])
            next_start += 1
        if kind == 1:
            assert isinstance(item, Marker)
            if not item.commit:
                active.discard(item.producer_id)
            continue
        assert isinstance(item, ReadRecord)
        if item.transactional and item.batch_producer_id in active:
            continue
        shown.append(item)
    return shown


class _Cursor:
    """Where a partition's read-back stands."""

    __slots__ = (
        "aborted",
        "empty",
        "high_watermark",
        "last_stable",
        "log_start",
        "markers",
        "offset",
        "read_bytes",
        "records",
    )

    def __init__(self) -> None:
        self.offset = 0
        self.high_watermark = -1
        self.last_stable = -1
        self.log_start = 0
        self.read_bytes = 0
        self.records: list[ReadRecord] = []
        self.markers: list[Marker] = []
        self.aborted: list[tuple[int, int]] = []
        self.empty = 0


async def read_partitions(
    broker: Any,
    partitions: list[TopicPartition],
    isolation: IsolationLevel = IsolationLevel.READ_UNCOMMITTED,
) -> dict[TopicPartition, _Cursor | str]:
    """Read partitions from their start to their high watermark (read_committed: to their last
    stable offset), all in each fetch, as one consumer does (FETCH_BYTES_MAX per fetch,
    PARTITION_FETCH_BYTES_MAX per partition).

    A partition's answer is its cursor, or an error message when it could not be read. Records
    below the requested offset (a batch may start earlier) are dropped, as a client does.
    """
    cursors = {tp: _Cursor() for tp in partitions}
    out: dict[TopicPartition, _Cursor | str] = {}
    while cursors:
        answers = await broker.fetch(
            {tp: c.offset for tp, c in cursors.items()},
            max_bytes=FETCH_BYTES_MAX,
            partition_max_bytes=PARTITION_FETCH_BYTES_MAX,
            isolation_level=isolation,
        )
        for tp, cursor in list(cursors.items()):
            answer = answers[tp]
            if answer.error != ErrorCode.NONE:
                out[tp] = f"fetch at {cursor.offset}: {ErrorCode(answer.error).name}"
                del cursors[tp]
                continue
            cursor.high_watermark = answer.high_watermark
            cursor.last_stable = answer.last_stable_offset
            cursor.log_start = answer.log_start_offset
            end = (
                answer.last_stable_offset
                if isolation == IsolationLevel.READ_COMMITTED
                else answer.high_watermark
            )
            if cursor.offset >= end:
                out[tp] = cursors.pop(tp)
                continue
            cursor.read_bytes += len(answer.records)
            cursor.aborted.extend(tuple(a) for a in answer.aborted_transactions)
            try:
                records, next_offset, markers = decode_records(answer.records)
            except ValueError as exc:
                out[tp] = f"fetch at {cursor.offset}: {exc}"
                del cursors[tp]
                continue
            cursor.records.extend(r for r in records if r.offset >= cursor.offset)
            cursor.markers.extend(m for m in markers if m.offset >= cursor.offset)
            if next_offset > cursor.offset:
                cursor.offset = next_offset
                cursor.empty = 0
            elif not answer.records:
                cursor.empty += 1
                if cursor.empty >= EMPTY_FETCHES_MAX:
                    out[tp] = f"fetch at {cursor.offset} < end {end}: no data"
                    del cursors[tp]
    return out


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

    keyed = joined.rdd.map(lambda row: (_spread(row.topic, row.partition, tasks), row))
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


def _spread(topic: str, partition: int, tasks: int) -> int:
    """A stable task for a partition (Python's str hash differs between worker processes)."""
    return zlib.crc32(f"{topic}-{partition}".encode()) % tasks
