"""Queues (KIP-932): ShareFetch and ShareAcknowledge, answered by any broker for any partition.

The share-partitions' state is the coordinator's and the process's `ShareFront` acquires,
reads, waits and acknowledges (`_coordination.share_front`); the share session, this broker's
(`_coordination.share_sessions`). This module decodes, checks and answers, as Kafka's
`KafkaApis.handleShareFetchRequest` and `handleShareAcknowledgeRequest` do:
- READ on the group, else the whole request is GROUP_AUTHORIZATION_FAILED; READ on each topic,
  else its partitions are TOPIC_AUTHORIZATION_FAILED (neither fetched nor acknowledged);
- a group id or member id missing is INVALID_REQUEST, and so are acknowledgements in a ShareFetch
  that opens its session (epoch 0);
- the session's epoch: SHARE_SESSION_NOT_FOUND, INVALID_SHARE_SESSION_EPOCH,
  SHARE_SESSION_LIMIT_REACHED answer the whole request; a session closed (epoch -1) releases
  what its member held in its partitions, after the request's acknowledgements (one replaced by
  a new one of the same member, epoch 0, does not: the member still holds its records);
- partitions are named by topic id: an id no topic has is UNKNOWN_TOPIC_ID, an index beyond the
  topic's UNKNOWN_TOPIC_OR_PARTITION;
- each partition's acknowledgements are applied all or none (INVALID_RECORD_STATE for a record
  the member does not hold, INVALID_REQUEST for malformed batches or a RENEW, which is not
  served), and ShareFetch answers them in `acknowledge_error_code`.
A ShareFetch with epoch -1 acknowledges and closes; it fetches nothing.
"""

from __future__ import annotations

import datetime
import uuid
from collections.abc import Iterable, Mapping, Sequence
from typing import NamedTuple, Protocol

from kio.schema.errors import ErrorCode as WireError
from kio.static.protocol import Entity, ResponsePayload

from diskless._kafka_errors import fetch_error
from diskless._types import ErrorCode, TopicPartition
from diskless.coordinator import AcknowledgeBatch
from diskless.errors import DisklessError
from diskless.kafka_server._coordination.share_front import ShareFetched, TopicNames
from diskless.kafka_server._coordination.share_sessions import (
    FINAL_EPOCH,
    INITIAL_EPOCH,
    ShareSessionKey,
    TopicIdPartition,
)
from diskless.kafka_server._handlers._access import READ, Access
from diskless.kafka_server._handlers._errors import failure_code
from diskless.kafka_server._handlers._route import NO_THROTTLE, Response, millis
from diskless.kafka_server._handlers.context import BrokerContext, Session
from diskless.kafka_server._protocol.fields import build, nested, wire
from diskless.kafka_server._protocol.messages_share import (
    ShareAcknowledgeRequest,
    ShareFetchRequest,
)

_NO_LOCK = datetime.timedelta(0)


class _Batch(Protocol):
    @property
    def first_offset(self) -> int: ...

    @property
    def last_offset(self) -> int: ...

    @property
    def acknowledge_types(self) -> Sequence[int]: ...


def _batches(batches: Iterable[_Batch]) -> tuple[AcknowledgeBatch, ...]:
    return tuple(
        AcknowledgeBatch(
            int(b.first_offset), int(b.last_offset), tuple(map(int, b.acknowledge_types))
        )
        for b in batches
    )


_ZERO_ID = uuid.UUID(int=0)


def _id(topic_id: uuid.UUID | None) -> uuid.UUID:
    """A topic id as Kafka reads it (kio reads the zero id as None): no topic has the zero id,
    so its partitions are UNKNOWN_TOPIC_ID."""
    return _ZERO_ID if topic_id is None else topic_id


class _Resolved(NamedTuple):
    """The request's partitions by name, and those answered with an error instead."""

    names: dict[TopicIdPartition, TopicPartition]
    errors: dict[TopicIdPartition, ErrorCode]


async def _resolve(
    context: BrokerContext, session: Session, partitions: Iterable[TopicIdPartition]
) -> _Resolved:
    """Topic ids to names, with the topic READ check. Raises the coordinator's failure."""
    wanted = list(dict.fromkeys(partitions))
    topics: Mapping[uuid.UUID, TopicNames] = {}
    ids = {topic_id for topic_id, _ in wanted}
    if ids:
        topics = await context.shares.topics(context.broker, ids)
    access = Access(context, session)
    allowed = {t.name: access.topic(READ, t.name) for t in topics.values()}
    names: dict[TopicIdPartition, TopicPartition] = {}
    errors: dict[TopicIdPartition, ErrorCode] = {}
    for tip in wanted:
        topic_id, index = tip
        topic = topics.get(topic_id)
        if topic is None:
            errors[tip] = ErrorCode.UNKNOWN_TOPIC_ID
        elif not allowed[topic.name]:
            errors[tip] = ErrorCode.TOPIC_AUTHORIZATION_FAILED
        elif not 0 <= index < topic.partitions:
            errors[tip] = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
        else:
            names[tip] = TopicPartition(topic.name, index)
    return _Resolved(names, errors)


