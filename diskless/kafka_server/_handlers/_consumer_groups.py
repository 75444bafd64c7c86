"""Kafka 4's consumer group protocol (KIP-848): ConsumerGroupHeartbeat and ConsumerGroupDescribe.

Each decodes its request for `GroupCoordinator` (`_coordination.group_coordinator`), which serves
a group only on the broker that owns it (NOT_COORDINATOR elsewhere) and runs its state machine
(`_coordination.consumer_group_state`). Members name topics by id on the wire; the state machine
knows them by name, so topic ids are translated here, both ways (an id no topic has now is left
out: the member owns nothing of a deleted topic).

Authorization, as Kafka's `KafkaApis`: the heartbeat needs READ on the group, else
GROUP_AUTHORIZATION_FAILED, and DESCRIBE on every topic it subscribes to by name, else
TOPIC_AUTHORIZATION_FAILED; a regular expression matches only the topics the member may
describe. Describe needs DESCRIBE on each group, else that group's GROUP_AUTHORIZATION_FAILED,
and answers KIP-430's authorized operations on each group it describes when asked (`Access`,
as DescribeGroups). A group that does not exist, or is not a consumer group, is answered
GROUP_ID_NOT_FOUND with Kafka's message, and no state.
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
from diskless.kafka_server._coordination.consumer_group_state import (
    Description,
    HeartbeatAnswer,
    HeartbeatRequest,
)
from diskless.kafka_server._coordination.group_description import DEAD, GroupDescription
from diskless.kafka_server._handlers._access import DESCRIBE, OPERATIONS_NOT_ASKED, READ, Access
from diskless.kafka_server._handlers._errors import failure
from diskless.kafka_server._handlers._route import NO_THROTTLE, Response, millis
from diskless.kafka_server._handlers.context import BrokerContext, Session, serving
from diskless.kafka_server._protocol.fields import build, nested
from diskless.kafka_server._protocol.messages import (
    ConsumerGroupDescribeRequest,
    ConsumerGroupHeartbeatRequest,
)

_CONSUMER_MEMBER_TYPE = 1
"""ConsumerGroupDescribe v1's `member_type` of a member of the consumer protocol."""


async def handle_consumer_group_heartbeat(
    context: BrokerContext,
    session: Session,
    request: ConsumerGroupHeartbeatRequest,
    response: Response,
) -> ResponsePayload:
    access = Access(context, session)
    if not access.group(READ, request.group_id):
        answer = HeartbeatAnswer(WireError.group_authorization_failed)
        return _encode_heartbeat(response, answer, {})
    names = request.subscribed_topic_names
    if names and access.topics(DESCRIBE, names) != set(names):
        message = "The member is not authorized to describe some of its subscribed topics."
        answer = HeartbeatAnswer(WireError.topic_authorization_failed, message=message)
        return _encode_heartbeat(response, answer, {})
    try:
        described = await context.broker.describe_topics()
    except DisklessError as e:
        answer = HeartbeatAnswer(failure(group_error, e, "listing topics"))
        return _encode_heartbeat(response, answer, {})
    counts = {d.name: d.partitions for d in described}
    ids = {d.name: d.topic_id for d in described}
    names_of = {d.topic_id: d.name for d in described}
    owned = None
    if request.topic_partitions is not None:
        owned = frozenset(
            TopicPartition(names_of[t.topic_id], int(p))
            for t in request.topic_partitions
            if t.topic_id in names_of
            for p in t.partitions
        )
    member_id = request.member_id
    if not member_id and request.__version__ == 0 and request.member_epoch == 0:
        member_id = str(uuid.uuid4())  # v0: the coordinator names a new member
    regex = getattr(request, "subscribed_topic_regex", None)  # v1 on
    heartbeat = HeartbeatRequest(
        member_id,
        int(request.member_epoch),
        instance_id=request.instance_id,
        rack_id=request.rack_id,
        rebalance_timeout_ms=millis(request.rebalance_timeout),
        subscribed_topic_names=None if names is None else tuple(names),
        subscribed_topic_regex=regex,
        server_assignor=request.server_assignor,
        owned=owned,
        client_id=session.client_id,
        client_host=session.client_host,
    )
    describable = access.topics(DESCRIBE, counts)  # a member's regex is sent only when it changes
    try:
        answer = await context.groups.consumer_heartbeat(
            serving(context),
            request.group_id,
            heartbeat,
            topics=counts,
            describable=describable,
        )
    except DisklessError as e:
        answer = HeartbeatAnswer(failure(group_error, e, "a consumer group heartbeat"))
    return _encode_heartbeat(response, answer, ids)


