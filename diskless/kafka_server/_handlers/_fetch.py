"""The read path: Fetch (with its long poll) and ListOffsets.

A Fetch that finds fewer than `min_bytes` waits until data arrives or `max_wait` (capped by
`fetch_wait_ms_max`) runs out: `DisklessBroker.fetch` parks it until its partitions change,
never polling the coordinator. The wait runs on the broker's injected clock, so that a simulated
clock drives it in tests as it drives the rest of the broker.

Authorization: Fetch needs READ on each topic, ListOffsets DESCRIBE; a partition of a topic that
refuses is answered TOPIC_AUTHORIZATION_FAILED and never read.

Reads in the consumer's rack (KIP-392): a consumer's Fetch (v11+) carries its `client.rack`.
Every broker can serve every partition's reads, so when the broker asked is not in that rack and
a live broker is, the answer names a broker there as the partition's `preferred_read_replica`
and the consumer fetches from it from then on: its reads stop crossing zones. The broker named
is the one Metadata names as the partition's leader for a client of that rack (the rack's
produce representative, `_coordination.cluster_view`), so reads and writes of a partition in one
rack meet at one broker. As in Kafka (`ReplicaManager.findPreferredReadReplica`): only for a
consumer's fetch (a follower's `replica_id` is >= 0), only for a partition read without an
error, never the broker asked (-1 then), and such a partition comes back without records, the
fetch answered at once.

Leader epochs (KIP-320): every partition's leader epoch is the cluster's membership version
(`ClusterView.generation`). A Fetch (v9+) or ListOffsets (v4+) naming a `current_leader_epoch`
below it is answered FENCED_LEADER_EPOCH for that partition (the client refreshes its metadata),
one above it UNKNOWN_LEADER_EPOCH (another process learned a newer version first: the client
retries, and this process reads the membership again, `ClusterView.check_epoch`), as Kafka
answers; such a partition is not read, and the fetch is answered at once. Fetch v12 then names
the partition's current leader and epoch (`current_leader`, the broker Metadata names for the
consumer's rack). Its `diverging_epoch` stays unset: the log of a partition never diverges
between epochs (no replica is ever truncated), so no fetch position is past its epoch's end.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Final, NamedTuple

import kio.schema.fetch.v9 as fetch_v9
import kio.schema.fetch.v10 as fetch_v10
import kio.schema.fetch.v11 as fetch_v11
import kio.schema.fetch.v12 as fetch_v12
import kio.schema.list_offsets.v1 as list_offsets_v1
import kio.schema.list_offsets.v2 as list_offsets_v2
import kio.schema.list_offsets.v3 as list_offsets_v3
import msgspec
from kio.schema.errors import ErrorCode as WireError
from kio.static.protocol import Entity, ResponsePayload

from diskless._kafka_errors import fetch_error, list_offsets_error
from diskless._results import FetchResult, ListOffsetsResult
from diskless._types import ErrorCode, IsolationLevel, TopicPartition, check_isolation_level
from diskless.errors import DisklessError
from diskless.kafka_server._handlers._access import DESCRIBE, READ, Access
from diskless.kafka_server._handlers._errors import failure_code
from diskless.kafka_server._handlers._route import NO_THROTTLE, Response, millis
from diskless.kafka_server._handlers.context import BrokerContext, Session
from diskless.kafka_server._protocol.fields import build, fields_of, nested, wire
from diskless.kafka_server._protocol.messages import (
    FetchRequest,
    ListOffsetsRequest,
)
from diskless.kafka_server._protocol.recurring import RECURRING

_WITH_RACK: Final = (fetch_v11.FetchRequest, fetch_v12.FetchRequest)
"""Fetch v11 added `rack_id` (KIP-392): the consumer's `client.rack`."""
_FETCH_WITH_EPOCH: Final = (
    fetch_v9.FetchRequest,
    fetch_v10.FetchRequest,
    fetch_v11.FetchRequest,
    fetch_v12.FetchRequest,
)
"""Fetch v9 added `current_leader_epoch` (KIP-320)."""
_LIST_OFFSETS_WITHOUT_EPOCH: Final = (
    list_offsets_v1.ListOffsetsRequest,
    list_offsets_v2.ListOffsetsRequest,
    list_offsets_v3.ListOffsetsRequest,
)
"""ListOffsets v4 added `current_leader_epoch` (KIP-320)."""


