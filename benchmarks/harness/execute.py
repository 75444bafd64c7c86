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
import time
from collections.abc import Iterable, Iterator
from typing import TYPE_CHECKING, Any, Final, NamedTuple

import msgspec

from benchmarks.harness.audit import PartitionVerdict
from benchmarks.harness.consume import announce_done, consuming, reader_beside
from benchmarks.harness.consumer import ConsumerResult
from benchmarks.harness.coordinators import is_shared
from benchmarks.harness.env import (
    LatencyLog,
    create_topics,
    open_broker,
    open_coordinator,
    open_store,
)
from benchmarks.harness.placement import TaskPlace, here
from benchmarks.harness.records import build_batch
from benchmarks.harness.spec import RunSpec, WorkloadSpec
from benchmarks.harness.verify import audit, expected_by_partition
from benchmarks.harness.workload import WorkloadRow, brokers_of_task
from diskless import ErrorCode, TopicPartition
from diskless.txn import TransactionCoordinator

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
    ("wire_producer_id", "long"),
    ("producer_epoch", "int"),
    ("txn_index", "int"),
    ("txn_outcome", "int"),
    ("stats_json", "string"),
)
KIND_BATCH: Final = "batch"
KIND_TASK: Final = "task"
SEND_FAILED: Final = int(ErrorCode.UNKNOWN_SERVER_ERROR)
TXN_NONE: Final = -1
TXN_ABORTED: Final = 0
TXN_COMMITTED: Final = 1
TXN_UNKNOWN: Final = 2
TXN_TIMEOUT_MS: Final = 60_000


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
    wire_producer_id: int
    """The producer id in the batch header: the workload's for idempotent producers, the one
    InitProducerId handed out for transactional ones (`producer_id` stays the workload's)."""
    producer_epoch: int
    txn_index: int
    txn_outcome: int
    """TXN_NONE (idempotent), TXN_COMMITTED, TXN_ABORTED, or TXN_UNKNOWN (the end failed)."""
    stats_json: str | None


assert tuple(ResultRow._fields) == tuple(name for name, _ in RESULT_COLUMNS)


class _Request(NamedTuple):
    request_id: int
    broker_id: int
    send_offset_ms: float
    rows: list[WorkloadRow]
    batches: dict[TopicPartition, bytes]
    wire_producer_id: int
    producer_epoch: int
    txn_index: int


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
    place: TaskPlace | None = None
    """Where the task ran (its executor)."""
    cpu_s: float = 0.0
    """The task process's CPU time while its producers ran (brokers and producer loops; the
    batches were built before, and its reader is a process of its own)."""
    consumer: ConsumerResult | None = None
    """What its reader process measured and read (runs with a consume phase)."""


def run_task(
    task: int, rows: Iterable[WorkloadRow], spec: WorkloadSpec, run: RunSpec
) -> list[ResultRow]:
    """Run one task's share of the workload to completion (blocking; its own event loop)."""
    return asyncio.run(_run_task(task, list(rows), spec, run))


