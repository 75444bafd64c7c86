"""Discovery: ApiVersions, Metadata and FindCoordinator, which tell a client where to send what.

Metadata names a leader per partition although the write path has none: see `_metadata` for
whom it names and why.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Final

import kio.schema.find_coordinator.v0 as find_coordinator_v0
import kio.schema.find_coordinator.v4 as find_coordinator_v4
import kio.schema.metadata.v0 as metadata_v0
import kio.schema.metadata.v1 as metadata_v1
import kio.schema.metadata.v2 as metadata_v2
import kio.schema.metadata.v3 as metadata_v3
from kio.schema.errors import ErrorCode as WireError
from kio.static.protocol import Entity, ResponsePayload

from diskless._kafka_errors import find_coordinator_error, metadata_error
from diskless._types import TopicPartition
from diskless.coordinator import TopicDescription, check_topic_name
from diskless.errors import DisklessError
from diskless.kafka_server._coordination.cluster_view import topic_id
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
async def handle_metadata(
    context: BrokerContext,
    session: Session,
    request: MetadataRequest,
    response: Response,
) -> ResponsePayload:
    broker_entry = nested(response, "MetadataResponseBroker")
    topic_entry = nested(response, "MetadataResponseTopic")
    partition_entry = nested(response, "MetadataResponsePartition")
    requested: list[str] | None
    if request.topics is None or (
        isinstance(request, metadata_v0.MetadataRequest) and not request.topics
    ):
        requested = None  # all topics (v0 says so with an empty list)
    else:
        requested = [t.name for t in request.topics if t.name is not None]
    brokers = context.cluster.brokers()
    topics: list[Entity] = []
    if requested is None or requested:
        try:
            descriptions = await context.broker.describe_topics(requested)
            unknown = WireError.unknown_topic_or_partition
        except DisklessError as e:
            unknown = failure(metadata_error, e, "describing topics")
            descriptions = []
            requested = requested or []
        known = {d.name: d for d in descriptions}
        names = sorted(known) if requested is None else list(dict.fromkeys(requested))
        missing = [name for name in names if name not in known]
        if missing and _may_create(context, request):
            known.update(await _create_topics(context, missing))
        rack = session.client_rack if session.client_rack is not None else context.rack
        steps = Steps()
        for name in names:
            await steps.pause()
            description = known.get(name)
            if description is None:
                topics.append(
                    build(
                        topic_entry,
                        error_code=unknown,
                        name=name,
                        topic_id=None,
                        is_internal=False,
                        partitions=(),
                    )
                )
                continue
            tps = [TopicPartition(name, p) for p in range(description.partitions)]
            leaders = context.cluster.leaders(tps, rack) if brokers else {}
            partitions = []
            for tp in tps:
                leader = leaders.get(tp, -1)
                partitions.append(
                    build(
                        partition_entry,
                        error_code=(
                            WireError.none if leader >= 0 else WireError.leader_not_available
                        ),
                        partition_index=tp.partition,
                        leader_id=leader,
                        leader_epoch=context.cluster.generation,
                        replica_nodes=(leader,) if leader >= 0 else (),
                        isr_nodes=(leader,) if leader >= 0 else (),
                        offline_replicas=(),
                    )
                )
            topics.append(
                build(
                    topic_entry,
                    error_code=WireError.none,
                    name=name,
                    topic_id=topic_id(name),
                    is_internal=False,
                    partitions=tuple(partitions),
                )
            )
    return build(
        response,
        throttle_time=NO_THROTTLE,
        brokers=tuple(
            build(broker_entry, node_id=b.broker_id, host=b.host, port=b.port, rack=b.rack)
            for b in brokers
        ),
        cluster_id=context.cluster.cluster_id,
        controller_id=context.broker_id,
        topics=tuple(topics),
    )


def _may_create(context: BrokerContext, request: MetadataRequest) -> bool:
    allowed = (
        True
        if isinstance(request, _WITHOUT_AUTO_CREATE_FLAG)
        else bool(request.allow_auto_topic_creation)
    )
    return allowed and context.config.auto_create_topic_partitions > 0


async def _create_topics(context: BrokerContext, names: list[str]) -> dict[str, TopicDescription]:
    """Create what can be created; names the coordinator refuses stay unknown."""
    partitions = context.config.auto_create_topic_partitions
    for name in names:
        try:
            check_topic_name(name)
        except ValueError:
            continue  # Kafka's topic name rules; the topic stays unknown
        try:
            if await context.broker.create_topic(name, partitions):
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


# --- FindCoordinator ------------------------------------------------------------------------------
async def handle_find_coordinator(
    context: BrokerContext,
    session: Session,
    request: FindCoordinatorRequest,
    response: Response,
) -> ResponsePayload:
    """A group's coordinator is its owner, recorded in the batch coordinator (`_groups`): the
    same from every process, and it moves only when its owner is gone. A transactional id may
    be served anywhere (its state is in the batch coordinator); the id's hash spreads them."""
    key_type = (
        _KEY_TYPE_GROUP  # v0 knows only groups
        if isinstance(request, find_coordinator_v0.FindCoordinatorRequest)
        else int(request.key_type)
    )

    async def coordinator(key: str) -> tuple[WireError, str | None, int, str, int]:
        if key_type not in (_KEY_TYPE_GROUP, _KEY_TYPE_TRANSACTION):
            message = f"unknown coordinator key type {key_type}"
            return WireError.invalid_request, message, -1, "", -1
        try:
            found = (
                await context.groups.locate(key)
                if key_type == _KEY_TYPE_GROUP
                else context.cluster.coordinator_for(key)
            )
        except DisklessError as e:
            error = failure(find_coordinator_error, e, "finding a coordinator")
            return error, "the batch coordinator is unavailable", -1, "", -1
        if found is None:
            return WireError.coordinator_not_available, "no live broker", -1, "", -1
        return WireError.none, None, found.broker_id, found.host, found.port

    if isinstance(request, find_coordinator_v4.FindCoordinatorRequest):
        entry = nested(response, "Coordinator")
        coordinators = []
        for key in request.coordinator_keys:
            error, message, node_id, host, port = await coordinator(key)
            coordinators.append(
                build(
                    entry,
                    key=key,
                    node_id=node_id,
                    host=host,
                    port=port,
                    error_code=error,
                    error_message=message,
                )
            )
        return build(response, throttle_time=NO_THROTTLE, coordinators=tuple(coordinators))
    error, message, node_id, host, port = await coordinator(request.key)
    return build(
        response,
        throttle_time=NO_THROTTLE,
        error_code=error,
        error_message=message,
        node_id=node_id,
        host=host,
        port=port,
    )
