"""Administration: CreateTopics, DeleteTopics, CreatePartitions, DeleteRecords (configs:
`_configs`).

Every answer is per topic (or partition) with Kafka's code and, where the version has one, a
message saying why; nothing a client asks closes its connection. Topics live in the batch
coordinator, so whichever broker is asked (Metadata names the one answering as the controller)
changes them for the whole cluster. A diskless topic has no replicas to place: a replication
factor or replica assignment is accepted and has no effect beyond the partition count it implies.
A failure of the batch coordinator gets the code of the library's error table:
`admin_error` for the topic APIs, `delete_records_error` for DeleteRecords.

Authorization, per topic before anything else is asked of it: CreateTopics needs CREATE on the
cluster or the topic, DeleteTopics and DeleteRecords DELETE, CreatePartitions ALTER
(TOPIC_AUTHORIZATION_FAILED).
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Mapping, Sequence, Sized
from typing import Final, NamedTuple, Protocol

import kio.schema.delete_topics.v6 as delete_topics_v6
from kio.schema.errors import ErrorCode as WireError
from kio.static.protocol import Entity, ResponsePayload

from diskless._kafka_errors import admin_error, delete_records_error
from diskless._types import ErrorCode, TopicPartition
from diskless.coordinator import TopicConfig, check_topic_name
from diskless.errors import DisklessError
from diskless.kafka_server._handlers._access import (
    ALTER,
    CREATE,
    DELETE,
    Access,
)
from diskless.kafka_server._handlers._broker_configs import topic_defaults
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
    TopicDefaults,
)
from diskless.kafka_server._protocol.fields import build, nested, wire
from diskless.kafka_server._protocol.messages_admin import (
    CreatePartitionsRequest,
    CreateTopicsRequest,
    DeleteRecordsRequest,
    DeleteTopicsRequest,
)

_log = logging.getLogger(__name__)

_DEFAULT: Final = -1
"""num_partitions / replication_factor -1: the broker's default (Kafka 2.4+, KIP-464)."""
_TOO_MANY_PARTITIONS: Final = "Excessively large number of partitions per request."
_NOT_AUTHORIZED: Final = "Authorization failed."


class _Config(Protocol):
    @property
    def name(self) -> str: ...

    @property
    def value(self) -> str | None: ...


class _Topic(Protocol):
    """A CreateTopics request's topic entry (`CreatableTopic`), of whichever version."""

    @property
    def name(self) -> str: ...

    @property
    def num_partitions(self) -> int: ...

    @property
    def replication_factor(self) -> int: ...

    @property
    def assignments(self) -> Sized: ...

    @property
    def configs(self) -> Sequence[_Config]: ...


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
        return context.config.num_partitions
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
            total += context.config.num_partitions
        elif int(topic.num_partitions) > 0:
            total += int(topic.num_partitions)
    return total


class _Created(NamedTuple):
    """One topic of a CreateTopics request, created or refused."""

    error: WireError
    message: str | None
    partitions: int = -1
    config: TopicConfig | None = None
    topic_id: uuid.UUID | None = None


async def handle_create_topics(
    context: BrokerContext, session: Session, request: CreateTopicsRequest, response: Response
) -> ResponsePayload:
    names = [t.name for t in request.topics]
    too_many = _requested_partitions(context, request) > MAX_PARTITIONS_PER_REQUEST
    access = Access(context, session)
    creatable = set(names) if access.cluster(CREATE) else access.topics(CREATE, names)
    created = []
    defaults = context.config.topic_defaults
    unavailable: WireError | None = None
    try:
        defaults = await topic_defaults(context)
    except DisklessError as e:
        unavailable = failure(admin_error, e, "reading the dynamic topic defaults")
    for topic in request.topics:
        try:
            if unavailable is not None:
                raise _Refused(unavailable, "the batch coordinator is unavailable; try again")
            if too_many:
                raise _Refused(WireError.policy_violation, _TOO_MANY_PARTITIONS)
            if names.count(topic.name) > 1:
                raise _Refused(WireError.invalid_request, f"topic {topic.name!r} given twice")
            if topic.name not in creatable:
                raise _Refused(WireError.topic_authorization_failed, _NOT_AUTHORIZED)
            created.append(
                await _create_topic(context, topic, bool(request.validate_only), defaults)
            )
        except _Refused as refused:
            created.append(_Created(refused.code, refused.message))
    return _encode_create_topics(response, request, created, defaults)


