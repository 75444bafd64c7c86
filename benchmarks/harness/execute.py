"""Execution: each Spark task runs its racks' brokers and its producers on one asyncio loop.

A task receives every batch row of its producers (a producer belongs to exactly one task, so its
sequences are numbered in one place), builds the record batches with kafka-python, starts its
brokers against the shared store and coordinator, and lets each producer pipeline its requests
(`max_in_flight` outstanding per destination broker, sent in sequence order). It returns one row
per batch with its timing and result, and one `task` row carrying the task's counters as JSON.
"""

from __future__ import annotations

import asyncio
import contextlib
import struct
import time
import warnings
from collections.abc import Iterable, Iterator
from typing import TYPE_CHECKING, Any, Final, NamedTuple

import msgspec

from benchmarks.harness.env import (
    LatencyLog,
    create_topics,
    open_broker,
    open_coordinator,
    open_store,
)
from benchmarks.harness.spec import RunSpec, WorkloadSpec
from benchmarks.harness.workload import WorkloadRow, brokers_of_task
from diskless import ErrorCode, TopicPartition

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession
    from pyspark.sql.types import StructType

RESULT_COLUMNS: Final = (
    ("kind", "string"),
    ("task", "int"),
    ("request_id", "long"),
    ("producer_id", "long"),
    ("broker_id", "int"),
    ("topic", "string"),
    ("partition", "int"),
    ("records", "int"),
    ("batch_bytes", "int"),
    ("value_bytes", "int"),
    ("producer_seq", "long"),
    ("base_sequence", "int"),
    ("send_ts", "double"),
    ("ack_ts", "double"),
    ("latency_ms", "double"),
    ("error", "int"),
    ("error_message", "string"),
    ("base_offset", "long"),
    ("stats_json", "string"),
)
KIND_BATCH: Final = "batch"
KIND_TASK: Final = "task"
SEND_FAILED: Final = int(ErrorCode.UNKNOWN_SERVER_ERROR)
_KEY: Final = struct.Struct(">qq")
_FILLER: Final = bytes(range(256)) * 1024


class ResultRow(NamedTuple):
    kind: str
    task: int
    request_id: int
    producer_id: int
    broker_id: int
    topic: str
    partition: int
    records: int
    batch_bytes: int
    value_bytes: int
    producer_seq: int
    base_sequence: int
    send_ts: float
    ack_ts: float
    latency_ms: float
    error: int
    error_message: str | None
    base_offset: int
    stats_json: str | None


assert tuple(ResultRow._fields) == tuple(name for name, _ in RESULT_COLUMNS)


def record_key(producer_id: int, producer_seq: int) -> bytes:
    return _KEY.pack(producer_id, producer_seq)


def parse_record_key(key: bytes) -> tuple[int, int]:
    producer_id, producer_seq = _KEY.unpack(key)
    return producer_id, producer_seq


def record_value(value_bytes: int, producer_seq: int) -> bytes:
    """Deterministic filler: a record's value starts at its sequence's place in a 256-cycle."""
    start = producer_seq % 256
    return _FILLER[start : start + value_bytes]


def kafka_records() -> tuple[Any, Any]:
    """kafka-python's (DefaultRecordBatchBuilder, MemoryRecords): the independent codec.

    Importing `kafka` the first time loads its protocol schemas through a deprecated
    `importlib.resources` call; that one warning is silenced here.
    """
    with warnings.catch_warnings():
        warnings.filterwarnings(
            "ignore", message=r"(read|open)_text is deprecated", category=DeprecationWarning
        )
        from kafka.record import MemoryRecords
        from kafka.record.default_records import DefaultRecordBatchBuilder
    return DefaultRecordBatchBuilder, MemoryRecords


def build_batch(row: WorkloadRow, timestamp_ms: int) -> bytes:
    """The record batch of a workload row, built by kafka-python (an independent codec)."""
    builder_class, _ = kafka_records()
    builder = builder_class(
        magic=2,
        compression_type=0,
        is_transactional=False,
        producer_id=row.producer_id,
        producer_epoch=row.producer_epoch,
        base_sequence=row.base_sequence,
        batch_size=1 << 30,
    )
    for i in range(row.records):
        seq = row.producer_seq + i
        builder.append(
            i,
            timestamp=timestamp_ms,
            key=record_key(row.producer_id, seq),
            value=record_value(row.value_bytes, seq),
            headers=[],
        )
    return bytes(builder.build())


class _Request(NamedTuple):
    request_id: int
    broker_id: int
    send_offset_ms: float
    rows: list[WorkloadRow]
    batches: dict[TopicPartition, bytes]


class TaskStats(msgspec.Struct, kw_only=True):
    """What a task reports besides its batch rows."""

    task: int
    brokers: list[int]
    producers: int
    requests_planned: int
    requests_sent: int
    build_s: float
    started_ts: float
    ended_ts: float
    put_ms: list[float]
    put_bytes: list[int]
    commit_ms: list[float]
    commit_batches: list[int]
    store: dict[str, int]
    broker_stats: dict[str, Any]
    audit: Any = None
    """In-memory coordinator runs only: (verdicts, read store counters) of the in-task audit."""


