"""Administration: CreateTopics, DeleteTopics, CreatePartitions, DescribeConfigs, DeleteRecords.

Every answer is per topic (or partition) with Kafka's code and, where the version has one, a
message saying why; nothing a client asks closes its connection. Topics live in the batch
coordinator, so whichever broker is asked (Metadata names the one answering as the controller)
changes them for the whole cluster. A diskless topic has no replicas to place: a replication
factor or replica assignment is accepted and has no effect beyond the partition count it implies.
A failure of the batch coordinator gets the code of the library's error table:
`admin_error` for the topic APIs, `delete_records_error` for DeleteRecords.
"""

from __future__ import annotations

import logging
from typing import Final

import kio.schema.describe_configs.v1 as describe_configs_v1
import kio.schema.describe_configs.v2 as describe_configs_v2
from kio.schema.errors import ErrorCode as WireError
from kio.static.protocol import Entity, ResponsePayload

from diskless._kafka_errors import admin_error, delete_records_error
from diskless._types import TopicPartition
from diskless.coordinator import TopicConfig, check_topic_name
from diskless.errors import DisklessError
from diskless.kafka_server._coordination.cluster_view import topic_id
from diskless.kafka_server._handlers._errors import failure
from diskless.kafka_server._handlers._route import NO_THROTTLE, Response
from diskless.kafka_server._handlers._topic_configs import (
    InvalidConfig,
    describe_topic_config,
    parse_topic_config,
)
from diskless.kafka_server._handlers.context import (
    MAX_PARTITIONS_PER_REQUEST,
    BrokerContext,
    Session,
)
from diskless.kafka_server._protocol.fields import build, nested, wire
from diskless.kafka_server._protocol.messages_admin import (
    CreatePartitionsRequest,
    CreateTopicsRequest,
    DeleteRecordsRequest,
    DeleteTopicsRequest,
    DescribeConfigsRequest,
)

_log = logging.getLogger(__name__)

_RESOURCE_TOPIC: Final = 2
_RESOURCE_BROKER: Final = 4
_DEFAULT: Final = -1
"""num_partitions / replication_factor -1: the broker's default (Kafka 2.4+, KIP-464)."""
_TOO_MANY_PARTITIONS: Final = "Excessively large number of partitions per request."
_WITHOUT_DOCUMENTATION: Final = (
    describe_configs_v1.DescribeConfigsRequest,
    describe_configs_v2.DescribeConfigsRequest,
)
"""DescribeConfigs v3 added `include_documentation`."""


