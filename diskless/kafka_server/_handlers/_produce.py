"""Produce: the client's record sets to `DisklessBroker.produce`, per-partition results back.

The one handler whose requests must reach the broker in order: `DisklessBroker.produce` takes
its place in the write order when it is called, and a producer's pipelined requests must keep
the order in which they arrived on the connection. Transactional batches of transaction
version 1 clients are rewritten on the way in (`TransactionFront.rewrite_batches`), which reads
the coordinator first; so each produce request takes a turn on its connection
(`Session.produce_turn`), and one that need not read goes straight on when no earlier one
is still reading.

zstd batches need Produce v7 or later: an older client could not read them back, so Kafka answers
UNSUPPORTED_COMPRESSION_TYPE for such a partition, and so does `DisklessBroker.produce` when told
that zstd is not allowed.
"""

from __future__ import annotations

import asyncio
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
    previous = session.produce_turn
    turn = session.produce_turn = asyncio.get_running_loop().create_future()
    produced = None
    try:
        transactional = context.transactions.transactional(partitions)
        if transactional or (previous is not None and not previous.done()):
            if previous is not None:
                await asyncio.wait([previous])  # never cancels it
            if transactional:
                partitions = await context.transactions.rewrite_batches(partitions, transactional)
        # No await between the turn and this call: it fixes the request's place in the write
        # order of the broker.
        produced = context.broker.produce(
            partitions,
            acks=acks,
            timeout_ms=millis(request.timeout),
            allow_zstd=request.__version__ >= ZSTD_VERSION_MIN,
        )
    except DisklessError as e:
        failed = failure(produce_error, e, f"produce on broker {context.broker_id}")
    finally:
        turn.set_result(None)
    if produced is not None:
        try:
            results = await produced
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