def run_task(
    task: int, rows: Iterable[WorkloadRow], spec: WorkloadSpec, run: RunSpec
) -> list[ResultRow]:
    """Run one task's share of the workload to completion (blocking; its own event loop)."""
    return asyncio.run(_run_task(task, list(rows), spec, run))


async def _run_task(
    task: int, rows: list[WorkloadRow], spec: WorkloadSpec, run: RunSpec
) -> list[ResultRow]:
    build_started = time.perf_counter()
    timestamp_ms = int(time.time() * 1000)
    by_producer: dict[int, list[_Request]] = {}
    rows.sort(key=lambda r: (r.request_id, r.topic, r.partition))
    for request_id, group in _group_by_request(rows):
        first = group[0]
        assert first.task == task, (first.task, task)
        batches = {
            TopicPartition(r.topic, r.partition): build_batch(r, timestamp_ms) for r in group
        }
        assert len(batches) == len(group), "a request holds one batch per partition"
        by_producer.setdefault(first.producer_index, []).append(
            _Request(request_id, first.broker_id, first.send_offset_ms, group, batches)
        )
    build_s = time.perf_counter() - build_started

    puts, commits = LatencyLog(), LatencyLog()
    store = open_store(run.store, puts)
    coordinator = open_coordinator(run, commits)
    nodes = brokers_of_task(spec, task)
    if not run.coordinator_path:  # a private in-memory coordinator starts empty
        await create_topics(coordinator, spec)
    results: list[ResultRow] = []
    sent = 0
    async with contextlib.AsyncExitStack() as stack:
        stack.push_async_callback(store.close)
        stack.push_async_callback(coordinator.close)
        brokers: dict[int, Any] = {}
        for node in nodes:
            broker = open_broker(node.broker_id, node.rack or "", store, coordinator, run)
            brokers[node.broker_id] = await stack.enter_async_context(broker)
        store_before = store.stats()
        started_ts = time.time()
        started = time.perf_counter()
        deadline = started + spec.duration_s
        counts = await asyncio.gather(
            *(
                _run_producer(task, requests, brokers, spec, started, deadline, results)
                for requests in by_producer.values()
            )
        )
        sent = sum(counts)
        ended_ts = time.time()
        store_used = store.stats().minus(store_before)
        broker_stats = {str(bid): _stats_of(b) for bid, b in brokers.items()}
        audit_result = None
        if not run.coordinator_path:  # nobody else can see this coordinator: audit here
            audit_result = await _audit_in_task(results, spec, store, brokers)
    stats = TaskStats(
        task=task,
        brokers=sorted(brokers),
        producers=len(by_producer),
        requests_planned=sum(len(reqs) for reqs in by_producer.values()),
        requests_sent=sent,
        build_s=build_s,
        started_ts=started_ts,
        ended_ts=ended_ts,
        put_ms=puts.ms,
        put_bytes=puts.sizes,
        commit_ms=commits.ms,
        commit_batches=commits.sizes,
        store=msgspec.structs.asdict(store_used),
        broker_stats=broker_stats,
        audit=audit_result,
    )
    results.append(_task_row(task, stats))
    return results


async def _audit_in_task(
    results: list[ResultRow], spec: WorkloadSpec, store: Any, brokers: dict[int, Any]
) -> Any:
    from benchmarks.harness.verify import audit, expected_by_partition

    acked = [r for r in results if r.kind == KIND_BATCH and r.error == 0]
    groups = expected_by_partition(acked, spec)
    return await audit(next(iter(brokers.values())), store, groups)


def _group_by_request(rows: list[WorkloadRow]) -> Iterator[tuple[int, list[WorkloadRow]]]:
    group: list[WorkloadRow] = []
    for row in rows:
        if group and group[0].request_id != row.request_id:
            yield group[0].request_id, group
            group = []
        group.append(row)
    if group:
        yield group[0].request_id, group


async def _run_producer(
    task: int,
    requests: list[_Request],
    brokers: dict[int, Any],
    spec: WorkloadSpec,
    started: float,
    deadline: float,
    out: list[ResultRow],
) -> int:
    """Send a producer's requests in order, `max_in_flight` outstanding per broker; count sent.

    Requests are handed to the broker in sequence order: each send is a task created in order,
    and asyncio starts tasks first come first served.
    """
    slots = {broker_id: asyncio.Semaphore(spec.max_in_flight) for broker_id in brokers}
    pending: set[asyncio.Task[None]] = set()
    sent = 0
    for request in requests:
        if request.send_offset_ms >= 0:
            delay = started + request.send_offset_ms / 1000.0 - time.perf_counter()
            if delay > 0:
                await asyncio.sleep(delay)
        slot = slots[request.broker_id]
        await slot.acquire()
        if time.perf_counter() >= deadline:
            slot.release()
            break
        sending = asyncio.create_task(_send(task, request, brokers[request.broker_id], spec, out))
        sending.add_done_callback(lambda _, slot=slot: slot.release())  # type: ignore[misc]
        pending.add(sending)
        sending.add_done_callback(pending.discard)
        sent += 1
    if pending:
        await asyncio.gather(*pending)
    return sent


