"""Unit: the cluster and transaction admin APIs' answers that real clients rarely provoke, each
as Kafka's: a real `DisklessBroker` over the in-memory coordinator, through the handler table."""

from __future__ import annotations

import dataclasses
from collections.abc import AsyncIterator
from typing import Any

import pytest
from kio.index import load_request_schema
from kio.schema.errors import ErrorCode as WireError

from diskless.coordinator import InMemoryBatchCoordinator
from diskless.kafka_server import ApiKey
from diskless.kafka_server._handlers.context import Session
from diskless.kafka_server._handlers.table import HANDLERS
from tests.kafka_server._handler_rig import (
    TOPIC,
    Context,
    context_of,
    request_of,
    started_broker,
)


@pytest.fixture
async def context() -> AsyncIterator[Context]:
    coordinator = InMemoryBatchCoordinator()
    broker = await started_broker(coordinator, 2)
    yield context_of(broker, coordinator)
    await broker.close(flush=False)
    await coordinator.close()


def _request(api: ApiKey, version: int, **values: Any) -> Any:
    return dataclasses.replace(request_of(load_request_schema(int(api), version)), **values)


async def _answer(context: Context, request: Any) -> Any:
    api = ApiKey(int(type(request).__api_key__))
    response = await HANDLERS[api](context, Session("test"), request)  # type: ignore[arg-type]
    assert response is not None
    return response


async def test_describe_producers_answers_each_partition(context: Context) -> None:
    base = _request(ApiKey.DESCRIBE_PRODUCERS, 0)
    entry = base.topics[0]
    request = dataclasses.replace(
        base,
        topics=(
            dataclasses.replace(entry, name=TOPIC, partition_indexes=(0, 2)),
            dataclasses.replace(entry, name="nowhere", partition_indexes=(0,)),
            dataclasses.replace(entry, name="bad name!", partition_indexes=(0,)),
        ),
    )
    answer = await _answer(context, request)
    codes = [[(p.partition_index, p.error_code) for p in t.partitions] for t in answer.topics]
    assert codes == [
        [(0, WireError.none), (2, WireError.unknown_topic_or_partition)],
        [(0, WireError.unknown_topic_or_partition)],
        [(0, WireError.invalid_topic_exception)],
    ]
    assert answer.topics[0].partitions[0].active_producers == ()


async def test_describe_transactions_of_no_id_and_of_an_unknown_one(context: Context) -> None:
    request = _request(ApiKey.DESCRIBE_TRANSACTIONS, 0, transactional_ids=("", "unknown"))
    answer = await _answer(context, request)
    assert [(s.transactional_id, s.error_code) for s in answer.transaction_states] == [
        ("", WireError.invalid_request),
        ("unknown", WireError.transactional_id_not_found),
    ]


async def test_an_election_without_a_live_broker_has_no_leader_to_elect(context: Context) -> None:
    base = _request(ApiKey.ELECT_LEADERS, 2)
    named = (dataclasses.replace(base.topic_partitions[0], topic=TOPIC, partitions=(0, 1)),)
    context.cluster.leave(0)
    for election, error in (
        (0, WireError.preferred_leader_not_available),
        (1, WireError.eligible_leaders_not_available),
    ):
        answer = await _answer(
            context, dataclasses.replace(base, election_type=election, topic_partitions=named)
        )
        (result,) = answer.replica_election_results
        assert [(p.partition_id, p.error_code) for p in result.partition_result] == [
            (0, error),
            (1, error),
        ]
    # With every partition asked for, those that no broker can lead are listed.
    every = await _answer(context, dataclasses.replace(base, topic_partitions=None))
    (result,) = every.replica_election_results
    assert [p.partition_id for p in result.partition_result] == [0, 1]


async def test_an_unknown_election_type_is_an_invalid_request(context: Context) -> None:
    base = _request(ApiKey.ELECT_LEADERS, 1)
    answer = await _answer(context, dataclasses.replace(base, election_type=2))
    assert answer.error_code == WireError.invalid_request
    assert {p.error_code for r in answer.replica_election_results for p in r.partition_result} == {
        WireError.invalid_request
    }


async def test_describe_cluster_v0_describes_the_brokers(context: Context) -> None:
    answer = await _answer(
        context,
        _request(ApiKey.DESCRIBE_CLUSTER, 0, include_cluster_authorized_operations=False),
    )
    assert (answer.error_code, answer.cluster_id, answer.controller_id) == (
        WireError.none,
        "test",
        0,
    )
    assert [(b.broker_id, b.host, b.port) for b in answer.brokers] == [(0, "127.0.0.1", 9092)]
    assert answer.cluster_authorized_operations == -(2**31)