_REFUSED: Final = FetchResult(ErrorCode.TOPIC_AUTHORIZATION_FAILED)
_NO_REPLICA: Final = -1
_EPOCH_ERRORS: Final = frozenset({ErrorCode.FENCED_LEADER_EPOCH, ErrorCode.UNKNOWN_LEADER_EPOCH})
"""`preferred_read_replica` when the consumer should keep fetching from the broker it asked."""


def _isolation(value: int) -> IsolationLevel | None:
    """The isolation level of a request, None when it names none (answered INVALID_REQUEST)."""
    try:
        return check_isolation_level(value)
    except ValueError:
        return None


# --- Fetch ----------------------------------------------------------------------------------------
class _Fetch(NamedTuple):
    """A Fetch request, as `DisklessBroker.fetch` takes it, and how long it may wait."""

    offsets: dict[TopicPartition, int]
    isolation: IsolationLevel | None
    max_bytes: int
    partition_max_bytes: int | None
    min_bytes: int
    wait_ms: int


async def handle_fetch(
    context: BrokerContext, session: Session, request: FetchRequest, response: Response
) -> ResponsePayload:
    if isinstance(request, _WITH_RACK) and request.rack_id:
        session.client_rack = request.rack_id
    fetch = _decode_fetch(request, context.config.fetch_wait_ms_max)
    refused = Access(context, session).refused(READ, fetch.offsets)
    for tp in refused:
        del fetch.offsets[tp]
    stale = _stale_epochs(context, request, fetch.offsets)
    for tp in stale:
        del fetch.offsets[tp]
    replicas = _read_replicas(context, session, request, fetch.offsets)
    if replicas or stale:  # Kafka answers at once a fetch that names a preferred read replica
        fetch = fetch._replace(wait_ms=0)  # (or an error)
    results = await _call_fetch(context, fetch)
    preferred = {
        tp: replica for tp, replica in replicas.items() if results[tp].error is ErrorCode.NONE
    }
    for tp in preferred:  # read there, so nothing crosses zones from here
        results[tp] = msgspec.structs.replace(results[tp], records=b"", aborted_transactions=[])
    results.update(dict.fromkeys(refused, _REFUSED))
    results.update((tp, FetchResult(code)) for tp, code in stale.items())
    if stale:
        rack = session.client_rack if session.client_rack is not None else context.rack
        leaders = context.cluster.leaders(stale, rack)
        current = _CurrentLeaders(leaders, context.cluster.generation)
        return _build_fetch(response, request, fetch.isolation, results, preferred, current)
    return _encode_fetch(response, request, fetch.isolation, results, preferred)


class _CurrentLeaders(NamedTuple):
    """What Fetch v12 names as the current leader of a partition refused for its epoch."""

    leaders: Mapping[TopicPartition, int]
    epoch: int


def _stale_epochs(
    context: BrokerContext, request: FetchRequest, partitions: Iterable[TopicPartition]
) -> dict[TopicPartition, ErrorCode]:
    """The partitions whose `current_leader_epoch` is not the cluster's, with Kafka's code."""
    if not isinstance(request, _FETCH_WITH_EPOCH):
        return {}
    wanted = set(partitions)
    stale: dict[TopicPartition, ErrorCode] = {}
    for topic in request.topics:
        for p in topic.partitions:
            tp = TopicPartition(topic.topic, p.partition)
            if tp in wanted:
                code = context.cluster.check_epoch(int(p.current_leader_epoch))
                if code is not ErrorCode.NONE:
                    stale[tp] = code
    return stale


def _read_replicas(
    context: BrokerContext,
    session: Session,
    request: FetchRequest,
    partitions: Iterable[TopicPartition],
) -> dict[TopicPartition, int]:
    """The broker of the consumer's rack to read each partition from, for the partitions this
    broker should not serve (see the module doc); empty when this broker is in that rack, no
    live broker is, or the fetch is not a consumer's with a rack."""
    if not isinstance(request, _WITH_RACK) or not request.rack_id or int(request.replica_id) >= 0:
        return {}
    rack = request.rack_id
    brokers = context.cluster.brokers()
    if rack == context.rack or not any(b.rack == rack for b in brokers):
        return {}
    reachable = {b.broker_id for b in brokers if b.on(session.listener) is not None}
    return {
        tp: broker_id
        for tp, broker_id in context.cluster.leaders(partitions, rack).items()
        if broker_id != context.broker_id and broker_id in reachable
    }


