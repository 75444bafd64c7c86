"""The group admin APIs operators' tools call: DescribeGroups, ListGroups, DeleteGroups and
OffsetDelete.

Each reads a group through `GroupCoordinator` (`_coordination.group_coordinator`), which
describes it (`_coordination.group_description`) whatever its protocol. DescribeGroups,
DeleteGroups and OffsetDelete are served by the group's owner only (NOT_COORDINATOR elsewhere,
per group); ListGroups by every broker, each listing the groups it coordinates, as an admin
client asks every broker and merges the answers. A failure of the batch coordinator gets the
library's `group_error` code, per group (or for the whole request, for ListGroups and
OffsetDelete).

Authorization, as Kafka's: DescribeGroups needs DESCRIBE on each group, DeleteGroups DELETE
(else that group's GROUP_AUTHORIZATION_FAILED); ListGroups lists every group to a principal
with DESCRIBE on the cluster, else only those it may DESCRIBE; OffsetDelete needs DELETE on the
group (else GROUP_AUTHORIZATION_FAILED for the request) and READ on each topic (else
TOPIC_AUTHORIZATION_FAILED for its partitions). DescribeGroups answers KIP-430's authorized
operations on each group when asked (`Access.operations`: Kafka's operations on a group, READ,
DESCRIBE, DELETE, DESCRIBE_CONFIGS and ALTER_CONFIGS). DescribeGroups describes classic groups
only, as Kafka's: a consumer-protocol group is Dead to it (ConsumerGroupDescribe describes it).
"""

from __future__ import annotations

from collections.abc import Mapping

from kio.schema.errors import ErrorCode as WireError
from kio.static.primitive import i32
from kio.static.protocol import Entity, ResponsePayload

from diskless._kafka_errors import group_error
from diskless._types import TopicPartition
from diskless.coordinator import ResourceType
from diskless.errors import DisklessError
from diskless.kafka_server._coordination.group_description import GroupDescription, GroupType
from diskless.kafka_server._handlers._access import (
    DELETE,
    DESCRIBE,
    OPERATIONS_NOT_ASKED,
    READ,
    Access,
)
from diskless.kafka_server._handlers._errors import failure
from diskless.kafka_server._handlers._route import NO_THROTTLE, Response
from diskless.kafka_server._handlers.context import BrokerContext, Session, serving
from diskless.kafka_server._protocol.fields import build, nested
from diskless.kafka_server._protocol.messages_groups import (
    DeleteGroupsRequest,
    DescribeGroupsRequest,
    ListGroupsRequest,
    OffsetDeleteRequest,
)


# --- DescribeGroups ---------------------------------------------------------------------------
async def handle_describe_groups(
    context: BrokerContext, session: Session, request: DescribeGroupsRequest, response: Response
) -> ResponsePayload:
    access = Access(context, session)
    asked = bool(getattr(request, "include_authorized_operations", False))  # v3+
    group_entry = nested(response, "DescribedGroup")
    member_entry = nested(response, "DescribedGroupMember")
    groups = []
    for group_id in request.groups:
        described: GroupDescription | WireError
        if not access.group(DESCRIBE, group_id):
            described = WireError.group_authorization_failed
        else:
            try:
                described = await context.groups.describe(serving(context), group_id)
            except DisklessError as e:
                described = failure(group_error, e, "describing a group")
        if isinstance(described, WireError):
            groups.append(_describe_error(group_entry, group_id, described))
            continue
        operations = OPERATIONS_NOT_ASKED
        if asked:
            operations = access.operations(ResourceType.GROUP, group_id)
        members = tuple(
            build(
                member_entry,
                member_id=m.member_id,
                group_instance_id=m.instance_id,
                client_id=m.client_id,
                client_host=m.client_host,
                member_metadata=m.metadata,
                member_assignment=m.assignment,
            )
            for m in described.members
        )
        groups.append(
            build(
                group_entry,
                error_code=WireError.none,
                group_id=group_id,
                group_state=described.state,
                protocol_type=described.protocol_type,
                protocol_data=described.protocol,
                members=members,
                authorized_operations=i32(operations),
            )
        )
    return build(response, throttle_time=NO_THROTTLE, groups=tuple(groups))


