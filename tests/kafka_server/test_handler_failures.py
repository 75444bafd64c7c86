"""Unit: every API answers an infrastructure failure with the code the library's error table gives
its family, whichever layer meets the failure.

Each handler runs against a real `DisklessBroker` (in-memory store and coordinator) through the
`BrokerContext` a server gives it. With the batch coordinator down, some failures are met inside
the library (a produce's or a fetch's partitions, a transaction step) and come back as values,
the others raise into the handler; with the broker closed, the data APIs raise. Either way the
response carries `family(failure)` of `diskless._kafka_errors`, and nothing else.
"""

from __future__ import annotations

import dataclasses
import inspect
from collections.abc import AsyncIterator, Callable
from typing import Any, Final

import pytest
from kio.index import load_request_schema
from kio.schema.errors import ErrorCode as WireError

from diskless._kafka_errors import (
    admin_error,
    delete_records_error,
    describe_producers_error,
    fetch_error,
    find_coordinator_error,
    group_error,
    list_offsets_error,
    metadata_error,
    produce_error,
    txn_error,
)
from diskless._types import ErrorCode
from diskless.coordinator import (
    AclBinding,
    AclOperation,
    AclPermissionType,
    BatchCoordinator,
    InMemoryBatchCoordinator,
    PatternType,
    ResourceType,
)
from diskless.errors import BrokerClosedError, CoordinatorUnavailableError
from diskless.kafka_server import (
    SUPPORTED_VERSIONS,
    ApiKey,
    ServerConfig,
)
from diskless.kafka_server._coordination.acl_cache import AclCache
from diskless.kafka_server._coordination.authorizer import AuthorizerSettings
from diskless.kafka_server._coordination.share_sessions import ShareSessionKey
from diskless.kafka_server._handlers.context import ANONYMOUS, Session
from diskless.kafka_server._handlers.table import HANDLERS
from tests.kafka_server._handler_rig import (
    TOPIC,
    Context,
    context_of,
    error_codes,
    request_of,
    started_broker,
)

