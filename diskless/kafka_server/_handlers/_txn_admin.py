"""What operators' tools read of producers and transactions: DescribeProducers,
ListTransactions and DescribeTransactions, from the state the batch coordinator keeps.

- DescribeProducers lists a partition's producers as the coordinator retains them (producer id,
  epoch, last sequence and timestamp, coordinator epoch, and the first offset of the open
  transaction, -1 if none): the epochs and sequences the coordinator fences batches by, which
  for a transactional producer of transaction version 1 are the bridged ones
  (`_coordination.txn_front`). Any broker answers for any partition (Kafka's leader does): there
  is one copy of that state. Needs READ on the topic (TOPIC_AUTHORIZATION_FAILED); a missing
  topic or partition is UNKNOWN_TOPIC_OR_PARTITION, an invalid name INVALID_TOPIC_EXCEPTION.
- ListTransactions lists the transactional ids this broker coordinates (those FindCoordinator
  sends here): an admin client asks every broker and joins the answers, so each id is listed
  once across the cluster, as with Kafka's transaction coordinators. Filters as Kafka's: by
  state (Kafka's state names; an unknown name is echoed in `unknown_state_filters` and matches
  nothing), by producer id, and (v1+) by duration, keeping transactions that started more than
  that long ago (a completed one: that ended, its start is not kept; one never started always
  passes, as in Kafka). Only ids the principal may DESCRIBE are listed.
- DescribeTransactions answers each id from its durable record: Kafka's state name, the
  producer id and the epoch the producer holds, the timeout, when the open transaction started
  (-1: none is open; a completed one's start is not kept), and its partitions, of topics the
  principal may DESCRIBE only. An id the principal may not DESCRIBE is
  TRANSACTIONAL_ID_AUTHORIZATION_FAILED, an empty one INVALID_REQUEST, an unknown one
  TRANSACTIONAL_ID_NOT_FOUND.
"""

from __future__ import annotations

import datetime
from collections.abc import Mapping
from typing import Final

from kio.schema.errors import ErrorCode as WireError
from kio.static.protocol import Entity, ResponsePayload

from diskless._kafka_errors import describe_producers_error
from diskless._types import TopicPartition
from diskless.coordinator import ProducerSnapshot, check_topic_name
from diskless.errors import DisklessError
from diskless.kafka_server._handlers._access import DESCRIBE, READ, Access
from diskless.kafka_server._handlers._errors import failure
from diskless.kafka_server._handlers._route import NO_THROTTLE, Response
from diskless.kafka_server._handlers._steps import Steps
from diskless.kafka_server._handlers.context import BrokerContext, Session
from diskless.kafka_server._protocol.fields import build, nested
from diskless.kafka_server._protocol.messages_cluster import (
    DescribeProducersRequest,
    DescribeTransactionsRequest,
    ListTransactionsRequest,
)
from diskless.txn import TxnRecord, TxnState

KAFKA_STATES: Final = frozenset({s.value for s in TxnState} | {"PrepareEpochFence", "Dead"})
"""Kafka's transaction state names (`TransactionState.fromName`): the coordinator's, and two
transient ones of Kafka's that no record here is ever in."""
_NO_OFFSET: Final = -1
_COMPLETED: Final = frozenset({TxnState.COMPLETE_COMMIT, TxnState.COMPLETE_ABORT})


# --- DescribeProducers ----------------------------------------------------------------------------
async def handle_describe_producers(
    context: BrokerContext, session: Session, request: DescribeProducersRequest, response: Response
) -> ResponsePayload:
    access = Access(context, session)
    refusals: dict[str, tuple[WireError, str | None]] = {}
    for topic in request.topics:
        try:
            check_topic_name(topic.name)
        except ValueError as e:
            refusals[topic.name] = (WireError.invalid_topic_exception, str(e))
            continue
        if not access.topic(READ, topic.name):
            refusals[topic.name] = (WireError.topic_authorization_failed, None)
    names = sorted({t.name for t in request.topics} - refusals.keys())
    try:
        counts = {d.name: d.partitions for d in await context.broker.describe_topics(names)}
    except DisklessError as e:
        code = failure(describe_producers_error, e, "describing topics for DescribeProducers")
        counts = {}
        refusals.update(dict.fromkeys(names, (code, "the batch coordinator is unavailable")))
    topic_entry = nested(response, "TopicResponse")
    steps = Steps()
    topics = []
    for topic in request.topics:
        refused = refusals.get(topic.name)
        if refused is None and topic.name not in counts:
            refused = (WireError.unknown_topic_or_partition, None)
        partitions = []
        for p in topic.partition_indexes:
            await steps.pause()
            partitions.append(
                await _producers_of(context, response, TopicPartition(topic.name, int(p)), counts)
                if refused is None
                else _producers_entry(response, int(p), *refused)
            )
        topics.append(build(topic_entry, name=topic.name, partitions=tuple(partitions)))
    return build(response, throttle_time=NO_THROTTLE, topics=tuple(topics))


async def _producers_of(
    context: BrokerContext, response: Response, tp: TopicPartition, counts: Mapping[str, int]
) -> Entity:
    if not 0 <= tp.partition < counts[tp.topic]:
        return _producers_entry(response, tp.partition, WireError.unknown_topic_or_partition)
    try:
        found = await context.transactions.describe_producers(tp)
    except DisklessError as e:
        code = failure(describe_producers_error, e, f"describing the producers of {tp}")
        return _producers_entry(response, tp.partition, code, "the batch coordinator failed")
    return _producers_entry(response, tp.partition, WireError.none, None, found)