class _Refused(Exception):
    def __init__(self, code: WireError, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message


# --- CreateTopics ---------------------------------------------------------------------------------
def _partition_count(context: BrokerContext, num_partitions: int, assignments: int) -> int:
    if assignments:
        if num_partitions != _DEFAULT:
            raise _Refused(
                WireError.invalid_request, "give either num_partitions or replica assignments"
            )
        return assignments
    if num_partitions == _DEFAULT:
        return max(context.config.auto_create_topic_partitions, 1)  # Kafka's num.partitions
    if num_partitions < 1:
        raise _Refused(WireError.invalid_partitions, f"{num_partitions} partitions: at least 1")
    return num_partitions


def _requested_partitions(context: BrokerContext, request: CreateTopicsRequest) -> int:
    """Counted as Kafka counts them, before any other check: invalid counts add nothing."""
    total = 0
    for topic in request.topics:
        if topic.assignments:
            total += len(topic.assignments)
        elif int(topic.num_partitions) == _DEFAULT:
            total += max(context.config.auto_create_topic_partitions, 1)
        elif int(topic.num_partitions) > 0:
            total += int(topic.num_partitions)
    return total


async def handle_create_topics(
    context: BrokerContext,
    session: Session,
    request: CreateTopicsRequest,
    response: Response,
) -> ResponsePayload:
    result_entry = nested(response, "CreatableTopicResult")
    # v5 (KIP-525) echoes the topic's configs; older versions have no entry for them.
    config_entry = nested(response, "CreatableTopicConfigs") if response.__version__ >= 5 else None
    results: list[Entity] = []
    names = [t.name for t in request.topics]
    too_many = _requested_partitions(context, request) > MAX_PARTITIONS_PER_REQUEST
    for topic in request.topics:
        partitions, config = 0, TopicConfig()
        try:
            if too_many:
                raise _Refused(WireError.policy_violation, _TOO_MANY_PARTITIONS)
            if names.count(topic.name) > 1:
                raise _Refused(WireError.invalid_request, f"topic {topic.name!r} given twice")
            try:
                check_topic_name(topic.name)
            except ValueError as e:
                raise _Refused(WireError.invalid_topic_exception, str(e)) from None
            partitions = _partition_count(
                context, int(topic.num_partitions), len(topic.assignments)
            )
            if int(topic.replication_factor) == 0 or int(topic.replication_factor) < _DEFAULT:
                raise _Refused(
                    WireError.invalid_replication_factor,
                    f"replication factor {topic.replication_factor}: at least 1",
                )
            try:
                config = parse_topic_config((c.name, c.value) for c in topic.configs)
            except InvalidConfig as e:
                raise _Refused(WireError.invalid_config, str(e)) from None
            if request.validate_only:
                known = await context.broker.describe_topics([topic.name])
                created = not known
            else:
                created = await context.broker.create_topic(topic.name, partitions, config)
            if not created:
                raise _Refused(
                    WireError.topic_already_exists, f"topic {topic.name!r} already exists"
                )
            error, message = WireError.none, None
        except _Refused as refused:
            error, message = refused.code, refused.message
        except ValueError as e:  # a rule of the coordinator
            error, message = WireError.invalid_request, str(e)
        except DisklessError as e:
            error = failure(admin_error, e, f"creating topic {topic.name!r}")
            message = "the batch coordinator is unavailable; try again"
        ok = error is WireError.none
        if ok:
            _log.info("created topic %r with %d partitions", topic.name, partitions)
        results.append(
            build(
                result_entry,
                name=topic.name,
                topic_id=topic_id(topic.name) if ok else None,
                error_code=error,
                error_message=message,
                topic_config_error_code=WireError.none,
                num_partitions=partitions if ok else -1,
                replication_factor=1 if ok else -1,
                configs=tuple(
                    build(
                        config_entry,
                        name=e.name,
                        value=e.value,
                        read_only=e.read_only,
                        config_source=int(e.source),
                        is_sensitive=False,
                    )
                    for e in (describe_topic_config(config) if ok and config_entry else ())
                    if config_entry is not None
                ),
            )
        )
    return build(response, throttle_time=NO_THROTTLE, topics=tuple(results))


# --- DeleteTopics ---------------------------------------------------------------------------------
async def handle_delete_topics(
    context: BrokerContext,
    session: Session,
    request: DeleteTopicsRequest,
    response: Response,
) -> ResponsePayload:
    names = list(dict.fromkeys(request.topic_names))
    errors: dict[str, WireError] = {}
    try:
        known = {d.name for d in await context.broker.describe_topics(names)}
        errors = {n: WireError.unknown_topic_or_partition for n in names if n not in known}
        if known:
            await context.broker.delete_topics(sorted(known))
            _log.info("deleted topics %s", sorted(known))
    except DisklessError as e:
        code = failure(admin_error, e, "deleting topics")
        errors = dict.fromkeys(names, code)
    entry = nested(response, "DeletableTopicResult")
    return build(
        response,
        throttle_time=NO_THROTTLE,
        responses=tuple(
            build(
                entry,
                name=name,
                error_code=errors.get(name, WireError.none),
                error_message=None,
            )
            for name in names
        ),
    )


# --- CreatePartitions -----------------------------------------------------------------------------
async def _added_partitions(context: BrokerContext, request: CreatePartitionsRequest) -> int:
    """How many partitions the request would add to the topics that exist."""
    if not request.topics:
        return 0
    current = {
        d.name: d.partitions
        for d in await context.broker.describe_topics(list({t.name for t in request.topics}))
    }
    return sum(max(int(t.count) - current[t.name], 0) for t in request.topics if t.name in current)


async def handle_create_partitions(
    context: BrokerContext,
    session: Session,
    request: CreatePartitionsRequest,
    response: Response,
) -> ResponsePayload:
    entry = nested(response, "CreatePartitionsTopicResult")
    results: list[Entity] = []
    too_many = False
    try:
        too_many = await _added_partitions(context, request) > MAX_PARTITIONS_PER_REQUEST
    except DisklessError as e:
        failed = failure(admin_error, e, "growing topics")
        return build(
            response,
            throttle_time=NO_THROTTLE,
            results=tuple(
                build(entry, name=t.name, error_code=failed, error_message=failed.name)
                for t in request.topics
            ),
        )
    for topic in request.topics:
        count = int(topic.count)
        try:
            if too_many:
                error = WireError.policy_violation
            elif request.validate_only:
                known = await context.broker.describe_topics([topic.name])
                if not known:
                    error = WireError.unknown_topic_or_partition
                elif count <= known[0].partitions:
                    error = WireError.invalid_partitions
                else:
                    error = WireError.none
            else:
                error = wire(await context.broker.create_partitions(topic.name, count))
        except DisklessError as e:
            error = failure(admin_error, e, f"growing topic {topic.name!r}")
        message = {
            WireError.none: None,
            WireError.invalid_partitions: f"topic {topic.name!r} has {count} or more partitions",
            WireError.unknown_topic_or_partition: f"unknown topic {topic.name!r}",
            WireError.policy_violation: _TOO_MANY_PARTITIONS,
        }.get(error, error.name)
        results.append(build(entry, name=topic.name, error_code=error, error_message=message))
    return build(response, throttle_time=NO_THROTTLE, results=tuple(results))


# --- DescribeConfigs ------------------------------------------------------------------------------
async def handle_describe_configs(
    context: BrokerContext,
    session: Session,
    request: DescribeConfigsRequest,
    response: Response,
) -> ResponsePayload:
    result_entry = nested(response, "DescribeConfigsResult")
    config_entry = nested(response, "DescribeConfigsResourceResult")
    topics = [r.resource_name for r in request.resources if r.resource_type == _RESOURCE_TOPIC]
    failed: WireError | None = None
    configs: dict[str, TopicConfig] = {}
    try:
        if topics:
            configs = {d.name: d.config for d in await context.broker.describe_topics(topics)}
    except DisklessError as e:
        failed = failure(admin_error, e, "describing topic configs")
    documented = not isinstance(request, _WITHOUT_DOCUMENTATION) and bool(
        request.include_documentation
    )
    results: list[Entity] = []
    for resource in request.resources:
        entries: list[Entity] = []
        error, message = WireError.none, None
        if resource.resource_type == _RESOURCE_BROKER:
            pass  # no broker config is exposed: an empty list
        elif resource.resource_type != _RESOURCE_TOPIC:
            error = WireError.invalid_request
            message = f"resource type {resource.resource_type} is not supported"
        elif failed is not None:
            error, message = failed, "the batch coordinator is unavailable; try again"
        elif resource.resource_name not in configs:
            error = WireError.unknown_topic_or_partition
            message = f"unknown topic {resource.resource_name!r}"
        else:
            keys = resource.configuration_keys
            for config in describe_topic_config(configs[resource.resource_name]):
                if keys is not None and config.name not in keys:
                    continue
                entries.append(
                    build(
                        config_entry,
                        name=config.name,
                        value=config.value,
                        read_only=config.read_only,
                        config_source=int(config.source),
                        is_sensitive=False,
                        synonyms=(),
                        config_type=int(config.type),
                        documentation="" if documented else None,
                    )
                )
        results.append(
            build(
                result_entry,
                error_code=error,
                error_message=message,
                resource_type=resource.resource_type,
                resource_name=resource.resource_name,
                configs=tuple(entries),
            )
        )
    return build(response, throttle_time=NO_THROTTLE, results=tuple(results))


# --- DeleteRecords --------------------------------------------------------------------------------
async def handle_delete_records(
    context: BrokerContext,
    session: Session,
    request: DeleteRecordsRequest,
    response: Response,
) -> ResponsePayload:
    offsets = {
        TopicPartition(topic.name, int(p.partition_index)): int(p.offset)
        for topic in request.topics
        for p in topic.partitions
    }
    answers: dict[TopicPartition, tuple[WireError, int]] = {}
    try:
        for tp, result in (await context.broker.delete_records(offsets)).items():
            answers[tp] = (wire(result.error), result.low_watermark)
    except DisklessError as e:
        code = failure(delete_records_error, e, "deleting records")
        answers = dict.fromkeys(offsets, (code, -1))
    topic_entry = nested(response, "DeleteRecordsTopicResult")
    partition_entry = nested(response, "DeleteRecordsPartitionResult")
    return build(
        response,
        throttle_time=NO_THROTTLE,
        topics=tuple(
            build(
                topic_entry,
                name=topic.name,
                partitions=tuple(
                    build(
                        partition_entry,
                        partition_index=p.partition_index,
                        error_code=code,
                        low_watermark=low_watermark,
                    )
                    for p in topic.partitions
                    for code, low_watermark in (
                        answers.get(
                            TopicPartition(topic.name, int(p.partition_index)),
                            (WireError.unknown_topic_or_partition, -1),
                        ),
                    )
                ),
            )
            for topic in request.topics
        ),
    )
