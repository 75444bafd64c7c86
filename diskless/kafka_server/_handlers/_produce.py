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

Authorization (synchronous, so it keeps the no-await rule): a transactional request needs WRITE
on its transactional id, or every partition is answered TRANSACTIONAL_ID_AUTHORIZATION_FAILED;
each topic needs WRITE, or its partitions are answered TOPIC_AUTHORIZATION_FAILED.

A broker whose registration may have lapsed (`ClusterView.lapsed`: it may be cut off from the
coordinator) names the other brokers as its partitions' leaders, and answers a produce
NOT_LEADER_OR_FOLLOWER without writing it, as a Kafka broker does for a partition it does not
lead: that code makes every client refresh its metadata and move, where a request left to time
out (REQUEST_TIMED_OUT) does not (aiokafka then keeps its leaders until its metadata's maximum
age, five minutes by default).
"""

from __future__ import annotations

import datetime
from collections.abc import Mapping
from typing import Final, NamedTuple

from kio.schema.errors import ErrorCode as WireError
from kio.static.protocol import Entity, ResponsePayload

from diskless._kafka_errors import produce_error
from diskless._results import ProduceResult
from diskless._types import ErrorCode, TopicPartition
from diskless.errors import DisklessError
from diskless.kafka_server._handlers._access import WRITE, Access
from diskless.kafka_server._handlers._errors import failure_code
from diskless.kafka_server._handlers._route import NO_THROTTLE, Response, millis
from diskless.kafka_server._handlers._steps import Steps
from diskless.kafka_server._handlers.context import BrokerContext, Session
from diskless.kafka_server._protocol.fields import build, nested, wire
from diskless.kafka_server._protocol.messages import ProduceRequest

ZSTD_VERSION_MIN: Final = 7
"""The first Produce version whose clients can read zstd batches (KIP-110)."""


_TWICE: Final = ProduceResult(
    ErrorCode.INVALID_RECORD, error_message="partition appears twice in the request"
)
_TOPIC_REFUSED: Final = ProduceResult(ErrorCode.TOPIC_AUTHORIZATION_FAILED)
_ID_REFUSED: Final = ProduceResult(ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED)
_LAPSED: Final = ProduceResult(
    ErrorCode.NOT_LEADER_OR_FOLLOWER,
    error_message="this broker's registration may have lapsed: its metadata names other leaders",
)


class _Produce(NamedTuple):
    """A Produce request, as `DisklessBroker.produce` takes it."""

    partitions: dict[TopicPartition, bytes]
    refused: dict[TopicPartition, ProduceResult]
    """Partitions answered without the broker: named more than once."""
    acks: int
    timeout_ms: int
    allow_zstd: bool


async def handle_produce(
    context: BrokerContext, session: Session, request: ProduceRequest, response: Response
) -> ResponsePayload | None:
    produce = _authorize(Access(context, session), request, _decode(request))
    results = await _call(context, produce, session)
    if produce.acks == 0:
        return None  # Kafka sends no response to acks=0
    return await _encode(response, request, results)


def _decode(request: ProduceRequest) -> _Produce:
    partitions: dict[TopicPartition, bytes] = {}
    twice: set[TopicPartition] = set()
    for topic in request.topic_data:
        for data in topic.partition_data:
            tp = TopicPartition(topic.name, data.index)
            if tp in partitions:
                twice.add(tp)
            partitions[tp] = bytes(data.records) if data.records is not None else b""
    for tp in twice:
        del partitions[tp]
    allow_zstd = request.__version__ >= ZSTD_VERSION_MIN
    acks, timeout_ms = int(request.acks), millis(request.timeout)
    return _Produce(partitions, dict.fromkeys(twice, _TWICE), acks, timeout_ms, allow_zstd)


def _authorize(access: Access, request: ProduceRequest, produce: _Produce) -> _Produce:
    """`produce` without the partitions the principal may not write, answered for them."""
    transactional_id = getattr(request, "transactional_id", None)  # v3+
    if transactional_id is not None and not access.transactional_id(WRITE, transactional_id):
        refused = dict.fromkeys(produce.partitions, _ID_REFUSED)
    else:
        refused = dict.fromkeys(access.refused(WRITE, produce.partitions), _TOPIC_REFUSED)
    if not refused:
        return produce
    for tp in refused:
        del produce.partitions[tp]
    return produce._replace(refused=produce.refused | refused)


async def _call(
    context: BrokerContext, produce: _Produce, session: Session
) -> dict[TopicPartition, ProduceResult]:
    """Every partition's result: the broker's, or the library's code for its failure. The
    session (the connection) is the requests' sender: see `DisklessBroker.produce`."""
    if context.broker_id in context.cluster.lapsed():
        return dict.fromkeys(produce.partitions, _LAPSED) | produce.refused
    try:
        # No await before this call: it takes the request's place in the broker's write order,
        # and the bridge's rewrite (which reads the coordinator) runs in that place.
        results = await context.broker.produce(
            produce.partitions,
            acks=produce.acks,
            timeout_ms=produce.timeout_ms,
            allow_zstd=produce.allow_zstd,
            rewrite=context.transactions.rewrite_for(produce.partitions),
            sender=session,
        )
    except DisklessError as e:
        code = failure_code(produce_error, e, f"produce on broker {context.broker_id}")
        failed = ProduceResult(code, error_message="the broker failed the request")
        results = dict.fromkeys(produce.partitions, failed)
    return results | produce.refused


async def _encode(
    response: Response, request: ProduceRequest, results: Mapping[TopicPartition, ProduceResult]
) -> ResponsePayload:
    topic_entry = nested(response, "TopicProduceResponse")
    partition_entry = nested(response, "PartitionProduceResponse")
    by_topic: dict[str, list[Entity]] = {}
    steps = Steps()
    for topic in request.topic_data:
        for data in topic.partition_data:
            await steps.pause()
            result = results[TopicPartition(topic.name, data.index)]
            error = wire(result.error)
            append_time = result.log_append_time
            by_topic.setdefault(topic.name, []).append(
                build(
                    partition_entry,
                    index=data.index,
                    error_code=error,
                    base_offset=result.base_offset,
                    log_append_time=(
                        None
                        if append_time < 0
                        else datetime.datetime.fromtimestamp(append_time / 1000, datetime.UTC)
                    ),
                    log_start_offset=result.log_start_offset,
                    record_errors=(),
                    error_message=result.error_message if error is not WireError.none else None,
                )
            )
    topics = (build(topic_entry, name=n, partition_responses=tuple(e)) for n, e in by_topic.items())
    return build(response, responses=tuple(topics), throttle_time=NO_THROTTLE)
