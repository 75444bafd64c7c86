"""Unit: the typed handler table, and the Fetch long poll on the broker's injected clock.

The handlers run against a real `DisklessBroker` (in-memory store and coordinator) through the
same `BrokerContext` a server gives them; no socket is involved.
"""

from __future__ import annotations

import asyncio
import dataclasses
import datetime
import typing
from collections.abc import AsyncIterator

import kio.schema.produce.v3 as produce_v3
import kio.schema.produce.v5 as produce_v5
import pytest
from kio.index import load_request_schema, load_response_schema
from kio.schema.errors import ErrorCode as WireError
from kio.schema.fetch.v12 import response as fetch_v12_response
from kio.static.protocol import Entity

from diskless import DisklessBroker, ManualClock
from diskless.coordinator import InMemoryBatchCoordinator
from diskless.kafka_server import SUPPORTED_VERSIONS, ClusterView, ServerConfig, TransactionFront
from diskless.kafka_server._coordination.credentials import Credentials
from diskless.kafka_server._coordination.group_coordinator import GroupCoordinator
from diskless.kafka_server._handlers._route import Route
from diskless.kafka_server._handlers.context import Session
from diskless.kafka_server._handlers.table import HANDLERS
from diskless.kafka_server._protocol.apis import Api, ApiKey
from diskless.kafka_server._protocol.fields import build
from diskless.kafka_server._protocol.messages import FetchRequest, ProduceRequest
from diskless.storage import MemoryObjectStore
from testkit.wire import fetch_request
from tests.kafka_server._handler_rig import Context

WAIT_S = 30.0
"""Far longer than the test may take on a real clock: only the manual clock can end the wait."""


@pytest.fixture
async def context() -> AsyncIterator[tuple[Context, ManualClock]]:
    clock = ManualClock()
    coordinator = InMemoryBatchCoordinator()
    broker = DisklessBroker(0, MemoryObjectStore(), coordinator, clock=clock)
    await broker.start()
    await broker.create_topic("waiting", 1)
    view = ClusterView("test")
    yield (
        Context(
            broker,
            view,
            TransactionFront(coordinator, clock=clock),
            GroupCoordinator(coordinator, view, clock=clock),
            ServerConfig(fetch_wait_ms_max=int(WAIT_S * 2000)),
            Credentials(coordinator),
        ),
        clock,
    )
    await broker.close(flush=False)
    await coordinator.close()


async def test_an_empty_fetch_waits_on_the_brokers_clock(
    context: tuple[Context, ManualClock],
) -> None:
    ctx, clock = context
    request = dataclasses.replace(
        fetch_request("waiting", 1), min_bytes=1, max_wait=datetime.timedelta(seconds=WAIT_S)
    )
    answer = asyncio.ensure_future(HANDLERS[ApiKey.FETCH](ctx, Session("test"), request))
    await clock.advance(WAIT_S - 1)
    assert not answer.done(), "the long poll ended before its max_wait on the broker's clock"
    await clock.advance(2)
    response = await asyncio.wait_for(answer, 10)
    assert isinstance(response, fetch_v12_response.FetchResponse)
    (partition,) = response.responses[0].partitions
    assert (partition.error_code, partition.records) == (WireError.none, b"")


def test_every_route_serves_the_union_its_handler_is_annotated_with() -> None:
    for key, handler in HANDLERS.items():
        assert isinstance(handler, Route)
        assert handler.api.key is key
        union = typing.get_type_hints(handler._handle)["request"]
        low, high = SUPPORTED_VERSIONS[key]
        expected = {load_request_schema(int(key), v) for v in range(low, high + 1)}
        assert (set(typing.get_args(union)) or {union}) == expected, key  # one version: a class
        for version in range(low, high + 1):
            assert handler.api.response_schema(version) is load_response_schema(int(key), version)
        assert not handler.api.serves(low - 1) and not handler.api.serves(high + 1)


def test_an_api_is_one_key_and_one_range_of_versions() -> None:
    assert Api(ProduceRequest).versions == SUPPORTED_VERSIONS[ApiKey.PRODUCE]
    with pytest.raises(TypeError, match="one API"):
        Api(ProduceRequest | FetchRequest)
    with pytest.raises(TypeError, match="not one range"):
        Api(produce_v3.ProduceRequest | produce_v5.ProduceRequest)
    with pytest.raises(TypeError, match="one API"):
        Api(int)


async def test_a_request_of_another_api_is_refused_before_the_handler_runs(
    context: tuple[Context, ManualClock],
) -> None:
    ctx, _ = context
    with pytest.raises(TypeError, match="not a request of PRODUCE"):
        await HANDLERS[ApiKey.PRODUCE](ctx, Session("test"), fetch_request("waiting", 1))


async def test_an_answer_of_another_class_than_the_versions_response_is_refused(
    context: tuple[Context, ManualClock],
) -> None:
    ctx, _ = context

    async def answers_produce(
        context: Context, session: Session, request: FetchRequest, response: type[Entity]
    ) -> Entity:
        return build(load_response_schema(int(ApiKey.PRODUCE), 11), responses=())

    wrong = Route(answers_produce)
    with pytest.raises(TypeError, match="FETCH answered"):
        await wrong(ctx, Session("test"), fetch_request("waiting", 1))
