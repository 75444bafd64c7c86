"""Discovery: ApiVersions, Metadata and FindCoordinator, which tell a client where to send what.

Metadata names a leader per partition although the write path has none: see
`_coordination.cluster_view` for whom it names and why.

Authorization as Kafka's: Metadata of all topics lists only those the principal may DESCRIBE;
a topic named explicitly without DESCRIBE is answered TOPIC_AUTHORIZATION_FAILED whether it
exists or not (so the answer gives nothing away), and so is a missing one that would be created
without CREATE on the cluster or on the topic. FindCoordinator needs DESCRIBE on the group or
the transactional id. KIP-430's authorized operations are answered when asked (v8+): each topic
answered (not one refused) with the principal's operations on it, and the cluster's (v8 to v10)
with none unless the principal may DESCRIBE the cluster, as Kafka answers them.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Mapping
from typing import Final, NamedTuple

import kio.schema.find_coordinator.v0 as find_coordinator_v0
import kio.schema.find_coordinator.v4 as find_coordinator_v4
import kio.schema.metadata.v0 as metadata_v0
import kio.schema.metadata.v1 as metadata_v1
import kio.schema.metadata.v2 as metadata_v2
import kio.schema.metadata.v3 as metadata_v3
import kio.schema.metadata.v10 as metadata_v10
import kio.schema.metadata.v11 as metadata_v11
from kio.schema.errors import ErrorCode as WireError
from kio.static.protocol import Entity, ResponsePayload

from diskless._kafka_errors import find_coordinator_error, metadata_error
from diskless._types import ErrorCode, TopicPartition
from diskless.coordinator import ResourceType, TopicDescription, check_topic_name
from diskless.errors import DisklessError
from diskless.kafka_server._handlers._access import (
    CREATE,
    DESCRIBE,
    OPERATIONS_NOT_ASKED,
    Access,
)
from diskless.kafka_server._handlers._broker_configs import topic_defaults
from diskless.kafka_server._handlers._errors import failure
from diskless.kafka_server._handlers._route import NO_THROTTLE, Response
from diskless.kafka_server._handlers._steps import Steps
from diskless.kafka_server._handlers.context import BrokerContext, Session
from diskless.kafka_server._protocol.apis import ApiKey
from diskless.kafka_server._protocol.fields import build, nested
from diskless.kafka_server._protocol.messages import (
    FindCoordinatorRequest,
    MetadataRequest,
)

_log = logging.getLogger(__name__)

_KEY_TYPE_GROUP: Final = 0
_KEY_TYPE_TRANSACTION: Final = 1
_WITHOUT_AUTO_CREATE_FLAG: Final = (
    metadata_v0.MetadataRequest,
    metadata_v1.MetadataRequest,
    metadata_v2.MetadataRequest,
    metadata_v3.MetadataRequest,
)
"""Metadata v4 added `allow_auto_topic_creation`; older versions always allow it."""
_IDS_WITHOUT_NULL_NAMES: Final = (metadata_v10.MetadataRequest, metadata_v11.MetadataRequest)
"""Metadata v10 and v11 carry topic ids, but their responses cannot leave a topic's name out:
Kafka refuses a topic named only by id in them (INVALID_REQUEST), and so does this broker."""


# --- ApiVersions ----------------------------------------------------------------------------------
def api_versions_response(
    response: Response, error: WireError, versions: Mapping[ApiKey, tuple[int, int]]
) -> ResponsePayload:
    """The ApiVersions answer listing `versions` (the handler table's, `table`)."""
    entry = nested(response, "ApiVersion")
    keys = tuple(
        build(entry, api_key=int(key), min_version=low, max_version=high)
        for key, (low, high) in sorted(versions.items())
    )
    return build(response, error_code=error, api_keys=keys, throttle_time=NO_THROTTLE)


# --- Metadata -------------------------------------------------------------------------------------
class _Topics(NamedTuple):
    """The topics a Metadata response lists, and what is known of them."""

    names: list[str]
    known: dict[str, TopicDescription]
    unknown: WireError
    """The code of a name not in `known`: unknown, or not described for a failure."""
    refused: set[str]
    """Names the principal may not describe (or create): TOPIC_AUTHORIZATION_FAILED."""


class _Operations(NamedTuple):
    """KIP-430's authorized operations, as a Metadata request asked for them."""

    topics: Access | None
    """Whose operations each topic is answered with; None: not asked."""
    cluster: int = OPERATIONS_NOT_ASKED


def _operations(request: MetadataRequest, access: Access) -> _Operations:
    """The request's `include_topic_authorized_operations` (v8+) and
    `include_cluster_authorized_operations` (v8 to v10), answered for `access`."""
    topics = access if getattr(request, "include_topic_authorized_operations", False) else None
    if not getattr(request, "include_cluster_authorized_operations", False):
        return _Operations(topics)
    return _Operations(topics, access.cluster_operations())


async def handle_metadata(
    context: BrokerContext, session: Session, request: MetadataRequest, response: Response
) -> ResponsePayload:
    requested: list[str] | None
    ids: list[uuid.UUID] = []
    if request.topics is None or (
        isinstance(request, metadata_v0.MetadataRequest) and not request.topics
    ):
        requested = None  # all topics (v0 says so with an empty list)
    else:
        requested = [t.name for t in request.topics if t.name is not None]
        # v10+ may name a topic by its id instead (KIP-516); such a topic is never created.
        ids = [i for t in request.topics if t.name is None and (i := getattr(t, "topic_id", None))]
    access = Access(context, session)
    unknown_ids: list[uuid.UUID] = []
    rack = session.client_rack if session.client_rack is not None else context.rack
    if ids and isinstance(request, _IDS_WITHOUT_NULL_NAMES):
        refused = dict.fromkeys(ids, WireError.invalid_request)
        nothing = _Topics([], {}, WireError.none, set())
        return await _encode_metadata(
            response,
            context,
            nothing,
            rack,
            session.listener,
            refused,
            _operations(request, access),
        )
    if ids:
        named, unknown_ids = await _named_by_id(context, access, ids)
        assert requested is not None
        requested.extend(named)
    may_create = _may_create(context, request) and not ids
    topics = await _describe(context, access, requested, may_create)
    unknown = dict.fromkeys(unknown_ids, WireError.unknown_topic_id)
    return await _encode_metadata(
        response, context, topics, rack, session.listener, unknown, _operations(request, access)
    )


async def _named_by_id(
    context: BrokerContext, access: Access, ids: list[uuid.UUID]
) -> tuple[list[str], list[uuid.UUID]]:
    """The names of the topics that have these ids, and the ids no topic has that the principal
    may describe: UNKNOWN_TOPIC_ID, as Kafka answers both (an id gives no name away)."""
    try:
        by_id = {d.topic_id: d.name for d in await context.broker.describe_topics()}
    except DisklessError as e:
        failure(metadata_error, e, "describing topics by id")
        return [], list(dict.fromkeys(ids))
    found = {i: by_id[i] for i in dict.fromkeys(ids) if i in by_id}
    visible = access.topics(DESCRIBE, found.values())
    named = {i: name for i, name in found.items() if name in visible}
    return list(named.values()), [i for i in dict.fromkeys(ids) if i not in named]


def _may_create(context: BrokerContext, request: MetadataRequest) -> bool:
    allowed = (
        True
        if isinstance(request, _WITHOUT_AUTO_CREATE_FLAG)
        else bool(request.allow_auto_topic_creation)
    )
    return allowed and context.config.auto_create_topics_enable


async def _describe(
    context: BrokerContext, access: Access, requested: list[str] | None, may_create: bool
) -> _Topics:
    """The requested topics (None: all that `access` may describe), those missing created when
    `may_create` and `access` allows it."""
    if requested is not None and not requested:
        return _Topics([], {}, WireError.unknown_topic_or_partition, set())
    refused: set[str] = set()
    if requested is not None:
        refused = set(requested) - access.topics(DESCRIBE, requested)
    try:
        descriptions = await context.broker.describe_topics(
            None if requested is None else [n for n in requested if n not in refused],
            cut_off=context.broker_id in context.cluster.lapsed(),
        )
        unknown = WireError.unknown_topic_or_partition
    except DisklessError as e:
        # Not known to be missing: answered the failure's (retriable) code, never created, nor
        # refused for want of CREATE (a client gives up on an authorization failure).
        unknown = failure(metadata_error, e, "describing topics")
        descriptions = []
        requested = requested or []
        may_create = False
    known = {d.name: d for d in descriptions}
    if requested is None:
        names = sorted(access.topics(DESCRIBE, known))
    else:
        names = list(dict.fromkeys(requested))
    missing = [name for name in names if name not in known and name not in refused]
    if missing and may_create:
        if not access.cluster(CREATE):
            refused.update(set(missing) - access.topics(CREATE, missing))
            missing = [name for name in missing if name not in refused]
        known.update(await _create_topics(context, missing))
    return _Topics(names, known, unknown, refused)


def missing_topic(name: str, unknown: WireError) -> WireError:
    """The code of a topic not found: INVALID_TOPIC_EXCEPTION for a name no topic can have
    (Kafka's `Topic.validate`), which a producer fails on at once instead of waiting for the
    topic to appear; else `unknown`."""
    try:
        check_topic_name(name)
    except ValueError:
        return WireError.invalid_topic_exception
    return unknown


async def _create_topics(context: BrokerContext, names: list[str]) -> dict[str, TopicDescription]:
    """Create what can be created; names the coordinator refuses stay unknown."""
    partitions = context.config.num_partitions
    try:
        defaults = (await topic_defaults(context)).config
    except DisklessError as e:
        failure(metadata_error, e, "reading the dynamic topic defaults")
        return {}
    for name in names:
        try:
            check_topic_name(name)
        except ValueError:
            continue  # Kafka's topic name rules; the topic stays unknown
        try:
            if await context.broker.create_topic(name, partitions, defaults) is ErrorCode.NONE:
                _log.info("created topic %r with %d partitions on first use", name, partitions)
        except ValueError as e:  # refused by the coordinator: the topic stays unknown
            _log.warning("metadata: cannot create topic %r: %r", name, e)
        except DisklessError as e:
            failure(metadata_error, e, f"creating topic {name!r}")
    try:
        return {d.name: d for d in await context.broker.describe_topics(names)}
    except DisklessError as e:
        failure(metadata_error, e, "describing created topics")
        return {}


async def _encode_metadata(
    response: Response,
    context: BrokerContext,
    topics: _Topics,
    rack: str | None,
    listener: str,
    by_id: Mapping[uuid.UUID, WireError],
    operations: _Operations,
) -> ResponsePayload:
    """Brokers are listed at their endpoint of the client's `listener` (a broker without one is
    left out, and a partition it would lead is LISTENER_NOT_FOUND, as in Kafka). Topics named by
    an id that are not answered by name come last, with their code: UNKNOWN_TOPIC_ID without a
    name (v12+), INVALID_REQUEST with an empty one (v10, v11, whose names are not nullable)."""
    broker_entry = nested(response, "MetadataResponseBroker")
    topic_entry = nested(response, "MetadataResponseTopic")
    reachable = {b.broker_id: b.on(listener) for b in context.cluster.brokers()}
    entries: list[Entity] = []
    steps = Steps()
    for name in topics.names:
        await steps.pause()
        description = topics.known.get(name)
        error = WireError.none if description is not None else missing_topic(name, topics.unknown)
        entries.append(
            build(
                topic_entry,
                error_code=WireError.topic_authorization_failed
                if name in topics.refused
                else error,
                name=name,
                topic_id=description.topic_id if description is not None else None,
                is_internal=False,
                partitions=(
                    partitions_of(response, context, name, description.partitions, rack, reachable)
                    if description is not None
                    else ()
                ),
                topic_authorized_operations=(
                    operations.topics.operations(ResourceType.TOPIC, name)
                    if operations.topics is not None and name not in topics.refused
                    else OPERATIONS_NOT_ASKED
                ),
            )
        )
    entries.extend(
        build(
            topic_entry,
            error_code=code,
            name=None if code is WireError.unknown_topic_id else "",
            topic_id=topic_id,
            is_internal=False,
            partitions=(),
        )
        for topic_id, code in by_id.items()
    )
    return build(
        response,
        throttle_time=NO_THROTTLE,
        brokers=tuple(
            build(broker_entry, node_id=b.broker_id, host=where[0], port=where[1], rack=b.rack)
            for b in context.cluster.brokers()
            if (where := reachable.get(b.broker_id)) is not None
        ),
        cluster_id=context.cluster.cluster_id,
        controller_id=context.broker_id,
        topics=tuple(entries),
        cluster_authorized_operations=operations.cluster,
    )


def partitions_of(
    response: Response,
    context: BrokerContext,
    name: str,
    count: int,
    rack: str | None,
    reachable: Mapping[int, tuple[str, int] | None],
    *,
    first: int = 0,
    entry: str = "MetadataResponsePartition",
) -> tuple[Entity, ...]:
    """A topic's partitions from `first` on, each led by the produce representative of `rack`
    (none while no broker is live: LEADER_NOT_AVAILABLE; one the client's listener cannot reach:
    LISTENER_NOT_FOUND), as `entry`s of `response`."""
    partition_entry = nested(response, entry)
    tps = [TopicPartition(name, p) for p in range(first, count)]
    leaders = context.cluster.leaders(tps, rack) if context.cluster.brokers() else {}
    epoch = context.cluster.generation  # the same in every process (`cluster_view`)
    entries = []
    for tp in tps:
        leader = leaders.get(tp, -1)
        error = WireError.none if leader >= 0 else WireError.leader_not_available
        if leader >= 0 and reachable.get(leader) is None:
            error, leader = WireError.listener_not_found, -1
        entries.append(
            build(
                partition_entry,
                error_code=error,
                partition_index=tp.partition,
                leader_id=leader,
                leader_epoch=epoch,
                replica_nodes=(leader,) if leader >= 0 else (),
                isr_nodes=(leader,) if leader >= 0 else (),
                offline_replicas=(),
            )
        )
    return tuple(entries)


# --- FindCoordinator ------------------------------------------------------------------------------
class _Found(NamedTuple):
    error: WireError
    message: str | None
    node_id: int
    host: str
    port: int


_NOT_FOUND: Final = (-1, "", -1)


async def handle_find_coordinator(
    context: BrokerContext, session: Session, request: FindCoordinatorRequest, response: Response
) -> ResponsePayload:
    """A group's coordinator is its owner, recorded in the batch coordinator
    (`_coordination.group_coordinator`): the same from every process, and it moves only when its
    owner is gone. A transactional id may be served anywhere (its state is in the batch
    coordinator); the id's hash spreads them."""
    key_type = (
        _KEY_TYPE_GROUP  # v0 knows only groups
        if isinstance(request, find_coordinator_v0.FindCoordinatorRequest)
        else int(request.key_type)
    )
    batched = isinstance(request, find_coordinator_v4.FindCoordinatorRequest)
    if isinstance(request, find_coordinator_v4.FindCoordinatorRequest):
        keys = list(request.coordinator_keys)  # v4 batches keys
    else:
        keys = [request.key]
    access = Access(context, session)
    found = [await _find(context, access, key_type, key, session.listener) for key in keys]
    if not batched:
        (one,) = found
        return build(response, throttle_time=NO_THROTTLE, error_code=one.error, **_fields(one))
    entry = nested(response, "Coordinator")
    coordinators = tuple(
        build(entry, key=key, error_code=f.error, **_fields(f))
        for key, f in zip(keys, found, strict=True)
    )
    return build(response, throttle_time=NO_THROTTLE, coordinators=coordinators)


async def _find(
    context: BrokerContext, access: Access, key_type: int, key: str, listener: str
) -> _Found:
    if key_type not in (_KEY_TYPE_GROUP, _KEY_TYPE_TRANSACTION):
        message = f"unknown coordinator key type {key_type}"
        return _Found(WireError.invalid_request, message, *_NOT_FOUND)
    if key_type == _KEY_TYPE_GROUP and not access.group(DESCRIBE, key):
        return _Found(WireError.group_authorization_failed, None, *_NOT_FOUND)
    if key_type == _KEY_TYPE_TRANSACTION and not access.transactional_id(DESCRIBE, key):
        return _Found(WireError.transactional_id_authorization_failed, None, *_NOT_FOUND)
    try:
        found = (
            await context.groups.locate(key)
            if key_type == _KEY_TYPE_GROUP
            else context.cluster.coordinator_for(key)
        )
    except DisklessError as e:
        error = failure(find_coordinator_error, e, "finding a coordinator")
        return _Found(error, "the batch coordinator is unavailable", *_NOT_FOUND)
    if found is None:
        return _Found(WireError.coordinator_not_available, "no live broker", *_NOT_FOUND)
    where = found.on(listener)
    if where is None:  # Kafka's answer for a coordinator without the client's listener
        message = f"the coordinator has no listener {listener}"
        return _Found(WireError.coordinator_not_available, message, *_NOT_FOUND)
    return _Found(WireError.none, None, found.broker_id, *where)


def _fields(found: _Found) -> dict[str, object]:
    return {
        "error_message": found.message,
        "node_id": found.node_id,
        "host": found.host,
        "port": found.port,
    }