def _producers_entry(
    response: Response,
    partition: int,
    error: WireError,
    message: str | None = None,
    producers: list[ProducerSnapshot] | tuple[()] = (),
) -> Entity:
    state_entry = nested(response, "ProducerState")
    return build(
        nested(response, "PartitionResponse"),
        partition_index=partition,
        error_code=error,
        error_message=message,
        active_producers=tuple(
            build(
                state_entry,
                producer_id=p.producer_id,
                producer_epoch=p.producer_epoch,
                last_sequence=p.last_sequence,
                last_timestamp=p.last_timestamp,
                coordinator_epoch=p.coordinator_epoch,
                current_txn_start_offset=(
                    _NO_OFFSET if p.current_txn_first_offset is None else p.current_txn_first_offset
                ),
            )
            for p in producers
        ),
    )


# --- ListTransactions -----------------------------------------------------------------------------
async def handle_list_transactions(
    context: BrokerContext, session: Session, request: ListTransactionsRequest, response: Response
) -> ResponsePayload:
    states = set(request.state_filters)
    producer_ids = {int(p) for p in request.producer_id_filters}
    duration = int(getattr(request, "duration_filter", -1))  # v1+
    now = context.broker.clock.now_ms()
    access = Access(context, session)
    entry = nested(response, "TransactionState")
    listed: list[Entity] = []
    after = ""
    while page := await context.transactions.list_txns(after):
        after = page[-1].transactional_id
        for record in page:
            if (
                (not states or record.state.value in states)
                and (not producer_ids or record.producer_id in producer_ids)
                and (duration < 0 or now - _running_since(record) > duration)
                and _coordinated_here(context, record.transactional_id)
                and access.transactional_id(DESCRIBE, record.transactional_id)
            ):
                listed.append(
                    build(
                        entry,
                        transactional_id=record.transactional_id,
                        producer_id=record.producer_id,
                        transaction_state=record.state.value,
                    )
                )
    return build(
        response,
        throttle_time=NO_THROTTLE,
        error_code=WireError.none,
        unknown_state_filters=tuple(sorted(states - KAFKA_STATES)),
        transaction_states=tuple(listed),
    )


def _coordinated_here(context: BrokerContext, transactional_id: str) -> bool:
    coordinator = context.cluster.coordinator_for(transactional_id)
    return coordinator is not None and coordinator.broker_id == context.broker_id


def _started(record: TxnRecord) -> int:
    return -1 if record.started_ms is None else record.started_ms


def _running_since(record: TxnRecord) -> int:
    """What the duration filter measures from: Kafka's start of the last transaction. A
    completed record keeps no start here, so it counts from its completion, after the start:
    a transaction that ended recently is never taken for a long one."""
    if record.state in _COMPLETED:
        return record.updated_ms
    return _started(record)


def list_transactions_error_response(
    request: ListTransactionsRequest, response: Response, code: WireError
) -> ResponsePayload:
    return build(
        response,
        throttle_time=NO_THROTTLE,
        error_code=code,
        unknown_state_filters=(),
        transaction_states=(),
    )


# --- DescribeTransactions -------------------------------------------------------------------------
async def handle_describe_transactions(
    context: BrokerContext,
    session: Session,
    request: DescribeTransactionsRequest,
    response: Response,
) -> ResponsePayload:
    access = Access(context, session)
    ids = list(request.transactional_ids)
    allowed = [tid for tid in dict.fromkeys(ids) if tid and access.transactional_id(DESCRIBE, tid)]
    records = dict(zip(allowed, await context.transactions.describe_txns(allowed), strict=True))
    entries = []
    for tid in ids:
        if tid and tid not in records:
            error = WireError.transactional_id_authorization_failed
        elif not tid:
            error = WireError.invalid_request
        elif (record := records[tid]) is None:
            error = WireError.transactional_id_not_found
        else:
            entries.append(_transaction_entry(response, access, record))
            continue
        entries.append(_transaction_error(response, tid, error))
    return build(response, throttle_time=NO_THROTTLE, transaction_states=tuple(entries))


def _transaction_entry(response: Response, access: Access, record: TxnRecord) -> Entity:
    by_topic: dict[str, list[int]] = {}
    for tp in record.partitions:
        by_topic.setdefault(tp.topic, []).append(tp.partition)
    visible = access.topics(DESCRIBE, by_topic)
    topic_entry = nested(response, "TopicData")
    return build(
        nested(response, "TransactionState"),
        error_code=WireError.none,
        transactional_id=record.transactional_id,
        transaction_state=record.state.value,
        transaction_timeout=datetime.timedelta(milliseconds=record.timeout_ms),
        transaction_start_time=_time(_started(record)),
        producer_id=record.producer_id,
        producer_epoch=record.client_epoch if record.client_epoch >= 0 else record.producer_epoch,
        topics=tuple(
            build(topic_entry, topic=topic, partitions=tuple(sorted(partitions)))
            for topic, partitions in by_topic.items()
            if topic in visible
        ),
    )


def _transaction_error(response: Response, transactional_id: str, error: WireError) -> Entity:
    return build(
        nested(response, "TransactionState"),
        error_code=error,
        transactional_id=transactional_id,
        transaction_state="",
        transaction_timeout=datetime.timedelta(0),
        transaction_start_time=_time(0),  # Kafka's default for the field: an error sets no other
        producer_id=-1,
        producer_epoch=-1,
        topics=(),
    )


def _time(millis: int) -> datetime.datetime:
    return datetime.datetime.fromtimestamp(millis / 1000, datetime.UTC)


def describe_transactions_error_response(
    request: DescribeTransactionsRequest, response: Response, code: WireError
) -> ResponsePayload:
    """Every id answered `code` (a failure of the coordinator: COORDINATOR_NOT_AVAILABLE)."""
    entries = tuple(_transaction_error(response, tid, code) for tid in request.transactional_ids)
    return build(response, throttle_time=NO_THROTTLE, transaction_states=entries)
