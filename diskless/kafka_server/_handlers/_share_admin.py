"""Share groups' offsets (KIP-932): DescribeShareGroupOffsets, AlterShareGroupOffsets and
DeleteShareGroupOffsets.

Each asks the share groups of `GroupCoordinator` (`_coordination.share_groups`), served by the
group's owner only (NOT_COORDINATOR elsewhere), which keeps the offsets with the
share-partitions' states in the batch coordinator. A start offset not known (a partition never
fetched by the group) is -1; the leader epoch and (v1) the lag are not kept and answer -1.

Authorization, as Kafka's `KafkaApis`:
- DescribeShareGroupOffsets: DESCRIBE on each group (else its GROUP_AUTHORIZATION_FAILED) and
  DESCRIBE on each topic named (else its partitions' TOPIC_AUTHORIZATION_FAILED; with no topics
  named, only the topics the principal may describe are answered);
- AlterShareGroupOffsets: READ on the group (else GROUP_AUTHORIZATION_FAILED for the request)
  and READ on each topic (else its partitions' TOPIC_AUTHORIZATION_FAILED);
- DeleteShareGroupOffsets: DELETE on the group and READ on each topic, likewise.
A topic that does not exist is UNKNOWN_TOPIC_OR_PARTITION. A failure of the batch coordinator
gets the library's `group_error` code.
"""

from __future__ import annotations

import uuid
from typing import Final

from kio.schema.errors import ErrorCode as WireError
from kio.static.primitive import i32, i64
from kio.static.protocol import Entity, ResponsePayload

from diskless._kafka_errors import group_error
from diskless._types import TopicPartition
from diskless.errors import DisklessError
from diskless.kafka_server._handlers._access import DELETE, DESCRIBE, READ, Access
from diskless.kafka_server._handlers._errors import failure
from diskless.kafka_server._handlers._route import NO_THROTTLE, Response
from diskless.kafka_server._handlers.context import BrokerContext, Session, serving
from diskless.kafka_server._protocol.fields import build, nested, wire
from diskless.kafka_server._protocol.messages_share_groups import (
    AlterShareGroupOffsetsRequest,
    DeleteShareGroupOffsetsRequest,
    DescribeShareGroupOffsetsRequest,
)

_UNKNOWN: Final = -1


async def _topic_ids(context: BrokerContext) -> dict[str, uuid.UUID]:
    return {d.name: d.topic_id for d in await context.broker.describe_topics()}


# --- DescribeShareGroupOffsets ----------------------------------------------------------------
async def handle_describe_share_group_offsets(
    context: BrokerContext,
    session: Session,
    request: DescribeShareGroupOffsetsRequest,
    response: Response,
) -> ResponsePayload:
    access = Access(context, session)
    group_entry = nested(response, "DescribeShareGroupOffsetsResponseGroup")
    groups = []
    for asked in request.groups:
        group_id = asked.group_id
        if not access.group(DESCRIBE, group_id):
            groups.append(_group_error(group_entry, group_id, WireError.group_authorization_failed))
            continue
        named = None
        if asked.topics is not None:
            named = [
                TopicPartition(t.topic_name, int(p)) for t in asked.topics for p in t.partitions
            ]
        try:
            groups.append(await _describe_group(context, access, response, group_id, named))
        except DisklessError as e:
            error = failure(group_error, e, "describing share group offsets")
            groups.append(_group_error(group_entry, group_id, error))
    return build(response, throttle_time=NO_THROTTLE, groups=tuple(groups))


async def _describe_group(
    context: BrokerContext,
    access: Access,
    response: Response,
    group_id: str,
    named: list[TopicPartition] | None,
) -> Entity:
    """One group's answer; `named`: the partitions asked for (None: all the group has)."""
    ids = await _topic_ids(context)
    answers: dict[TopicPartition, tuple[int, WireError]] = {}
    if named is not None:
        for tp in named:
            if not access.topic(DESCRIBE, tp.topic):
                answers[tp] = (_UNKNOWN, WireError.topic_authorization_failed)
            elif tp.topic not in ids:
                answers[tp] = (_UNKNOWN, WireError.unknown_topic_or_partition)
    wanted = None if named is None else [tp for tp in named if tp not in answers]
    found = await context.groups.shares.offsets(serving(context), group_id, wanted)
    error = found if isinstance(found, WireError) else WireError.none
    found = {} if isinstance(found, WireError) else found
    for tp in (wanted if wanted is not None else sorted(found)) if error is WireError.none else ():
        if wanted is None and not access.topic(DESCRIBE, tp.topic):
            continue
        offset = found.get(tp)
        answers[tp] = (_UNKNOWN if offset is None else offset.start, WireError.none)
    topic_entry = nested(response, "DescribeShareGroupOffsetsResponseTopic")
    partition_entry = nested(response, "DescribeShareGroupOffsetsResponsePartition")
    by_topic: dict[str, list[Entity]] = {}
    for tp, (start, code) in answers.items():
        by_topic.setdefault(tp.topic, []).append(
            build(
                partition_entry,
                partition_index=i32(tp.partition),
                start_offset=i64(start),
                leader_epoch=i32(_UNKNOWN),
                lag=i64(_UNKNOWN),
                error_code=code,
                error_message=None,
            )
        )
    return build(
        nested(response, "DescribeShareGroupOffsetsResponseGroup"),
        group_id=group_id,
        topics=tuple(
            build(topic_entry, topic_name=topic, topic_id=ids.get(topic), partitions=tuple(rows))
            for topic, rows in by_topic.items()
        ),
        error_code=error,
        error_message=None,
    )


