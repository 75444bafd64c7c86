"""Consumer groups: OffsetCommit, OffsetFetch, JoinGroup, SyncGroup, Heartbeat, LeaveGroup.

Each decodes its request for `GroupCoordinator` (`_coordination.group_coordinator`), which
serves a group only on the broker that owns it (NOT_COORDINATOR elsewhere), keeps its membership
there and answers with Kafka error codes itself. Ownership and committed offsets live in the
batch coordinator: a failure there gets the library's `group_error` code, answered by the route
(`*_error_response`), or by OffsetCommit and OffsetFetch, whose refused partitions keep their
answer.

Authorization, before the coordinator is asked: every one of them needs READ on the group
(OffsetFetch: DESCRIBE), else GROUP_AUTHORIZATION_FAILED; OffsetCommit also READ on each topic
and OffsetFetch DESCRIBE, else the topic's partitions get TOPIC_AUTHORIZATION_FAILED (an
OffsetFetch of all topics leaves out those it may not describe).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Final

import kio.schema.join_group.v0 as join_group_v0
import kio.schema.leave_group.v0 as leave_group_v0
import kio.schema.leave_group.v1 as leave_group_v1
import kio.schema.leave_group.v2 as leave_group_v2
import kio.schema.sync_group.v5 as sync_group_v5
from kio.schema.errors import ErrorCode as WireError
from kio.static.protocol import Entity, ResponsePayload

from diskless._kafka_errors import group_error
from diskless._types import CommittedOffset, TopicPartition
from diskless.errors import DisklessError
from diskless.kafka_server._coordination.group_state import JoinOutcome
from diskless.kafka_server._handlers._access import DESCRIBE, READ, Access
from diskless.kafka_server._handlers._errors import failure
from diskless.kafka_server._handlers._route import NO_THROTTLE, Response, millis
from diskless.kafka_server._handlers.context import BrokerContext, Session, serving
from diskless.kafka_server._protocol.fields import build, nested, partition_errors
from diskless.kafka_server._protocol.messages import (
    HeartbeatRequest,
    JoinGroupRequest,
    LeaveGroupRequest,
    OffsetCommitRequest,
    OffsetFetchRequest,
    SyncGroupRequest,
)


def instance_id(request: object) -> str | None:
    """A static member's `group.instance.id` (KIP-345), in the versions that carry one."""
    value = getattr(request, "group_instance_id", None)
    return value if isinstance(value, str) else None


_GROUP_REFUSED: Final = WireError.group_authorization_failed
_NOT_COMMITTED: Final = CommittedOffset(-1, "", -1)
"""OffsetFetch's answer for a partition with no committed offset."""


def _may_read(context: BrokerContext, session: Session, group_id: str) -> bool:
    return Access(context, session).group(READ, group_id)


_ONE_MEMBER_LEAVES: Final = (
    leave_group_v0.LeaveGroupRequest,
    leave_group_v1.LeaveGroupRequest,
    leave_group_v2.LeaveGroupRequest,
)
"""LeaveGroup v3 (KIP-345) lets a request name several members; before, it names one."""


async def handle_offset_commit(
    context: BrokerContext,
    session: Session,
    request: OffsetCommitRequest,
    response: Response,
) -> ResponsePayload:
    offsets = {
        TopicPartition(topic.name, p.partition_index): CommittedOffset(
            int(p.committed_offset),
            p.committed_metadata,
            int(getattr(p, "committed_leader_epoch", -1)),  # v6+ (KIP-320)
        )
        for topic in request.topics
        for p in topic.partitions
    }
    errors: dict[TopicPartition, WireError] = {}
    access = Access(context, session)
    refused = access.refused(READ, offsets)
    for tp in refused:
        del offsets[tp]
    if not access.group(READ, request.group_id):
        unanswered = _GROUP_REFUSED  # every partition
    else:
        errors, unanswered = await _commit(context, request, offsets)
        errors.update(dict.fromkeys(refused, WireError.topic_authorization_failed))
    return build(
        response,
        throttle_time=NO_THROTTLE,
        topics=partition_errors(
            response,
            "OffsetCommitResponseTopic",
            "OffsetCommitResponsePartition",
            request.topics,
            errors,
            unanswered,
        ),
    )