def _encode_heartbeat(
    response: Response, answer: HeartbeatAnswer, ids: Mapping[str, uuid.UUID]
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


def heartbeat_error_response(
    request: ConsumerGroupHeartbeatRequest, response: Response, code: WireError
) -> ResponsePayload:
    return _encode_heartbeat(response, HeartbeatAnswer(code), {})


async def handle_consumer_group_describe(
    context: BrokerContext,
    session: Session,
    request: ConsumerGroupDescribeRequest,
    response: Response,
) -> ResponsePayload:
    access = Access(context, session)
    asked = bool(request.include_authorized_operations)
    answers: list[tuple[str, Description | WireError]] = []
    messages: dict[str, str] = {}
    for group_id in request.group_ids:
        if not access.group(DESCRIBE, group_id):
            answers.append((group_id, WireError.group_authorization_failed))
            continue
        try:
            described = await context.groups.consumer_describe(serving(context), group_id)
        except DisklessError as e:
            described = failure(group_error, e, "describing a consumer group")
        if isinstance(described, GroupDescription):
            messages[group_id] = _not_found(described)
            described = WireError.group_id_not_found
        answers.append((group_id, described))
    ids: dict[str, uuid.UUID] = {}
    if any(isinstance(answer, Description) for _, answer in answers):
        try:
            ids = {d.name: d.topic_id for d in await context.broker.describe_topics()}
        except DisklessError as e:
            error = failure(group_error, e, "listing topics")
            answers = [(g, error if isinstance(a, Description) else a) for g, a in answers]
    group_entry = nested(response, "DescribedGroup")
    groups = tuple(
        _describe_group(
            response,
            group_entry,
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


def _not_found(described: GroupDescription) -> str:
    """Kafka's message for a group ConsumerGroupDescribe does not describe."""
    if described.state == DEAD:
        return f"Group {described.group_id} not found."
    return f"Group {described.group_id} is not a consumer group."


def _describe_group(
    response: Response,
    entry: type[Entity],
    group_id: str,
    answer: Description | WireError,
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
        )
    member_entry = nested(response, "Member")
    assignment_entry = nested(response, "Assignment")
    partitions_entry = nested(response, "TopicPartitions")

    def assignment(partitions: Iterable[TopicPartition]) -> Entity:
        topics = _by_topic(partitions_entry, partitions, ids, named=True)
        return build(assignment_entry, topic_partitions=topics)

    members = tuple(
        build(
            member_entry,
            member_id=m.member.member_id,
            instance_id=m.member.instance_id,
            rack_id=m.member.rack_id,
            member_epoch=m.member.member_epoch,
            client_id=m.member.client_id,
            client_host=m.member.client_host,
            subscribed_topic_names=m.member.subscribed_topic_names,
            subscribed_topic_regex=m.member.subscribed_topic_regex,
            assignment=assignment(m.member.assigned),
            target_assignment=assignment(m.target),
            member_type=_CONSUMER_MEMBER_TYPE,
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


def describe_error_response(
    request: ConsumerGroupDescribeRequest, response: Response, code: WireError
) -> ResponsePayload:
    entry = nested(response, "DescribedGroup")
    groups = tuple(_describe_group(response, entry, g, code, {}) for g in request.group_ids)
    return build(response, throttle_time=NO_THROTTLE, groups=groups)