ALLOW: Final = AclPermissionType.ALLOW
FAMILIES: Final[dict[ApiKey, Callable[[BaseException], ErrorCode]]] = {
    ApiKey.PRODUCE: produce_error,
    ApiKey.FETCH: fetch_error,
    ApiKey.LIST_OFFSETS: list_offsets_error,
    ApiKey.OFFSET_FOR_LEADER_EPOCH: list_offsets_error,
    ApiKey.DELETE_RECORDS: delete_records_error,
    ApiKey.METADATA: metadata_error,
    ApiKey.FIND_COORDINATOR: find_coordinator_error,
    ApiKey.INIT_PRODUCER_ID: txn_error,
    ApiKey.ADD_PARTITIONS_TO_TXN: txn_error,
    ApiKey.ADD_OFFSETS_TO_TXN: txn_error,
    ApiKey.END_TXN: txn_error,
    ApiKey.TXN_OFFSET_COMMIT: group_error,
    ApiKey.OFFSET_COMMIT: group_error,
    ApiKey.OFFSET_FETCH: group_error,
    ApiKey.JOIN_GROUP: group_error,
    ApiKey.SYNC_GROUP: group_error,
    ApiKey.HEARTBEAT: group_error,
    ApiKey.LEAVE_GROUP: group_error,
    ApiKey.DESCRIBE_GROUPS: group_error,
    ApiKey.LIST_GROUPS: group_error,
    ApiKey.DELETE_GROUPS: group_error,
    ApiKey.OFFSET_DELETE: group_error,
    ApiKey.CONSUMER_GROUP_HEARTBEAT: group_error,
    ApiKey.CONSUMER_GROUP_DESCRIBE: group_error,
    ApiKey.SHARE_GROUP_HEARTBEAT: group_error,
    ApiKey.SHARE_GROUP_DESCRIBE: group_error,
    ApiKey.DESCRIBE_SHARE_GROUP_OFFSETS: group_error,
    ApiKey.ALTER_SHARE_GROUP_OFFSETS: group_error,
    ApiKey.DELETE_SHARE_GROUP_OFFSETS: group_error,
    ApiKey.CREATE_TOPICS: admin_error,
    ApiKey.DELETE_TOPICS: admin_error,
    ApiKey.CREATE_PARTITIONS: admin_error,
    ApiKey.DESCRIBE_CONFIGS: admin_error,
    ApiKey.ALTER_CONFIGS: admin_error,
    ApiKey.INCREMENTAL_ALTER_CONFIGS: admin_error,
    ApiKey.DESCRIBE_USER_SCRAM_CREDENTIALS: admin_error,
    ApiKey.ALTER_USER_SCRAM_CREDENTIALS: admin_error,
    ApiKey.CREATE_ACLS: admin_error,
    ApiKey.DESCRIBE_ACLS: admin_error,
    ApiKey.DELETE_ACLS: admin_error,
    ApiKey.DESCRIBE_TOPIC_PARTITIONS: metadata_error,
    ApiKey.ELECT_LEADERS: admin_error,
    ApiKey.DESCRIBE_PRODUCERS: describe_producers_error,
    ApiKey.LIST_TRANSACTIONS: txn_error,
    ApiKey.DESCRIBE_TRANSACTIONS: txn_error,
    ApiKey.SHARE_FETCH: fetch_error,
    ApiKey.SHARE_ACKNOWLEDGE: fetch_error,
}
"""Each API's family in the library's table (ApiVersions calls nothing that can fail, nor do
SaslHandshake and SaslAuthenticate once they reach the handlers)."""
CALLING_NOTHING: Final = {
    ApiKey.API_VERSIONS,
    ApiKey.SASL_HANDSHAKE,
    ApiKey.SASL_AUTHENTICATE,
    ApiKey.DESCRIBE_CLUSTER,  # the cluster view and the ACLs are this process's copies
    ApiKey.DESCRIBE_LOG_DIRS,  # no log directory to read
}
DATA_APIS: Final = (
    ApiKey.PRODUCE,
    ApiKey.FETCH,
    ApiKey.LIST_OFFSETS,
    ApiKey.OFFSET_FOR_LEADER_EPOCH,
)
"""The APIs a closed broker refuses (the others go to the coordinator or the front ends)."""
_METHODS: Final = frozenset(
    name
    for name in dir(BatchCoordinator)
    if not name.startswith("_") and inspect.iscoroutinefunction(getattr(BatchCoordinator, name))
)


class _Down(InMemoryBatchCoordinator):
    """The in-memory coordinator, every call of whose contract fails while `down`, as calls do
    while a coordinator's server is unreachable."""

    down = False

    def __getattribute__(self, name: str) -> Any:
        if name in _METHODS and object.__getattribute__(self, "down"):

            async def unreachable(*args: object, **kwargs: object) -> Any:
                raise CoordinatorUnavailableError("the coordinator's server is down")

            return unreachable
        return super().__getattribute__(name)


@pytest.fixture
async def context() -> AsyncIterator[tuple[Context, _Down]]:
    coordinator = _Down()
    broker = await started_broker(coordinator, 1)
    # An authorizer that allows the test's anonymous requests everything, so that the ACL APIs
    # reach the coordinator.
    acls = AclCache(coordinator, AuthorizerSettings(frozenset({ANONYMOUS})), 1000)
    ctx = context_of(broker, coordinator, acls=acls)
    # the share session the requests (member `t` of group `t`, epoch -1) close
    ctx.shares.sessions.fetch(ShareSessionKey(0, TOPIC, TOPIC), 0, None, (), ())
    yield ctx, coordinator
    coordinator.down = False
    await broker.close(flush=False)
    await coordinator.close()


async def _answer(context: Context, api: ApiKey) -> set[WireError]:
    request = request_of(load_request_schema(int(api), SUPPORTED_VERSIONS[api][1]))
    response = await HANDLERS[api](context, Session("test"), request)
    assert response is not None
    return error_codes(response)