def _decode_fetch(request: FetchRequest, wait_ms_max: int) -> _Fetch:
    offsets: dict[TopicPartition, int] = {}
    partition_max_bytes = 0
    for topic in request.topics:
        for partition in topic.partitions:
            offsets[TopicPartition(topic.topic, partition.partition)] = int(partition.fetch_offset)
            partition_max_bytes = max(partition_max_bytes, int(partition.partition_max_bytes))
    return _Fetch(
        offsets,
        _isolation(int(request.isolation_level)),
        max(int(request.max_bytes), 0),  # negative budgets read as empty, as in Kafka
        partition_max_bytes or None,
        int(request.min_bytes),
        min(millis(request.max_wait), wait_ms_max),
    )


async def _call_fetch(context: BrokerContext, fetch: _Fetch) -> dict[TopicPartition, FetchResult]:
    """Every partition's result, once `min_bytes` arrived, an error did, or the wait ran out."""
    if fetch.isolation is None:
        return dict.fromkeys(fetch.offsets, FetchResult(ErrorCode.INVALID_REQUEST))
    try:
        return await context.broker.fetch(
            fetch.offsets,
            max_bytes=fetch.max_bytes,
            partition_max_bytes=fetch.partition_max_bytes,
            isolation_level=fetch.isolation,
            min_bytes=fetch.min_bytes,
            max_wait_ms=fetch.wait_ms,
        )
    except DisklessError as e:
        code = failure_code(fetch_error, e, f"fetch on broker {context.broker_id}")
        return dict.fromkeys(fetch.offsets, FetchResult(code))


def _encode_fetch(
    response: Response,
    request: FetchRequest,
    isolation: IsolationLevel | None,
    results: Mapping[TopicPartition, FetchResult],
    preferred: Mapping[TopicPartition, int],
) -> ResponsePayload:
    """The Fetch response; an empty one (no records anywhere: an idle consumer's, answered
    every `max_wait`) is shared between the requests it answers (`recurring`)."""
    empty = _empty_answers(request, results, preferred)
    if empty is None:
        return _build_fetch(response, request, isolation, results, preferred)
    return RECURRING.payload(
        (response, isolation, empty),
        lambda: _build_fetch(response, request, isolation, results, preferred),
    )


def _empty_answers(
    request: FetchRequest,
    results: Mapping[TopicPartition, FetchResult],
    preferred: Mapping[TopicPartition, int],
) -> tuple[tuple[str, tuple[tuple[int, ErrorCode, int, int, int, int], ...]], ...] | None:
    """Everything the response says, topic by topic in the request's order, when no partition
    returns records (nor, then, aborted transactions); None when one does."""
    answers = []
    for topic in request.topics:
        partitions = []
        for partition in topic.partitions:
            tp = TopicPartition(topic.topic, partition.partition)
            result = results[tp]
            if result.records or result.aborted_transactions:
                return None
            partitions.append(
                (
                    partition.partition,
                    result.error,
                    result.high_watermark,
                    result.last_stable_offset,
                    result.log_start_offset,
                    preferred.get(tp, _NO_REPLICA),
                )
            )
        answers.append((topic.topic, tuple(partitions)))
    return tuple(answers)