def _refusal(context: BrokerContext, session: Session, group_id: str, member_id: str) -> WireError:
    if not Access(context, session).group(READ, group_id):
        return WireError.group_authorization_failed
    if not group_id or not member_id:
        return WireError.invalid_request
    return WireError.none


# --- ShareFetch --------------------------------------------------------------------------------
async def handle_share_fetch(
    context: BrokerContext, session: Session, request: ShareFetchRequest, response: Response
) -> ResponsePayload:
    group_id = request.group_id or ""
    member_id = request.member_id or ""
    refused = _refusal(context, session, group_id, member_id)
    if refused is not WireError.none:
        return _failed(response, refused)
    epoch = int(request.share_session_epoch)
    requested: list[TopicIdPartition] = []
    acks: dict[TopicIdPartition, tuple[AcknowledgeBatch, ...]] = {}
    for topic in request.topics:
        for p in topic.partitions:
            tip = (_id(topic.topic_id), int(p.partition_index))
            requested.append(tip)
            if p.acknowledgement_batches:
                acks[tip] = _batches(p.acknowledgement_batches)
    if epoch == INITIAL_EPOCH and acks:
        return _failed(response, WireError.invalid_request)
    forgotten = [
        (_id(f.topic_id), int(index))
        for f in request.forgotten_topics_data
        for index in f.partitions
    ]
    shares = context.shares
    key = ShareSessionKey(context.broker_id, group_id, member_id)
    step = shares.sessions.fetch(key, epoch, session, requested, forgotten)
    if step.error is not ErrorCode.NONE or step.session is None:
        return _failed(response, wire(step.error))
    final = epoch == FINAL_EPOCH
    fetching = [] if final else list(step.session.partitions)
    try:
        resolved = await _resolve(context, session, [*fetching, *acks, *step.session.partitions])
        tps = [resolved.names[tip] for tip in fetching if tip in resolved.names]
        named_acks = {resolved.names[tip]: b for tip, b in acks.items() if tip in resolved.names}
        answer = await shares.fetch(
            context.broker,
            group_id,
            member_id,
            tps,
            named_acks,
            max_records=int(request.max_records),
            max_bytes=max(0, int(request.max_bytes)),
            min_bytes=int(request.min_bytes),
            max_wait_ms=min(millis(request.max_wait), context.config.fetch_wait_ms_max),
        )
        if final:
            ended = [resolved.names[t] for t in step.session.partitions if t in resolved.names]
            await shares.release(group_id, member_id, ended)
    except DisklessError as e:
        code = failure_code(fetch_error, e, f"share fetch on broker {context.broker_id}")
        return _failed(response, wire(code))
    shown = dict.fromkeys([*requested, *acks])
    shown.update(
        (tip, None)
        for tip, tp in resolved.names.items()
        if tip in fetching and answer.partitions.get(tp, _NOTHING) != _NOTHING
    )
    partitions: dict[TopicIdPartition, tuple[ShareFetched, ErrorCode]] = {}
    for tip in shown:
        error = resolved.errors.get(tip)
        if error is not None:
            partitions[tip] = (ShareFetched(error), error)
            continue
        tp = resolved.names[tip]
        fetched = answer.partitions.get(tp, _NOTHING)
        partitions[tip] = (fetched, answer.acknowledged.get(tp, ErrorCode.NONE))
    lock = datetime.timedelta(milliseconds=shares.limits(group_id).lock_duration_ms)
    return _encode_fetch(context, session, response, partitions, resolved.names, lock)


_NOTHING = ShareFetched(ErrorCode.NONE)


def _failed(response: Response, code: WireError) -> ResponsePayload:
    """A ShareFetch or ShareAcknowledge failed whole (their responses have the same fields)."""
    return _answer(response, code, _NO_LOCK, ())


def _answer(
    response: Response, code: WireError, lock: datetime.timedelta, topics: tuple[Entity, ...]
) -> ResponsePayload:
    return build(
        response,
        throttle_time=NO_THROTTLE,
        error_code=code,
        acquisition_lock_timeout=lock,
        responses=topics,
        node_endpoints=(),
    )


def _leaders(
    context: BrokerContext, session: Session, names: Iterable[TopicPartition]
) -> tuple[dict[TopicPartition, int], int]:
    rack = session.client_rack if session.client_rack is not None else context.rack
    return context.cluster.leaders(names, rack), context.cluster.generation