async def _run_task(
    task: int, rows: list[WorkloadRow], spec: WorkloadSpec, run: RunSpec
) -> list[ResultRow]:
    puts, commits = LatencyLog(), LatencyLog()
    store = open_store(run.store, puts)
    coordinator = open_coordinator(run, commits)
    nodes = brokers_of_task(spec, task)
    if not is_shared(run.coordinator):  # a private in-memory coordinator starts empty
        await create_topics(coordinator, spec)
    results: list[ResultRow] = []
    outcomes: dict[tuple[int, int], int] = {}
    consumed: ConsumerResult | None = None
    async with contextlib.AsyncExitStack() as stack:
        stack.push_async_callback(store.close)
        stack.push_async_callback(coordinator.close)
        reader = None
        if consuming(spec, run):  # started first: it starts up while the batches are built
            reader = await stack.enter_async_context(
                reader_beside(task, nodes[0].rack or "", spec, run)
            )
        brokers: dict[int, Any] = {}
        for node in nodes:
            broker = open_broker(node.broker_id, node.rack or "", store, coordinator, run)
            brokers[node.broker_id] = await stack.enter_async_context(broker)
        transactions = await stack.enter_async_context(TransactionCoordinator(coordinator))
        build_started = time.perf_counter()
        by_producer = await _build_requests(task, rows, spec, transactions)
        build_s = time.perf_counter() - build_started
        if reader is not None:
            await reader.ready()
            await reader.start()
        store_before = store.stats()
        started_ts = time.time()
        started = time.perf_counter()
        cpu_started = time.process_time()
        deadline = started + spec.duration_s
        try:
            counts = await asyncio.gather(
                *(
                    _run_producer(
                        task, requests, brokers, spec, started, deadline, results, transactions,
                        outcomes,
                    )
                    for requests in by_producer.values()
                )
            )  # fmt: skip
        finally:
            if reader is not None:  # (a failed task too: the readers stop waiting for it)
                await announce_done(run, task)
        sent = sum(counts)
        ended_ts = time.time()
        cpu_s = time.process_time() - cpu_started
        store_used = store.stats().minus(store_before)
        broker_stats = {str(bid): _stats_of(b) for bid, b in brokers.items()}
        results = [
            r._replace(txn_outcome=outcomes.get((r.producer_id, r.txn_index), TXN_UNKNOWN))
            if r.txn_index >= 0
            else r
            for r in results
        ]
        audit_result = None
        if not is_shared(run.coordinator):  # nobody else can see this coordinator: audit here
            audit_result = await _audit_in_task(results, spec, store, brokers)
        if reader is not None:
            consumed = await reader.finish()
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
        place=here(),
        cpu_s=cpu_s,
        consumer=consumed,
    )
    results.append(_task_row(task, stats))
    return results


async def _build_requests(
    task: int, rows: list[WorkloadRow], spec: WorkloadSpec, transactions: TransactionCoordinator
) -> dict[int, list[_Request]]:
    """Every producer's requests with their batches built, in send order.

    A transactional producer first gets its producer id from InitProducerId; transaction k then
    runs at the initial epoch + k (transaction version 2 bumps the epoch at every end).
    """
    timestamp_ms = int(time.time() * 1000)
    wire: dict[int, tuple[int, int]] = {}
    by_producer: dict[int, list[_Request]] = {}
    rows.sort(key=lambda r: (r.request_id, r.topic, r.partition))
    for request_id, group in _group_by_request(rows):
        first = group[0]
        assert first.task == task, (first.task, task)
        if first.txn_index >= 0 and first.producer_index not in wire:
            init = await transactions.init_producer_id(
                transactional_id(spec, first.producer_index), TXN_TIMEOUT_MS
            )
            if init.error != ErrorCode.NONE:
                raise RuntimeError(f"InitProducerId failed: {ErrorCode(init.error).name}")
            wire[first.producer_index] = (init.producer_id, init.producer_epoch)
        if first.txn_index >= 0:
            producer_id, epoch0 = wire[first.producer_index]
            identity = (producer_id, epoch0 + first.txn_index)
        else:
            identity = (first.producer_id, first.producer_epoch)
        batches = {
            TopicPartition(r.topic, r.partition): build_batch(r, timestamp_ms, identity)
            for r in group
        }
        assert len(batches) == len(group), "a request holds one batch per partition"
        by_producer.setdefault(first.producer_index, []).append(
            _Request(
                request_id,
                first.broker_id,
                first.send_offset_ms,
                group,
                batches,
                identity[0],
                identity[1],
                first.txn_index,
            )
        )
    return by_producer


def transactional_id(spec: WorkloadSpec, producer: int) -> str:
    return f"bench-{spec.seed}-producer-{producer}"


