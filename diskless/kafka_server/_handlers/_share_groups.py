"""Share groups' membership (KIP-932): ShareGroupHeartbeat and ShareGroupDescribe.

Each decodes its request for the share groups of `GroupCoordinator`
(`_coordination.share_groups`), which serves a group only on the broker that owns it
(NOT_COORDINATOR elsewhere) and runs its state machine (`_coordination.share_group_state`).
Members subscribe by topic name; assignments go out by topic id, translated here (a topic
deleted since has no id and is left out).

Authorization, as Kafka's `KafkaApis`: the heartbeat needs READ on the group, else
GROUP_AUTHORIZATION_FAILED, and DESCRIBE on every topic it subscribes to, else
TOPIC_AUTHORIZATION_FAILED (before the group is touched). Describe needs DESCRIBE on each
group, else that group's GROUP_AUTHORIZATION_FAILED, and answers KIP-430's authorized
operations when asked. A group that does not exist, or is not a share group, is answered
GROUP_ID_NOT_FOUND with Kafka's message.
"""

from __future__ import annotations

import datetime
import uuid
from collections.abc import Iterable, Mapping

from kio.schema.errors import ErrorCode as WireError
from kio.static.protocol import Entity, ResponsePayload

from diskless._kafka_errors import group_error
from diskless._types import TopicPartition
from diskless.coordinator import ResourceType
from diskless.errors import DisklessError
from diskless.kafka_server._coordination.group_description import DEAD, GroupDescription
from diskless.kafka_server._coordination.share_group_state import (
    ShareDescription,
    ShareHeartbeatAnswer,
    ShareHeartbeatRequest,
)
from diskless.kafka_server._handlers._access import DESCRIBE, OPERATIONS_NOT_ASKED, READ, Access
from diskless.kafka_server._handlers._errors import failure
from diskless.kafka_server._handlers._route import NO_THROTTLE, Response
from diskless.kafka_server._handlers.context import BrokerContext, Session, serving
from diskless.kafka_server._protocol.fields import build, nested
from diskless.kafka_server._protocol.messages_share_groups import (
    ShareGroupDescribeRequest,
    ShareGroupHeartbeatRequest,
)


async def handle_share_group_heartbeat(
    context: BrokerContext,
    session: Session,
    request: ShareGroupHeartbeatRequest,
    response: Response,
) -> ResponsePayload:
    access = Access(context, session)
    if not access.group(READ, request.group_id):
        return _encode_heartbeat(
            response, ShareHeartbeatAnswer(WireError.group_authorization_failed), {}
        )
    names = request.subscribed_topic_names
    if names and access.topics(DESCRIBE, names) != set(names):
        message = "The member is not authorized to describe some of its subscribed topics."
        answer = ShareHeartbeatAnswer(WireError.topic_authorization_failed, message=message)
        return _encode_heartbeat(response, answer, {})
    if not request.group_id.strip():
        answer = ShareHeartbeatAnswer(WireError.invalid_request, message="GroupId can't be empty.")
        return _encode_heartbeat(response, answer, {})
    try:
        described = await context.broker.describe_topics()
    except DisklessError as e:
        answer = ShareHeartbeatAnswer(failure(group_error, e, "listing topics"))
        return _encode_heartbeat(response, answer, {})
    heartbeat = ShareHeartbeatRequest(
        request.member_id,
        int(request.member_epoch),
        rack_id=request.rack_id,
        subscribed_topic_names=None if names is None else tuple(names),
        client_id=session.client_id,
        client_host=session.client_host,
    )
    try:
        answer = await context.groups.shares.heartbeat(
            serving(context),
            request.group_id,
            heartbeat,
            topics={d.name: d.partitions for d in described},
        )
    except DisklessError as e:
        answer = ShareHeartbeatAnswer(failure(group_error, e, "a share group heartbeat"))
    return _encode_heartbeat(response, answer, {d.name: d.topic_id for d in described})


def _encode_heartbeat(
    response: Response, answer: ShareHeartbeatAnswer, ids: Mapping[str, uuid.UUID]
) -> ResponsePayload:
    assignment = None
    if answer.assignment is not None:
        entry = nested(response, "TopicPartitions")
        assignment = build(
            nested(response, "Assignment"),
            topic_partitions=_by_topic(entry, answer.assignment, ids, named=False),
        )
    return build(
        response,
        throttle_time=NO_THROTTLE,
        error_code=answer.error,
        error_message=answer.message,
        member_id=answer.member_id or None,
        member_epoch=answer.member_epoch if answer.error is WireError.none else 0,
        heartbeat_interval=datetime.timedelta(milliseconds=answer.heartbeat_interval_ms),
        assignment=assignment,
    )