def _encode_fetch(
    context: BrokerContext,
    session: Session,
    response: Response,
    partitions: Mapping[TopicIdPartition, tuple[ShareFetched, ErrorCode]],
    names: Mapping[TopicIdPartition, TopicPartition],
    lock: datetime.timedelta,
) -> ResponsePayload:
    topic_entry = nested(response, "ShareFetchableTopicResponse")
    partition_entry = nested(response, "PartitionData")
    acquired_entry = nested(response, "AcquiredRecords")
    leader_entry = nested(response, "LeaderIdAndEpoch")
    leaders, epoch = _leaders(context, session, (names[t] for t in partitions if t in names))
    by_topic: dict[uuid.UUID, list[Entity]] = {}
    for tip, (fetched, acked) in partitions.items():
        topic_id, index = tip
        tp = names.get(tip)
        leader = leaders.get(tp, -1) if tp is not None else -1
        by_topic.setdefault(topic_id, []).append(
            build(
                partition_entry,
                partition_index=index,
                error_code=wire(fetched.error),
                acknowledge_error_code=wire(acked),
                current_leader=build(leader_entry, leader_id=leader, leader_epoch=epoch),
                records=fetched.records,
                acquired_records=tuple(
                    build(
                        acquired_entry,
                        first_offset=a.first,
                        last_offset=a.last,
                        delivery_count=a.delivery_count,
                    )
                    for a in fetched.acquired
                ),
            )
        )
    topics = tuple(
        build(topic_entry, topic_id=topic_id, partitions=tuple(entries))
        for topic_id, entries in by_topic.items()
    )
    return _answer(response, WireError.none, lock, topics)


# --- ShareAcknowledge --------------------------------------------------------------------------
async def handle_share_acknowledge(
    context: BrokerContext, session: Session, request: ShareAcknowledgeRequest, response: Response
) -> ResponsePayload:
    group_id = request.group_id or ""
    member_id = request.member_id or ""
    refused = _refusal(context, session, group_id, member_id)
    if refused is not WireError.none:
        return _failed(response, refused)
    acks: dict[TopicIdPartition, tuple[AcknowledgeBatch, ...]] = {}
    for topic in request.topics:
        for p in topic.partitions:
            acks[(_id(topic.topic_id), int(p.partition_index))] = _batches(
                p.acknowledgement_batches
            )
    shares = context.shares
    epoch = int(request.share_session_epoch)
    key = ShareSessionKey(context.broker_id, group_id, member_id)
    step = shares.sessions.acknowledge(key, epoch, session)
    if step.error is not ErrorCode.NONE or step.session is None:
        return _failed(response, wire(step.error))
    final = epoch == FINAL_EPOCH
    try:
        resolved = await _resolve(context, session, [*acks, *step.session.partitions])
        named = {resolved.names[tip]: b for tip, b in acks.items() if tip in resolved.names}
        codes = await shares.acknowledge(group_id, member_id, named)
        if final:
            ended = [resolved.names[t] for t in step.session.partitions if t in resolved.names]
            await shares.release(group_id, member_id, ended)
    except DisklessError as e:
        code = failure_code(fetch_error, e, f"share acknowledge on broker {context.broker_id}")
        return _failed(response, wire(code))
    answers = {
        tip: resolved.errors.get(tip) or codes.get(resolved.names[tip], ErrorCode.NONE)
        for tip in acks
    }
    lock = datetime.timedelta(milliseconds=shares.limits(group_id).lock_duration_ms)
    return _encode_acknowledge(context, session, response, answers, resolved.names, lock)


def _encode_acknowledge(
    context: BrokerContext,
    session: Session,
    response: Response,
    answers: Mapping[TopicIdPartition, ErrorCode],
    names: Mapping[TopicIdPartition, TopicPartition],
    lock: datetime.timedelta,
) -> ResponsePayload:
    topic_entry = nested(response, "ShareAcknowledgeTopicResponse")
    partition_entry = nested(response, "PartitionData")
    leader_entry = nested(response, "LeaderIdAndEpoch")
    leaders, epoch = _leaders(context, session, (names[t] for t in answers if t in names))
    by_topic: dict[uuid.UUID, list[Entity]] = {}
    for tip, code in answers.items():
        topic_id, index = tip
        tp = names.get(tip)
        leader = leaders.get(tp, -1) if tp is not None else -1
        by_topic.setdefault(topic_id, []).append(
            build(
                partition_entry,
                partition_index=index,
                error_code=wire(code),
                current_leader=build(leader_entry, leader_id=leader, leader_epoch=epoch),
            )
        )
    topics = tuple(
        build(topic_entry, topic_id=topic_id, partitions=tuple(entries))
        for topic_id, entries in by_topic.items()
    )
    return _answer(response, WireError.none, lock, topics)
