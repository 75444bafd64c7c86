"""DescribeTopicPartitions (KIP-966): Metadata's topics, paged, which newer admin clients list
topics with.

Each partition is the entry Metadata answers for it (`_discovery.partitions_of`), so both
name the same leader, leader epoch, replicas and ISR, and follow each other as those change.
"""

from __future__ import annotations

from typing import Final

from kio.schema.errors import ErrorCode as WireError
from kio.static.protocol import Entity, ResponsePayload

from diskless.coordinator import ResourceType
from diskless.kafka_server._handlers._access import DESCRIBE, Access
from diskless.kafka_server._handlers._discovery import missing_topic, partitions_of
from diskless.kafka_server._handlers._route import NO_THROTTLE, Response
from diskless.kafka_server._handlers._steps import Steps
from diskless.kafka_server._handlers.context import BrokerContext, Session
from diskless.kafka_server._protocol.fields import build, nested
from diskless.kafka_server._protocol.messages_cluster import DescribeTopicPartitionsRequest

PARTITIONS_PER_PAGE_MAX: Final = 2000
"""Kafka's `max.request.partition.size.limit` default: one DescribeTopicPartitions answer holds
no more partitions than this, whatever the request's `response_partition_limit`."""


async def handle_describe_topic_partitions(
    context: BrokerContext,
    session: Session,
    request: DescribeTopicPartitionsRequest,
    response: Response,
) -> ResponsePayload:
    """KIP-966: Metadata's topics, paged, as Kafka's `DescribeTopicPartitionsRequestHandler`.

    The topics named (none: every topic the principal may DESCRIBE) from the cursor's on, by
    name; at most `response_partition_limit` partitions (1 to `PARTITIONS_PER_PAGE_MAX`), then
    `next_cursor` says where the next page starts. Each partition is Metadata's entry for it,
    each topic carries KIP-430's operations. A named topic that is missing is
    UNKNOWN_TOPIC_OR_PARTITION (or INVALID_TOPIC_EXCEPTION); one the principal may not describe
    TOPIC_AUTHORIZATION_FAILED, without its id, whether it exists or not. A cursor on a topic
    not named, or on a negative partition, is an invalid request."""
    cursor = request.cursor
    start = cursor.topic_name if cursor is not None else ""
    everything = not request.topics
    asked = sorted({t.name for t in request.topics if t.name >= start})
    if cursor is not None and (
        cursor.partition_index < 0 or (not everything and cursor.topic_name not in asked)
    ):
        return describe_topic_partitions_error_response(
            request, response, WireError.invalid_request
        )
    access = Access(context, session)
    refused = set(asked) - access.topics(DESCRIBE, asked)
    described = await context.broker.describe_topics(
        None if everything else [n for n in asked if n not in refused],
        cut_off=context.broker_id in context.cluster.lapsed(),
    )
    known = {d.name: d for d in described}
    if everything:
        names = sorted(n for n in access.topics(DESCRIBE, known) if n >= start)
    else:
        names = [n for n in asked if n not in refused]
    topic_entry = nested(response, "DescribeTopicPartitionsResponseTopic")
    rack = session.client_rack if session.client_rack is not None else context.rack
    reachable = {b.broker_id: b.on(session.listener) for b in context.cluster.brokers()}
    remaining = max(min(PARTITIONS_PER_PAGE_MAX, int(request.response_partition_limit)), 1)
    entries: list[Entity] = []
    next_cursor: tuple[str, int] | None = None
    steps = Steps()
    for name in names:
        await steps.pause()
        if remaining == 0:
            next_cursor = (name, 0)
            break
        description = known.get(name)
        if description is None:
            if not everything:
                error = missing_topic(name, WireError.unknown_topic_or_partition)
                entries.append(
                    build(topic_entry, error_code=error, name=name, topic_id=None, partitions=())
                )
            continue
        first = cursor.partition_index if cursor is not None and name == start else 0
        end = min(description.partitions, first + remaining)
        partitions = partitions_of(
            response,
            context,
            name,
            end,
            rack,
            reachable,
            first=first,
            entry="DescribeTopicPartitionsResponsePartition",
        )
        entries.append(
            build(
                topic_entry,
                error_code=WireError.none,
                name=name,
                topic_id=description.topic_id,
                is_internal=False,
                partitions=partitions,
                topic_authorized_operations=access.operations(ResourceType.TOPIC, name),
            )
        )
        if end < description.partitions:
            next_cursor = (name, end)
            break
        remaining -= max(end - first, 0)
    entries.extend(
        build(
            topic_entry,
            error_code=WireError.topic_authorization_failed,
            name=name,
            topic_id=None,
            partitions=(),
        )
        for name in sorted(refused)
    )
    cursor_entry = nested(response, "Cursor")
    return build(
        response,
        throttle_time=NO_THROTTLE,
        topics=tuple(entries),
        next_cursor=(
            None
            if next_cursor is None
            else build(cursor_entry, topic_name=next_cursor[0], partition_index=next_cursor[1])
        ),
    )


def describe_topic_partitions_error_response(
    request: DescribeTopicPartitionsRequest, response: Response, code: WireError
) -> ResponsePayload:
    """Every topic named answered `code` (Kafka's `getErrorResponse`)."""
    topic_entry = nested(response, "DescribeTopicPartitionsResponseTopic")
    topics = tuple(
        build(topic_entry, error_code=code, name=t.name, topic_id=None, partitions=())
        for t in request.topics
    )
    return build(response, throttle_time=NO_THROTTLE, topics=topics, next_cursor=None)