async def _create_topic(
    context: BrokerContext, topic: _Topic, validate_only: bool, defaults: TopicDefaults
) -> _Created:
    """Kafka's checks, in Kafka's order, then the topic created (or, validating only, found
    not to exist yet); raises `_Refused`."""
    try:
        check_topic_name(topic.name)
    except ValueError as e:
        raise _Refused(WireError.invalid_topic_exception, str(e)) from None
    partitions = _partition_count(context, int(topic.num_partitions), len(topic.assignments))
    if int(topic.replication_factor) == 0 or int(topic.replication_factor) < _DEFAULT:
        raise _Refused(
            WireError.invalid_replication_factor,
            f"replication factor {topic.replication_factor}: at least 1",
        )
    try:
        config = parse_topic_config(((c.name, c.value) for c in topic.configs), defaults)
    except InvalidConfig as e:
        raise _Refused(WireError.invalid_config, str(e)) from None
    try:
        if validate_only:
            known = await context.broker.describe_topics([topic.name])
            created = ErrorCode.TOPIC_ALREADY_EXISTS if known else ErrorCode.NONE
        else:
            created = await context.broker.create_topic(topic.name, partitions, config)
    except ValueError as e:  # a rule of the coordinator
        raise _Refused(WireError.invalid_request, str(e)) from None
    except DisklessError as e:
        error = failure(admin_error, e, f"creating topic {topic.name!r}")
        return _Created(error, "the batch coordinator is unavailable; try again")
    if created is not ErrorCode.NONE:
        raise _Refused(wire(created), f"topic {topic.name!r} already exists")
    _log.info("created topic %r with %d partitions", topic.name, partitions)
    return _Created(WireError.none, None, partitions, config, await _topic_id(context, topic.name))


async def _topic_id(context: BrokerContext, name: str) -> uuid.UUID | None:
    """The id the coordinator gave a topic just created (None: not known now; the topic was
    created all the same, and Metadata tells its id)."""
    try:
        described = await context.broker.describe_topics([name])
    except DisklessError as e:
        _log.debug("cannot describe created topic %r: %r", name, e)
        return None
    return described[0].topic_id if described else None


def _encode_create_topics(
    response: Response,
    request: CreateTopicsRequest,
    created: list[_Created],
    defaults: TopicDefaults,
) -> ResponsePayload:
    result_entry = nested(response, "CreatableTopicResult")
    # v5 (KIP-525) echoes the topic's configs; older versions have no entry for them.
    config_entry = nested(response, "CreatableTopicConfigs") if response.__version__ >= 5 else None
    results = []
    outcomes = iter(created)  # one per topic, in order
    for topic in request.topics:
        outcome = next(outcomes)
        ok = outcome.error is WireError.none
        configs: tuple[Entity, ...] = ()
        if config_entry is not None and outcome.config is not None:
            configs = tuple(
                build(
                    config_entry,
                    name=e.name,
                    value=e.value,
                    read_only=e.read_only,
                    config_source=int(e.source),
                    is_sensitive=False,
                )
                for e in describe_topic_config(outcome.config, defaults)
            )
        results.append(
            build(
                result_entry,
                name=topic.name,
                topic_id=outcome.topic_id if ok else None,
                error_code=outcome.error,
                error_message=outcome.message,
                topic_config_error_code=WireError.none,
                num_partitions=outcome.partitions,
                replication_factor=1 if ok else -1,
                configs=configs,
            )
        )
    return build(response, throttle_time=NO_THROTTLE, topics=tuple(results))


