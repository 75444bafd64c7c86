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

import uuid

from kio.schema.errors import ErrorCode as WireError
from kio.static.protocol import Entity, ResponsePayload

from diskless._kafka_errors import group_error
from diskless._types import TopicPartition
from diskless.errors import DisklessError
from diskless.kafka_server._coordination.consumer_group_state import (
    DescribedMember,
    Description,
    HeartbeatAnswer,
    HeartbeatRequest,
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
from diskless.kafka_server._handlers._route import Response, millis
from diskless.kafka_server._handlers.context import BrokerContext, Session, serving
from diskless.kafka_server._protocol.fields import build
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
        return encode_heartbeat(response, answer, {})
    names = request.subscribed_topic_names
    if names and access.topics(DESCRIBE, names) != set(names):
        message = "The member is not authorized to describe some of its subscribed topics."
        answer = HeartbeatAnswer(WireError.topic_authorization_failed, message=message)
        return encode_heartbeat(response, answer, {})
    try:
        described = await context.broker.describe_topics()
    except DisklessError as e:
        answer = HeartbeatAnswer(failure(group_error, e, "listing topics"))
        return encode_heartbeat(response, answer, {})
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
    return encode_heartbeat(response, answer, ids)


def heartbeat_error_response(
    request: ConsumerGroupHeartbeatRequest, response: Response, code: WireError
) -> ResponsePayload:
    return encode_heartbeat(response, HeartbeatAnswer(code), {})


async def handle_consumer_group_describe(
    context: BrokerContext,
    session: Session,
    request: ConsumerGroupDescribeRequest,
    response: Response,
) -> ResponsePayload:
    return await describe_groups(
        context,
        session,
        request.group_ids,
        response,
        authorized_operations=bool(request.include_authorized_operations),
        kind="consumer",
        describe=lambda group_id: context.groups.consumer_describe(serving(context), group_id),
        described=Description,
        member=_member,
    )


def _member(entry: type[Entity], m: DescribedMember, assignment: Assignment) -> Entity:
    return build(
        entry,
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


def describe_error_response(
    request: ConsumerGroupDescribeRequest, response: Response, code: WireError
) -> ResponsePayload:
    return describe_groups_error(request.group_ids, response, code)