def _build_fetch(
    response: Response,
    request: FetchRequest,
    isolation: IsolationLevel | None,
    results: Mapping[TopicPartition, FetchResult],
    preferred: Mapping[TopicPartition, int],
    current: _CurrentLeaders | None = None,
) -> ResponsePayload:
    topic_entry = nested(response, "FetchableTopicResponse")
    partition_entry = nested(response, "PartitionData")
    aborted_entry = nested(response, "AbortedTransaction")
    leader_entry = None  # Fetch v12 names the current leader; v9 to v11 have no field for it
    if current is not None and "current_leader" in fields_of(partition_entry):
        leader_entry = nested(response, "LeaderIdAndEpoch")
    responses = []
    for topic in request.topics:
        partitions: list[Entity] = []
        for partition in topic.partitions:
            tp = TopicPartition(topic.topic, partition.partition)
            result = results[tp]
            aborted = tuple(
                build(aborted_entry, producer_id=pid, first_offset=first)
                for pid, first in result.aborted_transactions
            )
            leader = {}
            if current is not None and leader_entry is not None and result.error in _EPOCH_ERRORS:
                leader_id = current.leaders.get(tp, -1)
                leader["current_leader"] = build(
                    leader_entry, leader_id=leader_id, leader_epoch=current.epoch
                )
            partitions.append(
                build(
                    partition_entry,
                    **leader,
                    partition_index=partition.partition,
                    error_code=wire(result.error),
                    high_watermark=result.high_watermark,
                    last_stable_offset=result.last_stable_offset,
                    log_start_offset=result.log_start_offset,
                    aborted_transactions=(
                        aborted if isolation is IsolationLevel.READ_COMMITTED else None
                    ),
                    preferred_read_replica=preferred.get(tp, _NO_REPLICA),
                    records=bytes(result.records),
                )
            )
        responses.append(build(topic_entry, topic=topic.topic, partitions=tuple(partitions)))
    return build(
        response,
        throttle_time=NO_THROTTLE,
        error_code=WireError.none,
        session_id=0,  # no fetch sessions (KIP-227): clients keep sending full requests
        responses=tuple(responses),
    )


# --- ListOffsets ----------------------------------------------------------------------------------
async def handle_list_offsets(
    context: BrokerContext, session: Session, request: ListOffsetsRequest, response: Response
) -> ResponsePayload:
    isolation = _isolation(
        0  # v1 predates isolation levels: READ_UNCOMMITTED
        if isinstance(request, list_offsets_v1.ListOffsetsRequest)
        else int(request.isolation_level)
    )
    timestamps = {
        TopicPartition(topic.name, p.partition_index): int(p.timestamp)
        for topic in request.topics
        for p in topic.partitions
    }
    refused = Access(context, session).refused(DESCRIBE, timestamps)
    for tp in refused:
        del timestamps[tp]
    stale: dict[TopicPartition, ErrorCode] = {}
    if not isinstance(request, _LIST_OFFSETS_WITHOUT_EPOCH):
        for topic in request.topics:
            for p in topic.partitions:
                tp = TopicPartition(topic.name, p.partition_index)
                if tp in timestamps:
                    code = context.cluster.check_epoch(int(p.current_leader_epoch))
                    if code is not ErrorCode.NONE:
                        stale[tp] = code
                        del timestamps[tp]
    results = await _call_list_offsets(context, timestamps, isolation)
    results.update(dict.fromkeys(refused, ListOffsetsResult(ErrorCode.TOPIC_AUTHORIZATION_FAILED)))
    results.update((tp, ListOffsetsResult(code)) for tp, code in stale.items())
    return _encode_list_offsets(response, request, results, context.cluster.generation)


async def _call_list_offsets(
    context: BrokerContext, timestamps: dict[TopicPartition, int], isolation: IsolationLevel | None
) -> dict[TopicPartition, ListOffsetsResult]:
    if isolation is None:
        return dict.fromkeys(timestamps, ListOffsetsResult(ErrorCode.INVALID_REQUEST))
    try:
        return await context.broker.list_offsets(timestamps, isolation_level=isolation)
    except DisklessError as e:
        code = failure_code(list_offsets_error, e, f"list offsets on broker {context.broker_id}")
        return dict.fromkeys(timestamps, ListOffsetsResult(code))


def _encode_list_offsets(
    response: Response,
    request: ListOffsetsRequest,
    results: Mapping[TopicPartition, ListOffsetsResult],
    leader_epoch: int,
) -> ResponsePayload:
    topic_entry = nested(response, "ListOffsetsTopicResponse")
    partition_entry = nested(response, "ListOffsetsPartitionResponse")
    topics = []
    for topic in request.topics:
        partitions = []
        for p in topic.partitions:
            result = results[TopicPartition(topic.name, p.partition_index)]
            partitions.append(
                build(
                    partition_entry,
                    partition_index=p.partition_index,
                    error_code=wire(result.error),
                    timestamp=result.timestamp,
                    offset=result.offset,
                    leader_epoch=leader_epoch,
                )
            )
        topics.append(build(topic_entry, name=topic.name, partitions=tuple(partitions)))
    return build(response, throttle_time=NO_THROTTLE, topics=tuple(topics))