# --- DeleteTopics ---------------------------------------------------------------------------------
class _Deleted(NamedTuple):
    """One topic of a DeleteTopics request, as answered."""

    name: str | None
    topic_id: uuid.UUID | None
    error: WireError = WireError.none
    message: str | None = None


async def handle_delete_topics(
    context: BrokerContext, session: Session, request: DeleteTopicsRequest, response: Response
) -> ResponsePayload:
    """By name, or (v6, KIP-516) by topic id: the topic that has that id when the request is
    read."""
    asked = await _named(context, request)
    names = list(
        dict.fromkeys(t.name for t in asked if t.name is not None and t.error is WireError.none)
    )
    allowed = Access(context, session).topics(DELETE, names)
    errors = {n: WireError.topic_authorization_failed for n in names if n not in allowed}
    names = [n for n in names if n in allowed]
    try:
        deleted = await context.broker.delete_topics(names) if names else []
        errors.update({n: wire(code) for n, code in zip(names, deleted, strict=True)})
        if gone := [n for n, code in zip(names, deleted, strict=True) if code is ErrorCode.NONE]:
            _log.info("deleted topics %s", gone)
    except DisklessError as e:
        code = failure(admin_error, e, "deleting topics")
        errors.update(dict.fromkeys(names, code))
    entry = nested(response, "DeletableTopicResult")
    results = []
    for topic in asked:
        error = topic.error
        if error is WireError.none and topic.name is not None:
            error = errors.get(topic.name, WireError.none)
        # A topic asked for by id that the principal may not delete keeps its name unsaid.
        hidden = error is WireError.topic_authorization_failed and topic.topic_id is not None
        results.append(
            build(
                entry,
                name=None if hidden else topic.name,
                topic_id=topic.topic_id,
                error_code=error,
                error_message=topic.message,
            )
        )
    return build(response, throttle_time=NO_THROTTLE, responses=tuple(results))


async def _named(context: BrokerContext, request: DeleteTopicsRequest) -> list[_Deleted]:
    """The topics asked for, once each, those asked for by id named (Kafka's checks: a name and
    an id together, or an id no topic has, are refused)."""
    if not isinstance(request, delete_topics_v6.DeleteTopicsRequest):
        return [_Deleted(name, None) for name in dict.fromkeys(request.topic_names)]
    asked = list(dict.fromkeys((t.name, t.topic_id) for t in request.topics))
    ids: dict[uuid.UUID, str] = {}
    failed: WireError | None = None
    if any(name is None and topic_id is not None for name, topic_id in asked):
        try:
            ids = {d.topic_id: d.name for d in await context.broker.describe_topics()}
        except DisklessError as e:
            failed = failure(admin_error, e, "describing topics to delete by id")
    found = []
    for name, topic_id in asked:
        if name is not None and topic_id is not None:
            message = "a topic is named by its name or its id, not both"
            found.append(_Deleted(name, topic_id, WireError.invalid_request, message))
        elif topic_id is None:
            found.append(_Deleted(name, None))
        elif failed is not None:
            found.append(_Deleted(None, topic_id, failed, "the batch coordinator is unavailable"))
        elif topic_id not in ids:
            found.append(_Deleted(None, topic_id, WireError.unknown_topic_id, "unknown topic id"))
        else:
            found.append(_Deleted(ids[topic_id], topic_id))
    return found


# --- CreatePartitions -----------------------------------------------------------------------------
async def handle_create_partitions(
    context: BrokerContext, session: Session, request: CreatePartitionsRequest, response: Response
) -> ResponsePayload:
    allowed = Access(context, session).topics(ALTER, (t.name for t in request.topics))
    too_many = await _added_partitions(context, request) > MAX_PARTITIONS_PER_REQUEST
    errors = [
        await _grow_topic(context, t.name, int(t.count), bool(request.validate_only), too_many)
        if t.name in allowed
        else WireError.topic_authorization_failed
        for t in request.topics
    ]
    return _encode_create_partitions(response, request, errors)


