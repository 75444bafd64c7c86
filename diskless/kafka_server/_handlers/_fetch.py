"""The read path: Fetch (with its long poll) and ListOffsets.

A Fetch that finds fewer than `min_bytes` waits, polling every `fetch_poll_ms`, until data
arrives or `max_wait` (capped by `fetch_wait_ms_max`) runs out. The wait runs on the broker's
injected clock, so that a simulated clock drives it in tests as it drives the rest of the broker.
"""

from __future__ import annotations

from typing import Final

import kio.schema.fetch.v11 as fetch_v11
import kio.schema.fetch.v12 as fetch_v12
import kio.schema.list_offsets.v1 as list_offsets_v1
from kio.schema.errors import ErrorCode as WireError
from kio.static.protocol import Entity, ResponsePayload

from diskless._kafka_errors import fetch_error, list_offsets_error
from diskless._results import FetchResult, ListOffsetsResult
from diskless._types import ErrorCode, IsolationLevel, TopicPartition, check_isolation_level
from diskless.errors import DisklessError
from diskless.kafka_server._handlers._errors import failure
from diskless.kafka_server._handlers._route import NO_THROTTLE, Response, millis
from diskless.kafka_server._handlers.context import BrokerContext, Session
from diskless.kafka_server._protocol.fields import build, nested, wire
from diskless.kafka_server._protocol.messages import (
    FetchRequest,
    ListOffsetsRequest,
)

_WITH_RACK: Final = (fetch_v11.FetchRequest, fetch_v12.FetchRequest)
"""Fetch v11 added `rack_id` (KIP-392): the consumer's `client.rack`."""


def _isolation(value: int) -> IsolationLevel | None:
    """The isolation level of a request, None when it names none (answered INVALID_REQUEST)."""
    try:
        return check_isolation_level(value)
    except ValueError:
        return None


# --- Fetch ----------------------------------------------------------------------------------------
async def handle_fetch(
    context: BrokerContext,
    session: Session,
    request: FetchRequest,
    response: Response,
) -> ResponsePayload:
    if isinstance(request, _WITH_RACK) and request.rack_id:
        session.client_rack = request.rack_id
    isolation = _isolation(int(request.isolation_level))
    offsets: dict[TopicPartition, int] = {}
    partition_max_bytes = 0
    for topic in request.topics:
        for partition in topic.partitions:
            offsets[TopicPartition(topic.topic, partition.partition)] = int(partition.fetch_offset)
            partition_max_bytes = max(partition_max_bytes, int(partition.partition_max_bytes))
    max_bytes = max(int(request.max_bytes), 0)  # negative budgets read as empty, as in Kafka
    clock = context.broker.clock
    wait_ms = min(millis(request.max_wait), context.config.fetch_wait_ms_max)
    deadline = clock.monotonic() + wait_ms / 1000
    min_bytes = int(request.min_bytes)
    results: dict[TopicPartition, FetchResult] = {}
    failed = wire(ErrorCode.KAFKA_STORAGE_ERROR)
    if isolation is None:
        results = dict.fromkeys(offsets, FetchResult(ErrorCode.INVALID_REQUEST))
    while isolation is not None:
        try:
            results = await context.broker.fetch(
                offsets,
                max_bytes=max_bytes,
                partition_max_bytes=partition_max_bytes or None,
                isolation_level=isolation,
            )
        except DisklessError as e:
            failed = failure(fetch_error, e, f"fetch on broker {context.broker_id}")
            results = {}
            break
        total = sum(len(r.records) for r in results.values())
        errors = any(r.error is not ErrorCode.NONE for r in results.values())
        if total >= max(min_bytes, 1) or errors or not offsets or clock.monotonic() >= deadline:
            break
        await clock.sleep(min(context.config.fetch_poll_ms / 1000, deadline - clock.monotonic()))
    topic_entry = nested(response, "FetchableTopicResponse")
    partition_entry = nested(response, "PartitionData")
    aborted_entry = nested(response, "AbortedTransaction")
    responses = []
    for topic in request.topics:
        partitions: list[Entity] = []
        for partition in topic.partitions:
            tp = TopicPartition(topic.topic, partition.partition)
            result = results.get(tp)
            if result is None:
                error, hwm, lso, start = failed, -1, -1, -1
                records = b""
                aborted: list[tuple[int, int]] = []
            else:
                error = wire(result.error)
                hwm, lso = result.high_watermark, result.last_stable_offset
                start = result.log_start_offset
                records, aborted = result.records, result.aborted_transactions
            partitions.append(
                build(
                    partition_entry,
                    partition_index=tp.partition,
                    error_code=error,
                    high_watermark=hwm,
                    last_stable_offset=lso,
                    log_start_offset=start,
                    aborted_transactions=(
                        tuple(
                            build(aborted_entry, producer_id=pid, first_offset=first)
                            for pid, first in aborted
                        )
                        if isolation is IsolationLevel.READ_COMMITTED
                        else None
                    ),
                    preferred_read_replica=-1,
                    records=bytes(records),
                )
            )
        responses.append(build(topic_entry, topic=topic.topic, partitions=tuple(partitions)))
    return build(
        response,
        throttle_time=NO_THROTTLE,
        error_code=WireError.none,
        session_id=0,  # no fetch sessions (KIP-227): clients keep sending full requests
        responses=tuple(responses),
    )


# --- ListOffsets ----------------------------------------------------------------------------------
async def handle_list_offsets(
    context: BrokerContext,
    session: Session,
    request: ListOffsetsRequest,
    response: Response,
) -> ResponsePayload:
    isolation = _isolation(
        0  # v1 predates isolation levels: READ_UNCOMMITTED
        if isinstance(request, list_offsets_v1.ListOffsetsRequest)
        else int(request.isolation_level)
    )
    timestamps = {
        TopicPartition(topic.name, p.partition_index): int(p.timestamp)
        for topic in request.topics
        for p in topic.partitions
    }
    results: dict[TopicPartition, ListOffsetsResult] = {}
    failed = wire(ErrorCode.KAFKA_STORAGE_ERROR)
    if isolation is None:
        results = dict.fromkeys(timestamps, ListOffsetsResult(ErrorCode.INVALID_REQUEST))
    else:
        try:
            results = await context.broker.list_offsets(timestamps, isolation_level=isolation)
        except DisklessError as e:
            failed = failure(list_offsets_error, e, f"list offsets on broker {context.broker_id}")
    topic_entry = nested(response, "ListOffsetsTopicResponse")
    partition_entry = nested(response, "ListOffsetsPartitionResponse")
    topics = []
    for topic in request.topics:
        partitions = []
        for p in topic.partitions:
            result = results.get(TopicPartition(topic.name, p.partition_index))
            partitions.append(
                build(
                    partition_entry,
                    partition_index=p.partition_index,
                    error_code=wire(result.error) if result is not None else failed,
                    timestamp=result.timestamp if result is not None else -1,
                    offset=result.offset if result is not None else -1,
                    leader_epoch=context.cluster.generation,
                )
            )
        topics.append(build(topic_entry, name=topic.name, partitions=tuple(partitions)))
    return build(response, throttle_time=NO_THROTTLE, topics=tuple(topics))