async def _commit(
    context: BrokerContext,
    request: OffsetCommitRequest,
    offsets: dict[TopicPartition, CommittedOffset],
) -> tuple[dict[TopicPartition, WireError], WireError]:
    """Each partition's error, and the code of those not answered."""
    try:
        errors = await context.groups.commit_offsets(
            serving(context),
            request.group_id,
            int(request.generation_id_or_member_epoch),
            request.member_id,
            offsets,
            instance_id(request),
        )
        return errors, WireError.unknown_topic_or_partition
    except DisklessError as e:
        return {}, failure(group_error, e, "committing offsets")


async def handle_offset_fetch(
    context: BrokerContext, session: Session, request: OffsetFetchRequest, response: Response
) -> ResponsePayload:
    access = Access(context, session)
    committed: dict[TopicPartition, CommittedOffset] = {}
    if not access.group(DESCRIBE, request.group_id):
        error = _GROUP_REFUSED
    else:
        try:
            error, committed = await context.groups.committed_offsets(
                serving(context), request.group_id
            )
        except DisklessError as e:
            error = failure(group_error, e, "fetching offsets")
    wanted: dict[str, list[int]]
    if request.topics is None:  # every partition with a committed offset it may describe
        wanted = {}
        described = access.topics(DESCRIBE, (tp.topic for tp in committed))
        for tp in sorted(committed):
            if tp.topic in described:
                wanted.setdefault(tp.topic, []).append(tp.partition)
        refused: set[str] = set()
    else:
        wanted = {t.name: [int(p) for p in t.partition_indexes] for t in request.topics}
        refused = set(wanted) - access.topics(DESCRIBE, wanted)
    return _encode_offset_fetch(response, wanted, committed, error, refused)


def _encode_offset_fetch(
    response: Response,
    wanted: Mapping[str, list[int]],
    committed: Mapping[TopicPartition, CommittedOffset],
    error: WireError,
    refused: set[str],
) -> ResponsePayload:
    topic_entry = nested(response, "OffsetFetchResponseTopic")
    partition_entry = nested(response, "OffsetFetchResponsePartition")
    topics = []
    for name, indexes in wanted.items():
        partitions: list[Entity] = []
        for index in indexes:
            found = committed.get(TopicPartition(name, index), _NOT_COMMITTED)
            offset, metadata, leader_epoch = _NOT_COMMITTED if name in refused else found
            partitions.append(
                build(
                    partition_entry,
                    partition_index=index,
                    committed_offset=offset,
                    committed_leader_epoch=leader_epoch,
                    metadata=metadata,
                    # v1 has no top-level error: each partition carries it
                    error_code=WireError.topic_authorization_failed if name in refused else error,
                )
            )
        topics.append(build(topic_entry, name=name, partitions=tuple(partitions)))
    return build(response, throttle_time=NO_THROTTLE, topics=tuple(topics), error_code=error)


async def handle_join_group(
    context: BrokerContext,
    session: Session,
    request: JoinGroupRequest,
    response: Response,
) -> ResponsePayload:
    rebalance_timeout = (
        request.session_timeout  # v0 has one timeout for both
        if isinstance(request, join_group_v0.JoinGroupRequest)
        else request.rebalance_timeout
    )
    if not _may_read(context, session, request.group_id):
        outcome = JoinOutcome(_GROUP_REFUSED, member_id=request.member_id)
        return _encode_join_group(response, request, outcome)
    outcome = await context.groups.join(
        serving(context),
        group_id=request.group_id,
        instance_id=instance_id(request),
        member_id=request.member_id,
        protocol_type=request.protocol_type,
        protocols=[(p.name, bytes(p.metadata)) for p in request.protocols],
        session_timeout_ms=millis(request.session_timeout),
        rebalance_timeout_ms=millis(rebalance_timeout),
        require_known_member_id=request.__version__ >= 4,
        client_id=session.client_id,
        client_host=f"/{session.client_host}",  # as Kafka shows a member's address
    )
    return _encode_join_group(response, request, outcome)


def join_group_error_response(
    request: JoinGroupRequest, response: Response, code: WireError
) -> ResponsePayload:
    return _encode_join_group(response, request, JoinOutcome(code, member_id=request.member_id))