def create_partitions_error_response(
    request: CreatePartitionsRequest, response: Response, code: WireError
) -> ResponsePayload:
    return _encode_create_partitions(response, request, [code] * len(request.topics))


def _encode_create_partitions(
    response: Response, request: CreatePartitionsRequest, errors: Sequence[WireError]
) -> ResponsePayload:
    entry = nested(response, "CreatePartitionsTopicResult")
    answers = iter(errors)  # one per topic, in order
    results = tuple(
        build(entry, name=t.name, error_code=error, error_message=_grown(error, t.name, t.count))
        for t in request.topics
        for error in (next(answers),)
    )
    return build(response, throttle_time=NO_THROTTLE, results=results)


async def _added_partitions(context: BrokerContext, request: CreatePartitionsRequest) -> int:
    """How many partitions the request would add to the topics that exist."""
    if not request.topics:
        return 0
    current = {
        d.name: d.partitions
        for d in await context.broker.describe_topics(list({t.name for t in request.topics}))
    }
    return sum(max(int(t.count) - current[t.name], 0) for t in request.topics if t.name in current)


async def _grow_topic(
    context: BrokerContext, name: str, count: int, validate_only: bool, too_many: bool
) -> WireError:
    try:
        if too_many:
            return WireError.policy_violation
        if not validate_only:
            return wire(await context.broker.create_partitions(name, count))
        known = await context.broker.describe_topics([name])
    except DisklessError as e:
        return failure(admin_error, e, f"growing topic {name!r}")
    if not known:
        return WireError.unknown_topic_or_partition
    return WireError.invalid_partitions if count <= known[0].partitions else WireError.none


def _grown(error: WireError, name: str, count: int) -> str | None:
    """The message of a topic's answer."""
    return {
        WireError.none: None,
        WireError.invalid_partitions: f"topic {name!r} has {count} or more partitions",
        WireError.unknown_topic_or_partition: f"unknown topic {name!r}",
        WireError.policy_violation: _TOO_MANY_PARTITIONS,
        WireError.topic_authorization_failed: _NOT_AUTHORIZED,
    }.get(error, error.name)


# --- DeleteRecords --------------------------------------------------------------------------------
async def handle_delete_records(
    context: BrokerContext, session: Session, request: DeleteRecordsRequest, response: Response
) -> ResponsePayload:
    offsets = {
        TopicPartition(topic.name, int(p.partition_index)): int(p.offset)
        for topic in request.topics
        for p in topic.partitions
    }
    refused = Access(context, session).refused(DELETE, offsets)
    answers = dict.fromkeys(refused, (WireError.topic_authorization_failed, -1))
    for tp in refused:
        del offsets[tp]
    try:
        for tp, result in (await context.broker.delete_records(offsets)).items():
            answers[tp] = (wire(result.error), result.low_watermark)
    except DisklessError as e:
        code = failure(delete_records_error, e, "deleting records")
        answers.update(dict.fromkeys(offsets, (code, -1)))
    return _encode_delete_records(response, request, answers)


def _encode_delete_records(
    response: Response,
    request: DeleteRecordsRequest,
    answers: Mapping[TopicPartition, tuple[WireError, int]],
) -> ResponsePayload:
    topic_entry = nested(response, "DeleteRecordsTopicResult")
    partition_entry = nested(response, "DeleteRecordsPartitionResult")
    unknown = (WireError.unknown_topic_or_partition, -1)
    topics = []
    for topic in request.topics:
        partitions = []
        for p in topic.partitions:
            code, low_watermark = answers.get(
                TopicPartition(topic.name, int(p.partition_index)), unknown
            )
            partitions.append(
                build(
                    partition_entry,
                    partition_index=p.partition_index,
                    error_code=code,
                    low_watermark=low_watermark,
                )
            )
        topics.append(build(topic_entry, name=topic.name, partitions=tuple(partitions)))
    return build(response, throttle_time=NO_THROTTLE, topics=tuple(topics))