def test_every_api_that_calls_the_library_has_a_family() -> None:
    assert set(FAMILIES) == set(HANDLERS) - CALLING_NOTHING


@pytest.mark.parametrize("api", sorted(FAMILIES), ids=lambda api: api.name)
async def test_a_coordinator_outage_is_the_familys_code(
    context: tuple[Context, _Down], api: ApiKey
) -> None:
    ctx, coordinator = context
    coordinator.down = True
    expected = WireError(int(FAMILIES[api](CoordinatorUnavailableError("down"))))
    assert await _answer(ctx, api) == {expected}


@pytest.mark.parametrize(
    ("api", "version"),
    [
        (api, version)
        for api in sorted(FAMILIES)
        for version in range(SUPPORTED_VERSIONS[api][0], SUPPORTED_VERSIONS[api][1] + 1)
    ],
    ids=lambda value: value.name if isinstance(value, ApiKey) else f"v{value}",
)
async def test_every_version_answers_an_outage_with_the_familys_code(
    context: tuple[Context, _Down], api: ApiKey, version: int
) -> None:
    """Whoever answers the failure, the handler entry by entry or its route for the whole request,
    answers it in every version's response shape."""
    ctx, coordinator = context
    coordinator.down = True
    expected = WireError(int(FAMILIES[api](CoordinatorUnavailableError("down"))))
    request = request_of(load_request_schema(int(api), version))
    response = await HANDLERS[api](ctx, Session("test"), request)
    assert response is not None
    assert error_codes(response) == {expected}


@pytest.mark.parametrize("api", DATA_APIS, ids=lambda api: api.name)
async def test_a_closed_broker_is_the_familys_code(
    context: tuple[Context, _Down], api: ApiKey
) -> None:
    ctx, _ = context
    await ctx.broker.close(flush=False)
    expected = WireError(int(FAMILIES[api](BrokerClosedError("closed"))))
    assert expected is WireError.not_leader_or_follower
    assert await _answer(ctx, api) == {expected}


async def test_a_producers_metadata_in_an_outage_is_retriable_not_an_authorization_failure() -> (
    None
):
    """A producer's Metadata (auto-creation allowed, the principal may write the topic but not
    create topics) while the coordinator is down: the topic is not known to be missing, so it
    is answered the outage's retriable code; TOPIC_AUTHORIZATION_FAILED would make the client
    give the topic up for good."""
    coordinator = _Down()
    broker = await started_broker(coordinator, 1)
    acls = AclCache(coordinator, AuthorizerSettings(), 1000)
    principal = "User:alice"
    await acls.create(
        [
            AclBinding(
                ResourceType.TOPIC, TOPIC, PatternType.LITERAL, principal, "*", operation, ALLOW
            )
            for operation in (AclOperation.WRITE, AclOperation.DESCRIBE)
        ]
    )
    config = ServerConfig(
        authorizer_class_name="kafka.security.authorizer.AclAuthorizer",
        auto_create_topics_enable=True,
    )
    ctx = context_of(broker, coordinator, config, acls)
    api = ApiKey.METADATA
    schema = load_request_schema(int(api), SUPPORTED_VERSIONS[api][1])
    request = dataclasses.replace(request_of(schema), allow_auto_topic_creation=True)
    session = Session("test", client_host="127.0.0.1", principal=principal)
    try:
        # A topic this broker never described: answered the outage's code.
        coordinator.down = True
        outage = WireError(int(metadata_error(CoordinatorUnavailableError("down"))))
        assert outage.retriable
        assert error_codes(await HANDLERS[api](ctx, session, request)) == {outage}
        coordinator.down = False
        assert error_codes(await HANDLERS[api](ctx, session, request)) == set()
        # Once described, it is answered from the broker's last copy, as Kafka's brokers answer
        # from their metadata cache.
        coordinator.down = True
        assert error_codes(await HANDLERS[api](ctx, session, request)) == set()
    finally:
        coordinator.down = False
        await broker.close(flush=False)
        await coordinator.close()
