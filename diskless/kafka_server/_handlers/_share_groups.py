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

from kio.schema.errors import ErrorCode as WireError
from kio.static.protocol import Entity, ResponsePayload

from diskless._kafka_errors import group_error
from diskless.errors import DisklessError
from diskless.kafka_server._coordination.share_group_state import (
    ShareDescription,
    ShareHeartbeatAnswer,
    ShareHeartbeatRequest,
    ShareMember,
)
from diskless.kafka_server._handlers._access import DESCRIBE, READ, Access
from diskless.kafka_server._handlers._errors import failure
from diskless.kafka_server._handlers._membership import (
    Assignment,
    describe_groups,
    encode_heartbeat,
)
from diskless.kafka_server._handlers._membership import (
    describe_error_response as describe_groups_error,
)
from diskless.kafka_server._handlers._route import Response
from diskless.kafka_server._handlers.context import BrokerContext, Session, serving
from diskless.kafka_server._protocol.fields import build
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
        return encode_heartbeat(
            response, ShareHeartbeatAnswer(WireError.group_authorization_failed), {}
        )
    names = request.subscribed_topic_names
    if names and access.topics(DESCRIBE, names) != set(names):
        message = "The member is not authorized to describe some of its subscribed topics."
        answer = ShareHeartbeatAnswer(WireError.topic_authorization_failed, message=message)
        return encode_heartbeat(response, answer, {})
    if not request.group_id.strip():
        answer = ShareHeartbeatAnswer(WireError.invalid_request, message="GroupId can't be empty.")
        return encode_heartbeat(response, answer, {})
    try:
        described = await context.broker.describe_topics()
    except DisklessError as e:
        answer = ShareHeartbeatAnswer(failure(group_error, e, "listing topics"))
        return encode_heartbeat(response, answer, {})
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
    return encode_heartbeat(response, answer, {d.name: d.topic_id for d in described})


def share_heartbeat_error_response(
    request: ShareGroupHeartbeatRequest, response: Response, code: WireError
) -> ResponsePayload:
    return encode_heartbeat(response, ShareHeartbeatAnswer(code), {})


async def handle_share_group_describe(
    context: BrokerContext,
    session: Session,
    request: ShareGroupDescribeRequest,
    response: Response,
) -> ResponsePayload:
    return await describe_groups(
        context,
        session,
        request.group_ids,
        response,
        authorized_operations=bool(request.include_authorized_operations),
        kind="share",
        describe=lambda group_id: context.groups.shares.describe(serving(context), group_id),
        described=ShareDescription,
        member=_member,
    )


def _member(entry: type[Entity], m: ShareMember, assignment: Assignment) -> Entity:
    return build(
        entry,
        member_id=m.member_id,
        rack_id=m.rack_id,
        member_epoch=m.member_epoch,
        client_id=m.client_id,
        client_host=m.client_host,
        subscribed_topic_names=m.subscribed_topic_names,
        assignment=assignment(m.assigned),
    )


def share_describe_error_response(
    request: ShareGroupDescribeRequest, response: Response, code: WireError
) -> ResponsePayload:
    return describe_groups_error(request.group_ids, response, code)
