"""Transactions: InitProducerId, AddPartitionsToTxn, AddOffsetsToTxn, TxnOffsetCommit and
EndTxn, through `TransactionFront`.

The front end bridges the clients' transaction version 1 to the library's version 2 (see
`_coordination.txn_front`); a failure of the coordinator gets the library's `txn_error` code,
answered by the route (`*_error_response`), or `group_error` for TxnOffsetCommit, which the
group's coordinator serves, and whose partitions refused before the call keep their answer.
Offsets a transaction commits wait in its durable record and reach the group's committed offsets
with its commit markers, in the same step (never if it aborts).

Authorization first, as Kafka's: WRITE on the transactional id (else
TRANSACTIONAL_ID_AUTHORIZATION_FAILED for the whole request); an idempotent producer's
InitProducerId needs IDEMPOTENT_WRITE on the cluster or WRITE on some topic (KIP-679; else
CLUSTER_AUTHORIZATION_FAILED); AddPartitionsToTxn WRITE on each topic (refused ones get
TOPIC_AUTHORIZATION_FAILED and the rest OPERATION_NOT_ATTEMPTED); AddOffsetsToTxn and
TxnOffsetCommit READ on the group (GROUP_AUTHORIZATION_FAILED), TxnOffsetCommit READ on each
topic (TOPIC_AUTHORIZATION_FAILED for its partitions).
"""

from __future__ import annotations

from collections.abc import Mapping

import kio.schema.txn_offset_commit.v3 as txn_offset_commit_v3
from kio.schema.errors import ErrorCode as WireError
from kio.static.protocol import ResponsePayload

from diskless._kafka_errors import group_error
from diskless._types import ErrorCode, TopicPartition
from diskless.errors import DisklessError
from diskless.kafka_server._handlers._access import IDEMPOTENT_WRITE, READ, WRITE, Access
from diskless.kafka_server._handlers._errors import failure
from diskless.kafka_server._handlers._route import NO_THROTTLE, Response, error_response, millis
from diskless.kafka_server._handlers.context import BrokerContext, Session, serving
from diskless.kafka_server._protocol.fields import build, nested, partition_errors, wire
from diskless.kafka_server._protocol.messages import (
    AddOffsetsToTxnRequest,
    AddPartitionsToTxnRequest,
    EndTxnRequest,
    InitProducerIdRequest,
    TxnOffsetCommitRequest,
)
from diskless.txn import PendingOffset

_ID_REFUSED = WireError.transactional_id_authorization_failed


def _may_write(access: Access, transactional_id: str) -> bool:
    return access.transactional_id(WRITE, transactional_id)


def _init_refusal(access: Access, transactional_id: str | None) -> WireError | None:
    if transactional_id is not None:
        return None if _may_write(access, transactional_id) else _ID_REFUSED
    if access.cluster(IDEMPOTENT_WRITE) or access.any_topic(WRITE):
        return None
    return WireError.cluster_authorization_failed


async def handle_init_producer_id(
    context: BrokerContext,
    session: Session,
    request: InitProducerIdRequest,
    response: Response,
) -> ResponsePayload:
    refused = _init_refusal(Access(context, session), request.transactional_id)
    if refused is not None:
        return init_producer_id_error_response(request, response, refused)
    result = await context.transactions.init_producer_id(
        request.transactional_id, millis(request.transaction_timeout)
    )
    return build(
        response,
        throttle_time=NO_THROTTLE,
        error_code=wire(result.error),
        producer_id=result.producer_id,
        producer_epoch=result.producer_epoch,
    )


def init_producer_id_error_response(
    request: InitProducerIdRequest, response: Response, code: WireError
) -> ResponsePayload:
    return build(
        response, throttle_time=NO_THROTTLE, error_code=code, producer_id=-1, producer_epoch=-1
    )


async def handle_add_partitions_to_txn(
    context: BrokerContext,
    session: Session,
    request: AddPartitionsToTxnRequest,
    response: Response,
) -> ResponsePayload:
    partitions = _partitions(request)
    access = Access(context, session)
    if not _may_write(access, request.v3_and_below_transactional_id):
        return add_partitions_to_txn_error_response(request, response, _ID_REFUSED)
    refused = access.refused(WRITE, partitions)
    if refused:  # none is added (Kafka: the others are not attempted)
        results = dict.fromkeys(partitions, WireError.operation_not_attempted)
        results.update(dict.fromkeys(refused, WireError.topic_authorization_failed))
        return _encode_add_partitions(response, request, results)
    codes = await context.transactions.add_partitions_to_txn(
        request.v3_and_below_transactional_id,
        int(request.v3_and_below_producer_id),
        int(request.v3_and_below_producer_epoch),
        partitions,
    )
    errors = [wire(code) for code in codes]
    return _encode_add_partitions(response, request, dict(zip(partitions, errors, strict=True)))


def add_partitions_to_txn_error_response(
    request: AddPartitionsToTxnRequest, response: Response, code: WireError
) -> ResponsePayload:
    return _encode_add_partitions(response, request, dict.fromkeys(_partitions(request), code))


def _partitions(request: AddPartitionsToTxnRequest) -> list[TopicPartition]:
    return [
        TopicPartition(topic.name, int(p))
        for topic in request.v3_and_below_topics
        for p in topic.partitions
    ]


