"""Produce: the client's record sets to `DisklessBroker.produce`, per-partition results back.

The one handler whose requests must reach the broker in order: `DisklessBroker.produce` takes
its place in the write order when it is called, and a producer's pipelined requests must keep
the order in which they arrived on the connection. So the handler calls it before its first
await (handlers start in arrival order), and the broker's ticket keeps that order from there.
Transactional batches of transaction version 1 clients are rewritten on the way in, which reads
the coordinator first: the rewrite (`TransactionFront.rewrite_for`) is handed to the broker,
which runs it in the request's own turn, so it needs no ordering of its own.

zstd batches need Produce v7 or later: an older client could not read them back, so Kafka answers
UNSUPPORTED_COMPRESSION_TYPE for such a partition, and so does `DisklessBroker.produce` when told
that zstd is not allowed.
"""

from __future__ import annotations

import datetime
from typing import Final

from kio.schema.errors import ErrorCode as WireError
from kio.static.protocol import Entity, ResponsePayload

from diskless._kafka_errors import produce_error
from diskless._results import ProduceResult
from diskless._types import ErrorCode, TopicPartition
from diskless.errors import DisklessError
from diskless.kafka_server._handlers._errors import failure
from diskless.kafka_server._handlers._route import NO_THROTTLE, Response, millis
from diskless.kafka_server._handlers._steps import Steps
from diskless.kafka_server._handlers.context import BrokerContext, Session
from diskless.kafka_server._protocol.fields import build, nested, wire
from diskless.kafka_server._protocol.messages import ProduceRequest

ZSTD_VERSION_MIN: Final = 7
"""The first Produce version whose clients can read zstd batches (KIP-110)."""


async def handle_produce(
    context: BrokerContext,
    session: Session,
    request: ProduceRequest,
    response: Response,
) -> ResponsePayload | None:
    partitions: dict[TopicPartition, bytes] = {}
    duplicates: set[TopicPartition] = set()
    for topic in request.topic_data:
        for data in topic.partition_data:
            tp = TopicPartition(topic.name, data.index)
            if tp in partitions:
                duplicates.add(tp)
            partitions[tp] = bytes(data.records) if data.records is not None else b""
    for tp in duplicates:
        del partitions[tp]
    acks = int(request.acks)
    failed = None
    results: dict[TopicPartition, ProduceResult] = {}
    try:
        # No await before this call: it takes the request's place in the broker's write order,
        # and the bridge's rewrite (which reads the coordinator) runs in that place.
        results = await context.broker.produce(
            partitions,
            acks=acks,
            timeout_ms=millis(request.timeout),
            allow_zstd=request.__version__ >= ZSTD_VERSION_MIN,
            rewrite=context.transactions.rewrite_for(partitions),
        )
    except DisklessError as e:
        failed = failure(produce_error, e, f"produce on broker {context.broker_id}")
    if acks == 0:
        return None  # Kafka sends no response to acks=0
    topic_entry = nested(response, "TopicProduceResponse")
    partition_entry = nested(response, "PartitionProduceResponse")
    by_topic: dict[str, list[Entity]] = {}
    steps = Steps()
    for topic in request.topic_data:
        for data in topic.partition_data:
            await steps.pause()
            tp = TopicPartition(topic.name, data.index)
            result = results.get(tp)
            if tp in duplicates:
                error = wire(ErrorCode.INVALID_RECORD)
                message: str | None = "partition appears twice in the request"
                base_offset, append_time, start = -1, -1, -1
            elif result is None:
                error = failed if failed is not None else wire(ErrorCode.KAFKA_STORAGE_ERROR)
                message = "the broker failed the request"
                base_offset, append_time, start = -1, -1, -1
            else:
                error, message = wire(result.error), result.error_message
                base_offset = result.base_offset
                append_time = result.log_append_time
                start = result.log_start_offset
            by_topic.setdefault(topic.name, []).append(
                build(
                    partition_entry,
                    index=data.index,
                    error_code=error,
                    base_offset=base_offset,
                    log_append_time=(
                        None
                        if append_time < 0
                        else datetime.datetime.fromtimestamp(append_time / 1000, datetime.UTC)
                    ),
                    log_start_offset=start,
                    record_errors=(),
                    error_message=message if error is not WireError.none else None,
                )
            )
    return build(
        response,
        responses=tuple(
            build(topic_entry, name=name, partition_responses=tuple(entries))
            for name, entries in by_topic.items()
        ),
        throttle_time=NO_THROTTLE,
    )