def _describe_error(group_entry: type[Entity], group_id: str, error: WireError) -> Entity:
    return build(
        group_entry,
        error_code=error,
        group_id=group_id,
        group_state="",
        protocol_type="",
        protocol_data="",
        members=(),
        authorized_operations=i32(OPERATIONS_NOT_ASKED),
    )


# --- ListGroups -------------------------------------------------------------------------------
async def handle_list_groups(
    context: BrokerContext, session: Session, request: ListGroupsRequest, response: Response
) -> ResponsePayload:
    access = Access(context, session)
    states = {state.lower() for state in getattr(request, "states_filter", ())}  # v4+
    types = {GroupType.parse(name) for name in getattr(request, "types_filter", ())}  # v5+
    every = access.cluster(DESCRIBE)
    groups = await context.groups.listed(serving(context))
    if isinstance(groups, WireError):
        return list_groups_error_response(request, response, groups)
    listed_entry = nested(response, "ListedGroup")
    listed = tuple(
        build(
            listed_entry,
            group_id=group.group_id,
            protocol_type=group.protocol_type,
            group_state=group.state,
            group_type=group.group_type.value,
        )
        for group in groups
        if (not states or group.state.lower() in states)
        and (not types or group.group_type in types)
        and (every or access.group(DESCRIBE, group.group_id))
    )
    return build(response, throttle_time=NO_THROTTLE, error_code=WireError.none, groups=listed)


def list_groups_error_response(
    request: ListGroupsRequest, response: Response, code: WireError
) -> ResponsePayload:
    return build(response, throttle_time=NO_THROTTLE, error_code=code, groups=())


# --- DeleteGroups -----------------------------------------------------------------------------
async def handle_delete_groups(
    context: BrokerContext, session: Session, request: DeleteGroupsRequest, response: Response
) -> ResponsePayload:
    access = Access(context, session)
    result_entry = nested(response, "DeletableGroupResult")
    results = []
    for group_id in dict.fromkeys(request.groups_names):
        error = WireError.group_authorization_failed
        if access.group(DELETE, group_id):
            try:
                error = await context.groups.delete(serving(context), group_id)
            except DisklessError as e:
                error = failure(group_error, e, "deleting a group")
        results.append(build(result_entry, group_id=group_id, error_code=error))
    return build(response, throttle_time=NO_THROTTLE, results=tuple(results))


# --- OffsetDelete -----------------------------------------------------------------------------
async def handle_offset_delete(
    context: BrokerContext, session: Session, request: OffsetDeleteRequest, response: Response
) -> ResponsePayload:
    access = Access(context, session)
    if not access.group(DELETE, request.group_id):
        return _encode_offset_delete(response, WireError.group_authorization_failed, {})
    named = [
        TopicPartition(t.name, int(p.partition_index)) for t in request.topics for p in t.partitions
    ]
    answers = dict.fromkeys(access.refused(READ, named), WireError.topic_authorization_failed)
    wanted = [tp for tp in named if tp not in answers]
    try:
        topics = sorted({tp.topic for tp in wanted})
        known = {t.name for t in await context.broker.describe_topics(topics)} if topics else set()
        answers.update(
            (tp, WireError.unknown_topic_or_partition) for tp in wanted if tp.topic not in known
        )
        deleted = [tp for tp in wanted if tp.topic in known]
        error, decided = await context.groups.delete_offsets(
            serving(context), request.group_id, deleted
        )
    except DisklessError as e:
        error, decided = failure(group_error, e, "deleting offsets"), {}
    if error is WireError.none:
        answers.update(decided)
    return _encode_offset_delete(response, error, answers)


def _encode_offset_delete(
    response: Response, error: WireError, answers: Mapping[TopicPartition, WireError]
) -> ResponsePayload:
    """Each partition's answer, by topic; the partitions refused before the group was asked
    keep theirs when the group's own answer is an error."""
    topic_entry = nested(response, "OffsetDeleteResponseTopic")
    partition_entry = nested(response, "OffsetDeleteResponsePartition")
    by_topic: dict[str, list[Entity]] = {}
    for tp, code in answers.items():
        entry = build(partition_entry, partition_index=i32(tp.partition), error_code=code)
        by_topic.setdefault(tp.topic, []).append(entry)
    topics = tuple(
        build(topic_entry, name=name, partitions=tuple(partitions))
        for name, partitions in by_topic.items()
    )
    return build(response, error_code=error, throttle_time=NO_THROTTLE, topics=topics)