def _encode_add_partitions(
    response: Response,
    request: AddPartitionsToTxnRequest,
    results: Mapping[TopicPartition, WireError],
) -> ResponsePayload:
    topic_entry = nested(response, "AddPartitionsToTxnTopicResult")
    partition_entry = nested(response, "AddPartitionsToTxnPartitionResult")
    return build(
        response,
        throttle_time=NO_THROTTLE,
        results_by_topic_v3_and_below=tuple(
            build(
                topic_entry,
                name=topic.name,
                results_by_partition=tuple(
                    build(
                        partition_entry,
                        partition_index=p,
                        partition_error_code=results[TopicPartition(topic.name, int(p))],
                    )
                    for p in topic.partitions
                ),
            )
            for topic in request.v3_and_below_topics
        ),
    )


async def handle_end_txn(
    context: BrokerContext,
    session: Session,
    request: EndTxnRequest,
    response: Response,
) -> ResponsePayload:
    if not _may_write(Access(context, session), request.transactional_id):
        return error_response(request, response, _ID_REFUSED)
    result = await context.transactions.end_txn(
        request.transactional_id,
        int(request.producer_id),
        int(request.producer_epoch),
        bool(request.committed),
    )
    return build(response, throttle_time=NO_THROTTLE, error_code=wire(result.error))


async def handle_add_offsets_to_txn(
    context: BrokerContext,
    session: Session,
    request: AddOffsetsToTxnRequest,
    response: Response,
) -> ResponsePayload:
    access = Access(context, session)
    if not _may_write(access, request.transactional_id):
        return error_response(request, response, _ID_REFUSED)
    if not access.group(READ, request.group_id):
        return error_response(request, response, WireError.group_authorization_failed)
    code = await context.transactions.add_offsets_to_txn(
        request.transactional_id,
        int(request.producer_id),
        int(request.producer_epoch),
        request.group_id,
    )
    return build(response, throttle_time=NO_THROTTLE, error_code=wire(code))


async def handle_txn_offset_commit(
    context: BrokerContext, session: Session, request: TxnOffsetCommitRequest, response: Response
) -> ResponsePayload:
    """Served by the group's coordinator only (NOT_COORDINATOR elsewhere), which checks the
    member (v3+, KIP-447). Partitions of unknown topics are refused one by one
    (UNKNOWN_TOPIC_OR_PARTITION); the others are staged in the transaction together, under the
    group's fence, so they share one answer."""
    offsets = [
        PendingOffset(
            request.group_id,
            TopicPartition(topic.name, int(p.partition_index)),
            int(p.committed_offset),
            p.committed_metadata,
            int(getattr(p, "committed_leader_epoch", -1)),  # v2+ (KIP-320)
        )
        for topic in request.topics
        for p in topic.partitions
    ]
    if isinstance(request, txn_offset_commit_v3.TxnOffsetCommitRequest):
        member = (int(request.generation_id), request.member_id, request.group_instance_id)
    else:
        member = (-1, "", None)  # before v3 the member is not checked (KIP-447)
    access = Access(context, session)
    errors: dict[TopicPartition, WireError] = {}
    if not _may_write(access, request.transactional_id):
        error = _ID_REFUSED
    elif not access.group(READ, request.group_id):
        error = WireError.group_authorization_failed
    else:
        refused = access.refused(READ, (o.topic_partition for o in offsets))
        allowed = [o for o in offsets if o.topic_partition not in refused]
        try:
            errors, error = await _commit_in_txn(context, request, allowed, member)
        except DisklessError as e:
            errors, error = {}, failure(group_error, e, "txn offset commit")
        errors.update(dict.fromkeys(refused, WireError.topic_authorization_failed))
    topics = partition_errors(
        response,
        "TxnOffsetCommitResponseTopic",
        "TxnOffsetCommitResponsePartition",
        request.topics,
        errors,
        error,
    )
    return build(response, throttle_time=NO_THROTTLE, topics=topics)


async def _commit_in_txn(
    context: BrokerContext,
    request: TxnOffsetCommitRequest,
    offsets: list[PendingOffset],
    member: tuple[int, str, str | None],
) -> tuple[dict[TopicPartition, WireError], WireError]:
    """The partitions refused one by one, and the answer of the others."""
    me = serving(context)
    fence = await context.groups.txn_fence(me, request.group_id, *member)
    if isinstance(fence, WireError):
        return {}, fence
    names = sorted({o.topic_partition.topic for o in offsets})
    partitions = {d.name: d.partitions for d in await context.broker.describe_topics(names)}
    errors = {
        o.topic_partition: WireError.unknown_topic_or_partition
        for o in offsets
        if o.topic_partition.partition >= partitions.get(o.topic_partition.topic, 0)
    }
    known = [o for o in offsets if o.topic_partition not in errors]
    if not known:
        return errors, WireError.none
    try:
        code = await context.transactions.txn_offset_commit(
            request.transactional_id,
            int(request.producer_id),
            int(request.producer_epoch),
            request.group_id,
            known,
            fence,
        )
    except DisklessError as e:  # the partitions refused above keep their answer
        return errors, failure(group_error, e, "txn offset commit")
    if code is ErrorCode.NOT_COORDINATOR:
        context.groups.refused(me, request.group_id)
    return errors, wire(code)