def _encode_join_group(
    response: Response, request: JoinGroupRequest, outcome: JoinOutcome
) -> ResponsePayload:
    member_entry = nested(response, "JoinGroupResponseMember")
    return build(
        response,
        throttle_time=NO_THROTTLE,
        error_code=outcome.error,
        generation_id=outcome.generation,
        protocol_type=request.protocol_type,
        protocol_name=outcome.protocol or "",
        leader=outcome.leader,
        member_id=outcome.member_id,
        members=tuple(
            build(member_entry, member_id=member, group_instance_id=instance, metadata=metadata)
            for member, instance, metadata in outcome.members
        ),
    )


async def handle_sync_group(
    context: BrokerContext,
    session: Session,
    request: SyncGroupRequest,
    response: Response,
) -> ResponsePayload:
    error: WireError = _GROUP_REFUSED
    assignment = b""
    if _may_read(context, session, request.group_id):
        error, assignment = await context.groups.sync(
            serving(context),
            request.group_id,
            int(request.generation_id),
            request.member_id,
            {a.member_id: bytes(a.assignment) for a in request.assignments},
            instance_id(request),
        )
    return _encode_sync_group(response, request, error, assignment)


def sync_group_error_response(
    request: SyncGroupRequest, response: Response, code: WireError
) -> ResponsePayload:
    return _encode_sync_group(response, request, code, b"")


def _encode_sync_group(
    response: Response, request: SyncGroupRequest, error: WireError, assignment: bytes
) -> ResponsePayload:
    protocol_type, protocol_name = (
        (request.protocol_type, request.protocol_name)
        if isinstance(request, sync_group_v5.SyncGroupRequest)  # v5 echoes the protocol
        else (None, None)
    )
    return build(
        response,
        throttle_time=NO_THROTTLE,
        error_code=error,
        protocol_type=protocol_type,
        protocol_name=protocol_name,
        assignment=assignment,
    )


async def handle_heartbeat(
    context: BrokerContext,
    session: Session,
    request: HeartbeatRequest,
    response: Response,
) -> ResponsePayload:
    if not _may_read(context, session, request.group_id):
        return build(response, throttle_time=NO_THROTTLE, error_code=_GROUP_REFUSED)
    error = await context.groups.heartbeat(
        serving(context),
        request.group_id,
        int(request.generation_id),
        request.member_id,
        instance_id(request),
    )
    return build(response, throttle_time=NO_THROTTLE, error_code=error)


async def handle_leave_group(
    context: BrokerContext, session: Session, request: LeaveGroupRequest, response: Response
) -> ResponsePayload:
    me = serving(context)
    if not _may_read(context, session, request.group_id):
        return build(response, throttle_time=NO_THROTTLE, error_code=_GROUP_REFUSED, members=())
    if isinstance(request, _ONE_MEMBER_LEAVES):
        error = await context.groups.leave(me, request.group_id, request.member_id)
        return build(response, throttle_time=NO_THROTTLE, error_code=error)
    leaving: list[tuple[str, str | None]] = [
        (member.member_id, member.group_instance_id) for member in request.members
    ]
    errors = [
        await context.groups.leave(me, request.group_id, member_id, instance)
        for member_id, instance in leaving
    ]
    return _encode_leave_group(response, leaving, errors)


def leave_group_error_response(
    request: LeaveGroupRequest, response: Response, code: WireError
) -> ResponsePayload:
    return build(response, throttle_time=NO_THROTTLE, error_code=code, members=())


def _encode_leave_group(
    response: Response, leaving: list[tuple[str, str | None]], errors: list[WireError]
) -> ResponsePayload:
    """Each member's answer, or one NOT_COORDINATOR for all: the request came to the wrong
    broker."""
    if WireError.not_coordinator in errors:
        error = WireError.not_coordinator
        return build(response, throttle_time=NO_THROTTLE, error_code=error, members=())
    member_entry = nested(response, "MemberResponse")
    members = tuple(
        build(member_entry, member_id=member_id, group_instance_id=instance, error_code=error)
        for (member_id, instance), error in zip(leaving, errors, strict=True)
    )
    return build(response, throttle_time=NO_THROTTLE, error_code=WireError.none, members=members)
