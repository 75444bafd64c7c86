"""One handler per API key: decode a kio request, call the library, build the kio response.

Handlers are written once for every advertised version: values are named as kio names the fields
and `build` keeps those the requested version has. Protocol outcomes are error codes in the
response; a library exception (`DisklessError`) becomes the retriable KAFKA_STORAGE_ERROR (or
COORDINATOR_NOT_AVAILABLE for group and transaction APIs) for the partitions it concerns.

Produce is the one handler that must not await before it reaches the broker:
`DisklessBroker.produce` takes its place in the write order when it is called, and a producer's
pipelined requests must keep the order in which they arrived on the connection.
"""

from __future__ import annotations

import datetime
import logging
from collections.abc import Awaitable, Callable
from typing import Any, Final

from kio.schema.errors import ErrorCode as WireError

from diskless._results import FetchResult, ListOffsetsResult
from diskless._types import ErrorCode, IsolationLevel, TopicPartition, check_isolation_level
from diskless.coordinator import TopicDescription, check_topic_name
from diskless.errors import DisklessError
from diskless.kafka_server._codec import build, has_field, nested, response_schema
from diskless.kafka_server._context import BrokerContext, Connection
from diskless.kafka_server._metadata import topic_id
from diskless.kafka_server._steps import Steps
from diskless.kafka_server._versions import SUPPORTED_VERSIONS, ApiKey

_log = logging.getLogger(__name__)

_NO_THROTTLE: Final = datetime.timedelta(0)
_KEY_TYPE_GROUP: Final = 0
_KEY_TYPE_TRANSACTION: Final = 1

Handler = Callable[[BrokerContext, Connection, int, Any], Awaitable[Any]]
"""(broker context, connection, api version, request) -> response entity, or None for none."""


def wire(code: ErrorCode | int) -> WireError:
    return WireError(int(code))


def _isolation(value: int) -> IsolationLevel | None:
    """The isolation level of a request, None when it names none (answered INVALID_REQUEST)."""
    try:
        return check_isolation_level(value)
    except ValueError:
        return None


def _millis(value: datetime.timedelta) -> int:
    return round(value.total_seconds() * 1000)


def _response(api_key: ApiKey, version: int) -> type[Any]:
    return response_schema(int(api_key), version)


# --- ApiVersions ----------------------------------------------------------------------------------
def api_versions_response(version: int, error: WireError) -> Any:
    schema = _response(ApiKey.API_VERSIONS, version)
    entry = nested(schema, "ApiVersion")
    keys = tuple(
        entry(api_key=int(key), min_version=low, max_version=high)
        for key, (low, high) in sorted(SUPPORTED_VERSIONS.items())
    )
    return build(schema, error_code=error, api_keys=keys, throttle_time=_NO_THROTTLE)


async def handle_api_versions(
    context: BrokerContext, connection: Connection, version: int, request: Any
) -> Any:
    return api_versions_response(version, WireError.none)