def _by_topic(
    entry: type[Entity],
    partitions: Iterable[TopicPartition],
    ids: Mapping[str, uuid.UUID],
    *,
    named: bool,
) -> tuple[Entity, ...]:
    """The partitions, one entry per topic with an id (a topic deleted since has none)."""
    by_topic: dict[str, list[int]] = {}
    for tp in sorted(partitions):
        by_topic.setdefault(tp.topic, []).append(tp.partition)
    return tuple(
        build(
            entry,
            topic_id=ids[topic],
            topic_name=topic if named else None,
            partitions=tuple(indexes),
        )
        for topic, indexes in by_topic.items()
        if topic in ids
    )


def share_heartbeat_error_response(
    request: ShareGroupHeartbeatRequest, response: Response, code: WireError
) -> ResponsePayload:
    return _encode_heartbeat(response, ShareHeartbeatAnswer(code), {})


async def handle_share_group_describe(
    context: BrokerContext,
    session: Session,
    request: ShareGroupDescribeRequest,
    response: Response,
) -> ResponsePayload:
    access = Access(context, session)
    asked = bool(request.include_authorized_operations)
    answers: list[tuple[str, ShareDescription | WireError]] = []
    messages: dict[str, str] = {}
    for group_id in request.group_ids:
        if not access.group(DESCRIBE, group_id):
            answers.append((group_id, WireError.group_authorization_failed))
            continue
        try:
            described = await context.groups.shares.describe(serving(context), group_id)
        except DisklessError as e:
            described = failure(group_error, e, "describing a share group")
        if isinstance(described, GroupDescription):
            messages[group_id] = (
                f"Group {group_id} not found."
                if described.state == DEAD
                else f"Group {group_id} is not a share group."
            )
            described = WireError.group_id_not_found
        answers.append((group_id, described))
    ids: dict[str, uuid.UUID] = {}
    if any(isinstance(answer, ShareDescription) for _, answer in answers):
        try:
            ids = {d.name: d.topic_id for d in await context.broker.describe_topics()}
        except DisklessError as e:
            error = failure(group_error, e, "listing topics")
            answers = [(g, error if isinstance(a, ShareDescription) else a) for g, a in answers]
    entry = nested(response, "DescribedGroup")
    groups = tuple(
        _describe_group(
            response,
            entry,
            group_id,
            answer,
            ids,
            message=messages.get(group_id),
            operations=access.operations(ResourceType.GROUP, group_id)
            if asked
            else OPERATIONS_NOT_ASKED,
        )
        for group_id, answer in answers
    )
    return build(response, throttle_time=NO_THROTTLE, groups=groups)


def _describe_group(
    response: Response,
    entry: type[Entity],
    group_id: str,
    answer: ShareDescription | WireError,
    ids: Mapping[str, uuid.UUID],
    *,
    message: str | None = None,
    operations: int = OPERATIONS_NOT_ASKED,
) -> Entity:
    if isinstance(answer, WireError):
        return build(
            entry,
            error_code=answer,
            error_message=message,
            group_id=group_id,
            group_state="",
            group_epoch=-1,
            assignment_epoch=-1,
            assignor_name="",
            members=(),
            authorized_operations=OPERATIONS_NOT_ASKED,
        )
    member_entry = nested(response, "Member")
    assignment_entry = nested(response, "Assignment")
    partitions_entry = nested(response, "TopicPartitions")
    members = tuple(
        build(
            member_entry,
            member_id=m.member_id,
            rack_id=m.rack_id,
            member_epoch=m.member_epoch,
            client_id=m.client_id,
            client_host=m.client_host,
            subscribed_topic_names=m.subscribed_topic_names,
            assignment=build(
                assignment_entry,
                topic_partitions=_by_topic(partitions_entry, m.assigned, ids, named=True),
            ),
        )
        for m in answer.members
    )
    return build(
        entry,
        error_code=WireError.none,
        error_message=None,
        group_id=group_id,
        group_state=answer.state,
        group_epoch=answer.group_epoch,
        assignment_epoch=answer.assignment_epoch,
        assignor_name=answer.assignor,
        members=members,
        authorized_operations=operations,
    )


def share_describe_error_response(
    request: ShareGroupDescribeRequest, response: Response, code: WireError
) -> ResponsePayload:
    entry = nested(response, "DescribedGroup")
    groups = tuple(_describe_group(response, entry, g, code, {}) for g in request.group_ids)
    return build(response, throttle_time=NO_THROTTLE, groups=groups)
