"""What the answers of server-side membership share: the heartbeats of KIP-848's consumer groups
and KIP-932's share groups (`_consumer_groups`, `_share_groups`), and their describes.

Both answer a member's partitions by topic id, translated here from the names the state
machines use (a topic deleted since has no id and is left out), and both describe groups alike:
DESCRIBE on each group, else its GROUP_AUTHORIZATION_FAILED; a group of another kind, or none,
GROUP_ID_NOT_FOUND with Kafka's message; KIP-430's authorized operations when asked. Only the
members differ, and each caller encodes its own.
"""

from __future__ import annotations

import datetime
import uuid
from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from typing import Any, Protocol, TypeVar

from kio.schema.errors import ErrorCode as WireError
from kio.static.protocol import Entity, ResponsePayload

from diskless._kafka_errors import group_error
from diskless._types import TopicPartition
from diskless.coordinator import ResourceType
from diskless.errors import DisklessError
from diskless.kafka_server._coordination.consumer_group_state import HeartbeatAnswer
from diskless.kafka_server._coordination.group_description import DEAD, GroupDescription
from diskless.kafka_server._handlers._access import DESCRIBE, OPERATIONS_NOT_ASKED, Access
from diskless.kafka_server._handlers._errors import failure
from diskless.kafka_server._handlers._route import NO_THROTTLE, Response
from diskless.kafka_server._handlers.context import BrokerContext, Session
from diskless.kafka_server._protocol.fields import build, nested


class Described(Protocol):
    """A group as its describe answers it (consumer or share)."""

    @property
    def state(self) -> str: ...
    @property
    def group_epoch(self) -> int: ...
    @property
    def assignment_epoch(self) -> int: ...
    @property
    def assignor(self) -> str: ...
    @property
    def members(self) -> Sequence[Any]: ...


D = TypeVar("D", bound=Described)
Assignment = Callable[[Iterable[TopicPartition]], Entity]
"""A member's partitions as the describe's `Assignment` entry."""
MemberEncoder = Callable[[type[Entity], Any, Assignment], Entity]
"""One described member as the response's `Member` entry."""


def encode_heartbeat(
    response: Response, answer: HeartbeatAnswer, ids: Mapping[str, uuid.UUID]
) -> ResponsePayload:
    assignment = None
    if answer.assignment is not None:
        entry = nested(response, "TopicPartitions")
        assignment = build(
            nested(response, "Assignment"),
            topic_partitions=partitions_by_topic(entry, answer.assignment, ids, named=False),
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


def partitions_by_topic(
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


async def describe_groups(
    context: BrokerContext,
    session: Session,
    group_ids: Iterable[str],
    response: Response,
    *,
    authorized_operations: bool,
    kind: str,
    describe: Callable[[str], Awaitable[D | GroupDescription | WireError]],
    described: type[D],
    member: MemberEncoder,
) -> ResponsePayload:
    """ConsumerGroupDescribe or ShareGroupDescribe: `describe` answers a group of `kind` as
    `described`, any other (or none) as its `GroupDescription`, or fails with a WireError."""
    access = Access(context, session)
    answers: list[tuple[str, D | WireError]] = []
    messages: dict[str, str] = {}
    for group_id in group_ids:
        if not access.group(DESCRIBE, group_id):
            answers.append((group_id, WireError.group_authorization_failed))
            continue
        try:
            got = await describe(group_id)
        except DisklessError as e:
            got = failure(group_error, e, f"describing a {kind} group")
        if isinstance(got, GroupDescription):
            messages[group_id] = (
                f"Group {group_id} not found."
                if got.state == DEAD
                else f"Group {group_id} is not a {kind} group."
            )
            got = WireError.group_id_not_found
        answers.append((group_id, got))
    ids: dict[str, uuid.UUID] = {}
    if any(isinstance(answer, described) for _, answer in answers):
        try:
            ids = {d.name: d.topic_id for d in await context.broker.describe_topics()}
        except DisklessError as e:
            error = failure(group_error, e, "listing topics")
            answers = [(g, error if isinstance(a, described) else a) for g, a in answers]
    entry = nested(response, "DescribedGroup")
    groups = tuple(
        _describe_group(
            response,
            entry,
            group_id,
            answer,
            ids,
            member,
            message=messages.get(group_id),
            operations=access.operations(ResourceType.GROUP, group_id)
            if authorized_operations
            else OPERATIONS_NOT_ASKED,
        )
        for group_id, answer in answers
    )
    return build(response, throttle_time=NO_THROTTLE, groups=groups)


def describe_error_response(
    group_ids: Iterable[str], response: Response, code: WireError
) -> ResponsePayload:
    """Every group answered `code`."""
    entry = nested(response, "DescribedGroup")
    groups = tuple(_error_entry(entry, group_id, code, None) for group_id in group_ids)
    return build(response, throttle_time=NO_THROTTLE, groups=groups)


def _error_entry(
    entry: type[Entity], group_id: str, code: WireError, message: str | None
) -> Entity:
    return build(
        entry,
        error_code=code,
        error_message=message,
        group_id=group_id,
        group_state="",
        group_epoch=-1,
        assignment_epoch=-1,
        assignor_name="",
        members=(),
        authorized_operations=OPERATIONS_NOT_ASKED,
    )


def _describe_group(
    response: Response,
    entry: type[Entity],
    group_id: str,
    answer: Described | WireError,
    ids: Mapping[str, uuid.UUID],
    member: MemberEncoder,
    *,
    message: str | None,
    operations: int,
) -> Entity:
    if isinstance(answer, WireError):
        return _error_entry(entry, group_id, answer, message)
    member_entry = nested(response, "Member")
    assignment_entry = nested(response, "Assignment")
    partitions_entry = nested(response, "TopicPartitions")

    def assignment(partitions: Iterable[TopicPartition]) -> Entity:
        topics = partitions_by_topic(partitions_entry, partitions, ids, named=True)
        return build(assignment_entry, topic_partitions=topics)

    return build(
        entry,
        error_code=WireError.none,
        error_message=None,
        group_id=group_id,
        group_state=answer.state,
        group_epoch=answer.group_epoch,
        assignment_epoch=answer.assignment_epoch,
        assignor_name=answer.assignor,
        members=tuple(member(member_entry, m, assignment) for m in answer.members),
        authorized_operations=operations,
    )