# --- Metadata -------------------------------------------------------------------------------------
async def handle_metadata(
    context: BrokerContext, connection: Connection, version: int, request: Any
) -> Any:
    schema = _response(ApiKey.METADATA, version)
    broker_entry = nested(schema, "MetadataResponseBroker")
    topic_entry = nested(schema, "MetadataResponseTopic")
    partition_entry = nested(schema, "MetadataResponsePartition")
    requested: list[str] | None
    if request.topics is None or (version == 0 and not request.topics):
        requested = None
    else:
        requested = [t.name for t in request.topics if t.name is not None]
    brokers = context.cluster.brokers()
    topics: list[Any] = []
    if requested is None or requested:
        try:
            descriptions = await context.broker.describe_topics(requested)
        except DisklessError as e:
            _log.warning("metadata: describing topics failed: %r", e)
            descriptions = []
            requested = requested or []
        known = {d.name: d for d in descriptions}
        names = sorted(known) if requested is None else list(dict.fromkeys(requested))
        missing = [name for name in names if name not in known]
        if missing and _may_create(context, version, request):
            known.update(await _create_topics(context, missing))
        rack = connection.client_rack if connection.client_rack is not None else context.rack
        steps = Steps()
        for name in names:
            await steps.pause()
            description = known.get(name)
            if description is None:
                topics.append(
                    build(
                        topic_entry,
                        error_code=WireError.unknown_topic_or_partition,
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
        schema,
        throttle_time=_NO_THROTTLE,
        brokers=tuple(
            build(broker_entry, node_id=b.broker_id, host=b.host, port=b.port, rack=b.rack)
            for b in brokers
        ),
        cluster_id=context.cluster.cluster_id,
        controller_id=context.broker_id,
        topics=tuple(topics),
    )


def _may_create(context: BrokerContext, version: int, request: Any) -> bool:
    allowed = bool(request.allow_auto_topic_creation) if version >= 4 else True
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
        except (DisklessError, ValueError) as e:
            _log.warning("metadata: cannot create topic %r: %r", name, e)
    try:
        return {d.name: d for d in await context.broker.describe_topics(names)}
    except DisklessError as e:
        _log.warning("metadata: describing created topics failed: %r", e)
        return {}


# --- Produce --------------------------------------------------------------------------------------
async def handle_produce(
    context: BrokerContext, connection: Connection, version: int, request: Any
) -> Any:
    partitions: dict[TopicPartition, bytes] = {}
    duplicates: set[TopicPartition] = set()
    rewrites = {}
    for topic in request.topic_data:
        for data in topic.partition_data:
            tp = TopicPartition(topic.name, data.index)
            if tp in partitions:
                duplicates.add(tp)
            records = bytes(data.records) if data.records is not None else b""
            records, rewrite = context.transactions.rewrite_batch(tp, records)
            if rewrite is not None:
                rewrites[tp] = rewrite
            partitions[tp] = records
    for tp in duplicates:
        del partitions[tp]
    acks = int(request.acks)
    # No await before this call: it fixes this request's place in the broker's write order.
    produced = context.broker.produce(partitions, acks=acks, timeout_ms=_millis(request.timeout))
    try:
        results = await produced
    except DisklessError as e:
        _log.warning("produce on broker %d failed: %r", context.broker_id, e)
        results = {}
    if acks == 0:
        return None  # Kafka sends no response to acks=0
    for tp, rewrite in rewrites.items():
        result = results.get(tp)
        if result is not None and result.error is ErrorCode.NONE:
            context.transactions.acknowledged(rewrite)
    schema = _response(ApiKey.PRODUCE, version)
    topic_entry = nested(schema, "TopicProduceResponse")
    partition_entry = nested(schema, "PartitionProduceResponse")
    by_topic: dict[str, list[Any]] = {}
    steps = Steps()
    for topic in request.topic_data:
        for data in topic.partition_data:
            await steps.pause()
            tp = TopicPartition(topic.name, data.index)
            result = results.get(tp)
            if tp in duplicates:
                error = ErrorCode.INVALID_RECORD
                message: str | None = "partition appears twice in the request"
                base_offset, append_time, start = -1, -1, -1
            elif result is None:
                error, message = ErrorCode.KAFKA_STORAGE_ERROR, "the broker failed the request"
                base_offset, append_time, start = -1, -1, -1
            else:
                error, message = result.error, result.error_message
                base_offset = result.base_offset
                append_time = result.log_append_time
                start = result.log_start_offset
            by_topic.setdefault(topic.name, []).append(
                build(
                    partition_entry,
                    index=data.index,
                    error_code=wire(error),
                    base_offset=base_offset,
                    log_append_time=(
                        None
                        if append_time < 0
                        else datetime.datetime.fromtimestamp(append_time / 1000, datetime.UTC)
                    ),
                    log_start_offset=start,
                    record_errors=(),
                    error_message=message if error is not ErrorCode.NONE else None,
                )
            )
    return build(
        schema,
        responses=tuple(
            build(topic_entry, name=name, partition_responses=tuple(entries))
            for name, entries in by_topic.items()
        ),
        throttle_time=_NO_THROTTLE,
    )


# --- Fetch ----------------------------------------------------------------------------------------
async def handle_fetch(
    context: BrokerContext, connection: Connection, version: int, request: Any
) -> Any:
    rack_id = getattr(request, "rack_id", "")
    if rack_id:
        connection.client_rack = rack_id
    isolation = _isolation(int(request.isolation_level))
    offsets: dict[TopicPartition, int] = {}
    partition_max_bytes = 0
    for topic in request.topics:
        for partition in topic.partitions:
            offsets[TopicPartition(topic.topic, partition.partition)] = int(partition.fetch_offset)
            partition_max_bytes = max(partition_max_bytes, int(partition.partition_max_bytes))
    # Negative budgets read as empty ones, as in Kafka.
    max_bytes = max(int(request.max_bytes), 0) if has_field(type(request), "max_bytes") else None
    clock = context.broker.clock
    deadline = (
        clock.monotonic() + min(_millis(request.max_wait), context.config.fetch_wait_ms_max) / 1000
    )
    min_bytes = int(request.min_bytes)
    results: dict[TopicPartition, FetchResult] = {}
    if isolation is None:
        results = dict.fromkeys(offsets, FetchResult(ErrorCode.INVALID_REQUEST))
    while isolation is not None:
        try:
            results = await context.broker.fetch(
                offsets,
                max_bytes=max_bytes,
                partition_max_bytes=partition_max_bytes or None,
                isolation_level=isolation,
            )
        except DisklessError as e:
            _log.warning("fetch on broker %d failed: %r", context.broker_id, e)
            results = {}
            break
        total = sum(len(r.records) for r in results.values())
        errors = any(r.error is not ErrorCode.NONE for r in results.values())
        if total >= max(min_bytes, 1) or errors or not offsets or clock.monotonic() >= deadline:
            break
        await clock.sleep(min(context.config.fetch_poll_ms / 1000, deadline - clock.monotonic()))
    schema = _response(ApiKey.FETCH, version)
    topic_entry = nested(schema, "FetchableTopicResponse")
    partition_entry = nested(schema, "PartitionData")
    aborted_entry = nested(schema, "AbortedTransaction")
    responses = []
    for topic in request.topics:
        partitions = []
        for partition in topic.partitions:
            tp = TopicPartition(topic.topic, partition.partition)
            result = results.get(tp)
            if result is None:
                error, hwm, lso, start, records, aborted = (
                    ErrorCode.KAFKA_STORAGE_ERROR,
                    -1,
                    -1,
                    -1,
                    b"",
                    [],
                )
            else:
                error, hwm, lso, start = (
                    result.error,
                    result.high_watermark,
                    result.last_stable_offset,
                    result.log_start_offset,
                )
                records, aborted = result.records, result.aborted_transactions
            partitions.append(
                build(
                    partition_entry,
                    partition_index=tp.partition,
                    error_code=wire(error),
                    high_watermark=hwm,
                    last_stable_offset=lso,
                    log_start_offset=start,
                    aborted_transactions=(
                        tuple(
                            aborted_entry(producer_id=pid, first_offset=first)
                            for pid, first in aborted
                        )
                        if isolation is IsolationLevel.READ_COMMITTED
                        else None
                    ),
                    preferred_read_replica=-1,
                    records=bytes(records),
                )
            )
        responses.append(build(topic_entry, topic=topic.topic, partitions=tuple(partitions)))
    return build(
        schema,
        throttle_time=_NO_THROTTLE,
        error_code=WireError.none,
        session_id=0,  # no fetch sessions (KIP-227): clients keep sending full requests
        responses=tuple(responses),
    )


# --- ListOffsets ----------------------------------------------------------------------------------
async def handle_list_offsets(
    context: BrokerContext, connection: Connection, version: int, request: Any
) -> Any:
    isolation = _isolation(int(getattr(request, "isolation_level", 0)))
    timestamps = {
        TopicPartition(topic.name, p.partition_index): int(p.timestamp)
        for topic in request.topics
        for p in topic.partitions
    }
    results: dict[TopicPartition, ListOffsetsResult] = {}
    if isolation is None:
        results = dict.fromkeys(timestamps, ListOffsetsResult(ErrorCode.INVALID_REQUEST))
    else:
        try:
            results = await context.broker.list_offsets(timestamps, isolation_level=isolation)
        except DisklessError as e:
            _log.warning("list offsets on broker %d failed: %r", context.broker_id, e)
    schema = _response(ApiKey.LIST_OFFSETS, version)
    topic_entry = nested(schema, "ListOffsetsTopicResponse")
    partition_entry = nested(schema, "ListOffsetsPartitionResponse")
    topics = []
    for topic in request.topics:
        partitions = []
        for p in topic.partitions:
            result = results.get(TopicPartition(topic.name, p.partition_index))
            partitions.append(
                build(
                    partition_entry,
                    partition_index=p.partition_index,
                    error_code=wire(
                        result.error if result is not None else ErrorCode.KAFKA_STORAGE_ERROR
                    ),
                    timestamp=result.timestamp if result is not None else -1,
                    offset=result.offset if result is not None else -1,
                    leader_epoch=context.cluster.generation,
                )
            )
        topics.append(build(topic_entry, name=topic.name, partitions=tuple(partitions)))
    return build(schema, throttle_time=_NO_THROTTLE, topics=tuple(topics))


# --- FindCoordinator ------------------------------------------------------------------------------
async def handle_find_coordinator(
    context: BrokerContext, connection: Connection, version: int, request: Any
) -> Any:
    """Every broker coordinates every group and transactional id: they share one group
    coordinator and one transaction coordinator in this process. So the answer is the broker
    asked, which is in the client's rack."""
    schema = _response(ApiKey.FIND_COORDINATOR, version)
    key_type = int(getattr(request, "key_type", _KEY_TYPE_GROUP))
    if key_type not in (_KEY_TYPE_GROUP, _KEY_TYPE_TRANSACTION):
        error, message = WireError.invalid_request, f"unknown coordinator key type {key_type}"
    else:
        error, message = WireError.none, None
    me = context.address
    node_id, host, port = (me.broker_id, me.host, me.port) if message is None else (-1, "", -1)
    if has_field(schema, "coordinators"):
        entry = nested(schema, "Coordinator")
        return build(
            schema,
            throttle_time=_NO_THROTTLE,
            coordinators=tuple(
                entry(
                    key=key,
                    node_id=node_id,
                    host=host,
                    port=port,
                    error_code=error,
                    error_message=message,
                )
                for key in request.coordinator_keys
            ),
        )
    return build(
        schema,
        throttle_time=_NO_THROTTLE,
        error_code=error,
        error_message=message,
        node_id=node_id,
        host=host,
        port=port,
    )


# --- transactions ---------------------------------------------------------------------------------
async def handle_init_producer_id(
    context: BrokerContext, connection: Connection, version: int, request: Any
) -> Any:
    try:
        result = await context.transactions.init_producer_id(
            request.transactional_id, _millis(request.transaction_timeout)
        )
        error, producer_id, epoch = result.error, result.producer_id, result.producer_epoch
    except DisklessError as e:
        _log.warning("init producer id failed: %r", e)
        error, producer_id, epoch = ErrorCode.KAFKA_STORAGE_ERROR, -1, -1
    wire_error = wire(error)
    if error is ErrorCode.KAFKA_STORAGE_ERROR:
        wire_error = WireError.coordinator_not_available
    return build(
        _response(ApiKey.INIT_PRODUCER_ID, version),
        throttle_time=_NO_THROTTLE,
        error_code=wire_error,
        producer_id=producer_id,
        producer_epoch=epoch,
    )


async def handle_add_partitions_to_txn(
    context: BrokerContext, connection: Connection, version: int, request: Any
) -> Any:
    partitions = [
        TopicPartition(topic.name, int(p))
        for topic in request.v3_and_below_topics
        for p in topic.partitions
    ]
    try:
        errors = await context.transactions.add_partitions_to_txn(
            request.v3_and_below_transactional_id,
            int(request.v3_and_below_producer_id),
            int(request.v3_and_below_producer_epoch),
            partitions,
        )
    except DisklessError as e:
        _log.warning("add partitions to txn failed: %r", e)
        errors = [ErrorCode.KAFKA_STORAGE_ERROR] * len(partitions)
    results = dict(zip(partitions, errors, strict=True))
    schema = _response(ApiKey.ADD_PARTITIONS_TO_TXN, version)
    topic_entry = nested(schema, "AddPartitionsToTxnTopicResult")
    partition_entry = nested(schema, "AddPartitionsToTxnPartitionResult")
    return build(
        schema,
        throttle_time=_NO_THROTTLE,
        results_by_topic_v3_and_below=tuple(
            topic_entry(
                name=topic.name,
                results_by_partition=tuple(
                    partition_entry(
                        partition_index=p,
                        partition_error_code=_txn_error(
                            results.get(TopicPartition(topic.name, int(p)))
                        ),
                    )
                    for p in topic.partitions
                ),
            )
            for topic in request.v3_and_below_topics
        ),
    )


def _txn_error(error: ErrorCode | None) -> WireError:
    if error is None or error is ErrorCode.KAFKA_STORAGE_ERROR:
        return WireError.coordinator_not_available
    return wire(error)


async def handle_end_txn(
    context: BrokerContext, connection: Connection, version: int, request: Any
) -> Any:
    try:
        result = await context.transactions.end_txn(
            request.transactional_id,
            int(request.producer_id),
            int(request.producer_epoch),
            bool(request.committed),
        )
        error: ErrorCode | None = result.error
    except DisklessError as e:
        _log.warning("end txn failed: %r", e)
        error = None
    return build(
        _response(ApiKey.END_TXN, version),
        throttle_time=_NO_THROTTLE,
        error_code=_txn_error(error),
    )


# --- groups ---------------------------------------------------------------------------------------
async def handle_offset_commit(
    context: BrokerContext, connection: Connection, version: int, request: Any
) -> Any:
    generation = int(getattr(request, "generation_id_or_member_epoch", -1))
    offsets = {
        TopicPartition(topic.name, p.partition_index): (
            int(p.committed_offset),
            p.committed_metadata,
        )
        for topic in request.topics
        for p in topic.partitions
    }
    error = context.groups.commit_offsets(request.group_id, generation, request.member_id, offsets)
    schema = _response(ApiKey.OFFSET_COMMIT, version)
    topic_entry = nested(schema, "OffsetCommitResponseTopic")
    partition_entry = nested(schema, "OffsetCommitResponsePartition")
    return build(
        schema,
        throttle_time=_NO_THROTTLE,
        topics=tuple(
            topic_entry(
                name=topic.name,
                partitions=tuple(
                    partition_entry(partition_index=p.partition_index, error_code=wire(error))
                    for p in topic.partitions
                ),
            )
            for topic in request.topics
        ),
    )


async def handle_offset_fetch(
    context: BrokerContext, connection: Connection, version: int, request: Any
) -> Any:
    committed = context.groups.committed_offsets(request.group_id)
    wanted: dict[str, list[int]]
    if request.topics is None:
        wanted = {}
        for tp in sorted(committed):
            wanted.setdefault(tp.topic, []).append(tp.partition)
    else:
        wanted = {t.name: [int(p) for p in t.partition_indexes] for t in request.topics}
    schema = _response(ApiKey.OFFSET_FETCH, version)
    topic_entry = nested(schema, "OffsetFetchResponseTopic")
    partition_entry = nested(schema, "OffsetFetchResponsePartition")
    topics = []
    for name, indexes in wanted.items():
        partitions = []
        for index in indexes:
            offset, metadata = committed.get(TopicPartition(name, index), (-1, ""))
            partitions.append(
                build(
                    partition_entry,
                    partition_index=index,
                    committed_offset=offset,
                    committed_leader_epoch=-1,
                    metadata=metadata,
                    error_code=WireError.none,
                )
            )
        topics.append(build(topic_entry, name=name, partitions=tuple(partitions)))
    return build(
        schema, throttle_time=_NO_THROTTLE, topics=tuple(topics), error_code=WireError.none
    )


async def handle_join_group(
    context: BrokerContext, connection: Connection, version: int, request: Any
) -> Any:
    outcome = await context.groups.join(
        group_id=request.group_id,
        member_id=request.member_id,
        protocol_type=request.protocol_type,
        protocols=[(p.name, bytes(p.metadata)) for p in request.protocols],
        session_timeout_ms=_millis(request.session_timeout),
        rebalance_timeout_ms=_millis(
            getattr(request, "rebalance_timeout", request.session_timeout)
        ),
        require_known_member_id=version >= 4,
    )
    schema = _response(ApiKey.JOIN_GROUP, version)
    member_entry = nested(schema, "JoinGroupResponseMember")
    return build(
        schema,
        throttle_time=_NO_THROTTLE,
        error_code=wire(outcome.error),
        generation_id=outcome.generation,
        protocol_type=request.protocol_type,
        protocol_name=outcome.protocol or "",
        leader=outcome.leader,
        member_id=outcome.member_id,
        members=tuple(
            build(member_entry, member_id=member, group_instance_id=None, metadata=metadata)
            for member, metadata in outcome.members
        ),
    )


async def handle_sync_group(
    context: BrokerContext, connection: Connection, version: int, request: Any
) -> Any:
    error, assignment = await context.groups.sync(
        request.group_id,
        int(request.generation_id),
        request.member_id,
        {a.member_id: bytes(a.assignment) for a in request.assignments},
    )
    return build(
        _response(ApiKey.SYNC_GROUP, version),
        throttle_time=_NO_THROTTLE,
        error_code=wire(error),
        protocol_type=getattr(request, "protocol_type", None),
        protocol_name=getattr(request, "protocol_name", None),
        assignment=assignment,
    )


async def handle_heartbeat(
    context: BrokerContext, connection: Connection, version: int, request: Any
) -> Any:
    error = context.groups.heartbeat(
        request.group_id, int(request.generation_id), request.member_id
    )
    return build(
        _response(ApiKey.HEARTBEAT, version), throttle_time=_NO_THROTTLE, error_code=wire(error)
    )


async def handle_leave_group(
    context: BrokerContext, connection: Connection, version: int, request: Any
) -> Any:
    schema = _response(ApiKey.LEAVE_GROUP, version)
    if has_field(type(request), "members"):
        member_entry = nested(schema, "MemberResponse")
        responses = []
        for member in request.members:
            error = context.groups.leave(request.group_id, member.member_id)
            responses.append(
                member_entry(
                    member_id=member.member_id,
                    group_instance_id=member.group_instance_id,
                    error_code=wire(error),
                )
            )
        return build(
            schema, throttle_time=_NO_THROTTLE, error_code=WireError.none, members=tuple(responses)
        )
    error = context.groups.leave(request.group_id, request.member_id)
    return build(schema, throttle_time=_NO_THROTTLE, error_code=wire(error))


HANDLERS: Final[dict[ApiKey, Handler]] = {
    ApiKey.API_VERSIONS: handle_api_versions,
    ApiKey.METADATA: handle_metadata,
    ApiKey.PRODUCE: handle_produce,
    ApiKey.FETCH: handle_fetch,
    ApiKey.LIST_OFFSETS: handle_list_offsets,
    ApiKey.FIND_COORDINATOR: handle_find_coordinator,
    ApiKey.INIT_PRODUCER_ID: handle_init_producer_id,
    ApiKey.ADD_PARTITIONS_TO_TXN: handle_add_partitions_to_txn,
    ApiKey.END_TXN: handle_end_txn,
    ApiKey.OFFSET_COMMIT: handle_offset_commit,
    ApiKey.OFFSET_FETCH: handle_offset_fetch,
    ApiKey.JOIN_GROUP: handle_join_group,
    ApiKey.SYNC_GROUP: handle_sync_group,
    ApiKey.HEARTBEAT: handle_heartbeat,
    ApiKey.LEAVE_GROUP: handle_leave_group,
}
assert HANDLERS.keys() == SUPPORTED_VERSIONS.keys()