def _group_error(entry: type[Entity], group_id: str, error: WireError) -> Entity:
    return build(entry, group_id=group_id, topics=(), error_code=error, error_message=None)


def describe_offsets_error_response(
    request: DescribeShareGroupOffsetsRequest, response: Response, code: WireError
) -> ResponsePayload:
    entry = nested(response, "DescribeShareGroupOffsetsResponseGroup")
    groups = tuple(_group_error(entry, g.group_id, code) for g in request.groups)
    return build(response, throttle_time=NO_THROTTLE, groups=groups)


# --- AlterShareGroupOffsets -------------------------------------------------------------------
async def handle_alter_share_group_offsets(
    context: BrokerContext,
    session: Session,
    request: AlterShareGroupOffsetsRequest,
    response: Response,
) -> ResponsePayload:
    access = Access(context, session)
    if not access.group(READ, request.group_id):
        return alter_offsets_error_response(request, response, WireError.group_authorization_failed)
    offsets = {
        TopicPartition(t.topic_name, int(p.partition_index)): int(p.start_offset)
        for t in request.topics
        for p in t.partitions
    }
    answers = dict.fromkeys(access.refused(READ, offsets), WireError.topic_authorization_failed)
    ids: dict[str, uuid.UUID] = {}
    try:
        ids = await _topic_ids(context)
        answers.update(
            (tp, WireError.unknown_topic_or_partition)
            for tp in offsets
            if tp not in answers and tp.topic not in ids
        )
        wanted = {tp: offset for tp, offset in offsets.items() if tp not in answers}
        decided = await context.groups.shares.alter_offsets(
            serving(context), request.group_id, wanted
        )
    except DisklessError as e:
        decided = failure(group_error, e, "altering share group offsets")
    error = decided if isinstance(decided, WireError) else WireError.none
    if not isinstance(decided, WireError):  # else the partitions refused before keep theirs
        answers.update((tp, wire(code)) for tp, code in decided.items())
    topic_entry = nested(response, "AlterShareGroupOffsetsResponseTopic")
    partition_entry = nested(response, "AlterShareGroupOffsetsResponsePartition")
    by_topic: dict[str, list[Entity]] = {}
    for tp, code in answers.items():
        by_topic.setdefault(tp.topic, []).append(
            build(partition_entry, partition_index=i32(tp.partition), error_code=code)
        )
    topics = tuple(
        build(topic_entry, topic_name=topic, topic_id=ids.get(topic), partitions=tuple(rows))
        for topic, rows in by_topic.items()
    )
    return build(
        response, throttle_time=NO_THROTTLE, error_code=error, error_message=None, responses=topics
    )


def alter_offsets_error_response(
    request: AlterShareGroupOffsetsRequest, response: Response, code: WireError
) -> ResponsePayload:
    return build(
        response, throttle_time=NO_THROTTLE, error_code=code, error_message=None, responses=()
    )


# --- DeleteShareGroupOffsets ------------------------------------------------------------------
async def handle_delete_share_group_offsets(
    context: BrokerContext,
    session: Session,
    request: DeleteShareGroupOffsetsRequest,
    response: Response,
) -> ResponsePayload:
    access = Access(context, session)
    if not access.group(DELETE, request.group_id):
        return delete_offsets_error_response(
            request, response, WireError.group_authorization_failed
        )
    names = list(dict.fromkeys(str(t.topic_name) for t in request.topics))
    answers = {
        name: WireError.topic_authorization_failed for name in names if not access.topic(READ, name)
    }
    ids: dict[str, uuid.UUID] = {}
    try:
        ids = await _topic_ids(context)
        answers.update(
            (name, WireError.unknown_topic_or_partition)
            for name in names
            if name not in answers and name not in ids
        )
        wanted = [name for name in names if name not in answers]
        decided = await context.groups.shares.delete_offsets(
            serving(context), request.group_id, wanted
        )
    except DisklessError as e:
        decided = failure(group_error, e, "deleting share group offsets")
    error = decided if isinstance(decided, WireError) else WireError.none
    if not isinstance(decided, WireError):  # else the topics refused before keep theirs
        answers.update((name, wire(code)) for name, code in decided.items())
    entry = nested(response, "DeleteShareGroupOffsetsResponseTopic")
    topics = tuple(
        build(
            entry,
            topic_name=name,
            topic_id=ids.get(name),
            error_code=answers[name],
            error_message=None,
        )
        for name in names
        if name in answers
    )
    return build(
        response, throttle_time=NO_THROTTLE, error_code=error, error_message=None, responses=topics
    )


def delete_offsets_error_response(
    request: DeleteShareGroupOffsetsRequest, response: Response, code: WireError
) -> ResponsePayload:
    return build(
        response, throttle_time=NO_THROTTLE, error_code=code, error_message=None, responses=()
    )