async def _audit_in_task(
    results: list[ResultRow], spec: WorkloadSpec, store: Any, brokers: dict[int, Any]
) -> Any:
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
    transactions: TransactionCoordinator,
    outcomes: dict[tuple[int, int], int],
) -> int:
    """Send a producer's requests in order, `max_in_flight` outstanding per broker; count sent.

    Requests are handed to the broker in sequence order: each send is a task created in order,
    and asyncio starts tasks first come first served. A transactional producer adds each
    transaction's partitions first, and ends it (commit, or abort as planned or after a failed
    batch) once all its requests are answered.
    """
    slots = {broker_id: asyncio.Semaphore(spec.max_in_flight) for broker_id in brokers}
    pending: set[asyncio.Task[None]] = set()
    sent = 0
    txn_index = -1
    answered: dict[int, bool] = {}
    for request in requests:
        if request.txn_index != txn_index:
            if txn_index >= 0:
                await _end_transaction(
                    spec, requests, txn_index, pending, transactions, outcomes, answered
                )
            txn_index = request.txn_index
            if txn_index >= 0 and not await _begin_transaction(
                spec, requests, txn_index, transactions
            ):
                break
        if request.send_offset_ms >= 0:
            delay = started + request.send_offset_ms / 1000.0 - time.perf_counter()
            if delay > 0:
                await asyncio.sleep(delay)
        slot = slots[request.broker_id]
        await slot.acquire()
        if time.perf_counter() >= deadline:
            slot.release()
            break
        sending = asyncio.create_task(
            _send(task, request, brokers[request.broker_id], spec, out, answered)
        )
        sending.add_done_callback(lambda _, slot=slot: slot.release())  # type: ignore[misc]
        pending.add(sending)
        sending.add_done_callback(pending.discard)
        sent += 1
    if txn_index >= 0:
        await _end_transaction(spec, requests, txn_index, pending, transactions, outcomes, answered)
    if pending:
        await asyncio.gather(*pending)
    return sent


async def _begin_transaction(
    spec: WorkloadSpec,
    requests: list[_Request],
    txn_index: int,
    transactions: TransactionCoordinator,
) -> bool:
    mine = [r for r in requests if r.txn_index == txn_index]
    first = mine[0]
    partitions = list(dict.fromkeys(tp for r in mine for tp in r.batches))
    added = await transactions.add_partitions_to_txn(
        transactional_id(spec, first.rows[0].producer_index),
        first.wire_producer_id,
        first.producer_epoch,
        partitions,
    )
    return all(error == ErrorCode.NONE for error in added)


async def _end_transaction(
    spec: WorkloadSpec,
    requests: list[_Request],
    txn_index: int,
    pending: set[asyncio.Task[None]],
    transactions: TransactionCoordinator,
    outcomes: dict[tuple[int, int], int],
    answered: dict[int, bool],
) -> None:
    """Wait for the transaction's requests, then commit it (if planned and all acked) or abort."""
    if pending:
        await asyncio.gather(*pending)
    first = next(r for r in requests if r.txn_index == txn_index)
    row = first.rows[0]
    acks = [
        answered[r.request_id]
        for r in requests
        if r.txn_index == txn_index and r.request_id in answered
    ]
    commit = row.txn_commit and bool(acks) and all(acks)
    ended = await transactions.end_txn(
        transactional_id(spec, row.producer_index),
        first.wire_producer_id,
        first.producer_epoch,
        commit,
    )
    outcome = (
        (TXN_COMMITTED if commit else TXN_ABORTED) if ended.error == ErrorCode.NONE else TXN_UNKNOWN
    )
    outcomes[(row.producer_id, txn_index)] = outcome


async def _send(
    task: int,
    request: _Request,
    broker: Any,
    spec: WorkloadSpec,
    out: list[ResultRow],
    answered: dict[int, bool],
) -> None:
    """One produce request; its batches' rows go to `out`, whether all were acked to `answered`."""
    send_ts = time.time()
    started = time.perf_counter()
    try:
        answers = await broker.produce(request.batches, acks=spec.acks, timeout_ms=spec.timeout_ms)
        failure: str | None = None
    except Exception as exc:  # an infrastructure failure fails every batch of the request
        answers, failure = {}, f"{type(exc).__name__}: {exc}"
    answered[request.request_id] = (
        failure is None
        and all(answer.error == ErrorCode.NONE for answer in answers.values())
        and len(answers) == len(request.batches)
    )
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
                wire_producer_id=request.wire_producer_id,
                producer_epoch=request.producer_epoch,
                txn_index=request.txn_index,
                txn_outcome=TXN_NONE,
                stats_json=None,
            )
        )


def _stats_of(broker: Any) -> Any:
    """A broker's own stats as JSON-able data."""
    return msgspec.to_builtins(broker.stats())


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
        wire_producer_id=-1,
        producer_epoch=-1,
        txn_index=-1,
        txn_outcome=TXN_NONE,
        stats_json=msgspec.json.encode(stats).decode(),
    )


def task_stats(row: Any) -> TaskStats:
    return msgspec.json.decode(row.stats_json, type=TaskStats)


def task_audit(stats: TaskStats) -> Any:
    """The in-task audit of an in-memory coordinator run, decoded: (verdicts, store counters)."""
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