async def _send(
    task: int, request: _Request, broker: Any, spec: WorkloadSpec, out: list[ResultRow]
) -> None:
    send_ts = time.time()
    started = time.perf_counter()
    try:
        answers = await broker.produce(request.batches, acks=spec.acks, timeout_ms=spec.timeout_ms)
        failure: str | None = None
    except Exception as exc:  # an infrastructure failure fails every batch of the request
        answers, failure = {}, f"{type(exc).__name__}: {exc}"
    latency_ms = (time.perf_counter() - started) * 1000.0
    ack_ts = send_ts + latency_ms / 1000.0
    for row in request.rows:
        tp = TopicPartition(row.topic, row.partition)
        answer = answers.get(tp)
        if answer is None:
            error, message, base_offset = SEND_FAILED, failure or "no result", -1
        else:
            error, message = int(answer.error), answer.error_message
            base_offset = answer.base_offset if error == 0 else -1
        out.append(
            ResultRow(
                kind=KIND_BATCH,
                task=task,
                request_id=request.request_id,
                producer_id=row.producer_id,
                broker_id=request.broker_id,
                topic=row.topic,
                partition=row.partition,
                records=row.records,
                batch_bytes=len(request.batches[tp]),
                value_bytes=row.value_bytes,
                producer_seq=row.producer_seq,
                base_sequence=row.base_sequence,
                send_ts=send_ts,
                ack_ts=ack_ts,
                latency_ms=latency_ms,
                error=error,
                error_message=message,
                base_offset=base_offset,
                stats_json=None,
            )
        )


def _stats_of(broker: Any) -> Any:
    """A broker's own stats as JSON-able data, if it exposes any."""
    stats = getattr(broker, "stats", None)
    if stats is None:
        return None
    try:
        return msgspec.to_builtins(stats() if callable(stats) else stats)
    except (TypeError, msgspec.EncodeError):
        return repr(stats)


def _task_row(task: int, stats: TaskStats) -> ResultRow:
    return ResultRow(
        kind=KIND_TASK,
        task=task,
        request_id=-1,
        producer_id=-1,
        broker_id=-1,
        topic="",
        partition=-1,
        records=0,
        batch_bytes=0,
        value_bytes=0,
        producer_seq=-1,
        base_sequence=-1,
        send_ts=stats.started_ts,
        ack_ts=stats.ended_ts,
        latency_ms=0.0,
        error=0,
        error_message=None,
        base_offset=-1,
        stats_json=msgspec.json.encode(stats).decode(),
    )


def task_stats(row: Any) -> TaskStats:
    return msgspec.json.decode(row.stats_json, type=TaskStats)


def task_audit(stats: TaskStats) -> Any:
    """The in-task audit of an in-memory coordinator run, decoded: (verdicts, store counters)."""
    from benchmarks.harness.verify import PartitionVerdict

    if stats.audit is None:
        return None
    verdicts, store_stats = stats.audit
    return msgspec.convert(verdicts, list[PartitionVerdict]), dict(store_stats)


# --- Spark ----------------------------------------------------------------------------------


def result_schema() -> StructType:
    from pyspark.sql.types import StructType

    schema = StructType.fromDDL(", ".join(f"{name} {kind}" for name, kind in RESULT_COLUMNS))
    assert isinstance(schema, StructType)
    return schema


def execute(
    spark: SparkSession, workload: DataFrame, spec: WorkloadSpec, run: RunSpec
) -> list[ResultRow]:
    """Run the workload: one Spark partition per task, each task its producers and brokers.

    The rows are collected once: re-evaluating a lazy result would run the benchmark again.
    """
    tasks = spec.effective_tasks

    def run_partition(index: int, items: Iterable[tuple[int, tuple[Any, ...]]]) -> list[ResultRow]:
        rows = [WorkloadRow(*values) for _, values in items]
        return run_task(index, rows, spec, run) if index < tasks else []

    keyed = workload.rdd.map(lambda row: (int(row.task), tuple(row)))
    collected = keyed.partitionBy(tasks, lambda task: task).mapPartitionsWithIndex(run_partition)
    rows = [ResultRow(*row) for row in collected.collect()]
    assert sum(1 for r in rows if r.kind == KIND_TASK) == tasks, "every task reports once"
    return rows


def results_frame(spark: SparkSession, rows: list[ResultRow]) -> DataFrame:
    return spark.createDataFrame(rows, result_schema())


def describe_errors(rows: Iterable[ResultRow]) -> dict[str, int]:
    """Batches per error name, for the report."""
    counts: dict[str, int] = {}
    for row in rows:
        if row.kind == KIND_BATCH and row.error != 0:
            name = ErrorCode(row.error).name if row.error in ErrorCode._value2member_map_ else ""
            label = name or str(row.error)
            counts[label] = counts.get(label, 0) + 1
    return dict(sorted(counts.items()))
