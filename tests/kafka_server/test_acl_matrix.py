"""Integration: every API enforces Kafka's ACLs, each resource type with its own code.

Each handler runs against a real `DisklessBroker` and an authorizer over ACLs stored in the
in-memory batch coordinator, for a principal whose Session is built here (`User:alice` from
127.0.0.1). For each API, `NEEDS` lists what Kafka requires; the request (one entry of every
array: topic `t`, partition 0, group `t`, transactional id `t`) is answered:
- with all of it granted: with no authorization error;
- with one grant missing, or overruled by a DENY: with that resource's Kafka code.
"""

from __future__ import annotations

import dataclasses
from collections.abc import AsyncIterator
from typing import Any, Final, NamedTuple

import pytest
from kio.index import load_request_schema
from kio.schema.errors import ErrorCode as WireError

from diskless import DisklessBroker
from diskless.coordinator import (
    CLUSTER_NAME,
    AclBinding,
    AclOperation,
    AclPermissionType,
    InMemoryBatchCoordinator,
    PatternType,
    ResourceType,
)
from diskless.kafka_server import (
    SUPPORTED_VERSIONS,
    ApiKey,
    ClusterView,
    ServerConfig,
    TransactionFront,
)
from diskless.kafka_server._coordination.acl_cache import AclCache
from diskless.kafka_server._coordination.authorizer import AuthorizerSettings
from diskless.kafka_server._coordination.cluster_view import BrokerAddress
from diskless.kafka_server._coordination.credentials import Credentials
from diskless.kafka_server._coordination.group_coordinator import GroupCoordinator
from diskless.kafka_server._handlers.context import Session
from diskless.kafka_server._handlers.table import HANDLERS
from diskless.storage import MemoryObjectStore
from tests.kafka_server._handler_rig import TOPIC, Context, error_codes, request_of

Op = AclOperation
R = ResourceType
ALLOW = AclPermissionType.ALLOW
PRINCIPAL: Final = "User:alice"
HOST: Final = "127.0.0.1"
AUTHORIZATION: Final = {
    R.TOPIC: WireError.topic_authorization_failed,
    R.GROUP: WireError.group_authorization_failed,
    R.CLUSTER: WireError.cluster_authorization_failed,
    R.TRANSACTIONAL_ID: WireError.transactional_id_authorization_failed,
}


class Need(NamedTuple):
    resource_type: ResourceType
    operation: AclOperation

    def grant(self, permission: AclPermissionType = ALLOW) -> AclBinding:
        name = CLUSTER_NAME if self.resource_type is R.CLUSTER else TOPIC
        return AclBinding(
            self.resource_type,
            name,
            PatternType.LITERAL,
            PRINCIPAL,
            "*",
            self.operation,
            permission,
        )


NEEDS: Final[dict[ApiKey, list[Need]]] = {
    # a transactional produce (the request names transactional id `t`)
    ApiKey.PRODUCE: [Need(R.TRANSACTIONAL_ID, Op.WRITE), Need(R.TOPIC, Op.WRITE)],
    ApiKey.FETCH: [Need(R.TOPIC, Op.READ)],
    ApiKey.LIST_OFFSETS: [Need(R.TOPIC, Op.DESCRIBE)],
    ApiKey.OFFSET_FOR_LEADER_EPOCH: [Need(R.TOPIC, Op.DESCRIBE)],
    ApiKey.METADATA: [Need(R.TOPIC, Op.DESCRIBE)],
    ApiKey.FIND_COORDINATOR: [Need(R.GROUP, Op.DESCRIBE)],
    ApiKey.INIT_PRODUCER_ID: [Need(R.TRANSACTIONAL_ID, Op.WRITE)],
    ApiKey.ADD_PARTITIONS_TO_TXN: [Need(R.TRANSACTIONAL_ID, Op.WRITE), Need(R.TOPIC, Op.WRITE)],
    ApiKey.ADD_OFFSETS_TO_TXN: [Need(R.TRANSACTIONAL_ID, Op.WRITE), Need(R.GROUP, Op.READ)],
    ApiKey.END_TXN: [Need(R.TRANSACTIONAL_ID, Op.WRITE)],
    ApiKey.TXN_OFFSET_COMMIT: [
        Need(R.TRANSACTIONAL_ID, Op.WRITE),
        Need(R.GROUP, Op.READ),
        Need(R.TOPIC, Op.READ),
    ],
    ApiKey.OFFSET_COMMIT: [Need(R.GROUP, Op.READ), Need(R.TOPIC, Op.READ)],
    ApiKey.OFFSET_FETCH: [Need(R.GROUP, Op.DESCRIBE), Need(R.TOPIC, Op.DESCRIBE)],
    ApiKey.JOIN_GROUP: [Need(R.GROUP, Op.READ)],
    ApiKey.SYNC_GROUP: [Need(R.GROUP, Op.READ)],
    ApiKey.HEARTBEAT: [Need(R.GROUP, Op.READ)],
    ApiKey.LEAVE_GROUP: [Need(R.GROUP, Op.READ)],
    ApiKey.CREATE_TOPICS: [Need(R.TOPIC, Op.CREATE)],
    ApiKey.DELETE_TOPICS: [Need(R.TOPIC, Op.DELETE)],
    ApiKey.CREATE_PARTITIONS: [Need(R.TOPIC, Op.ALTER)],
    ApiKey.DESCRIBE_CONFIGS: [Need(R.TOPIC, Op.DESCRIBE_CONFIGS)],
    ApiKey.DELETE_RECORDS: [Need(R.TOPIC, Op.DELETE)],
    ApiKey.CREATE_ACLS: [Need(R.CLUSTER, Op.ALTER)],
    ApiKey.DESCRIBE_ACLS: [Need(R.CLUSTER, Op.DESCRIBE)],
    ApiKey.DELETE_ACLS: [Need(R.CLUSTER, Op.ALTER)],
    ApiKey.DESCRIBE_USER_SCRAM_CREDENTIALS: [Need(R.CLUSTER, Op.DESCRIBE)],
    ApiKey.ALTER_USER_SCRAM_CREDENTIALS: [Need(R.CLUSTER, Op.ALTER)],
}
CASES: Final = [(api, need) for api, needs in NEEDS.items() for need in needs]


@dataclasses.dataclass
class Setup:
    context: Context
    acls: AclCache


@pytest.fixture
async def setup() -> AsyncIterator[Setup]:
    coordinator = InMemoryBatchCoordinator()
    broker = DisklessBroker(0, MemoryObjectStore(), coordinator)
    await broker.start()
    await broker.create_topic(TOPIC, 1)
    view = ClusterView("test")
    view.join(BrokerAddress(0, "127.0.0.1", 9092, None))
    acls = AclCache(coordinator, AuthorizerSettings(), 1000)
    await acls.refresh()
    context = Context(
        broker,
        view,
        TransactionFront(coordinator),
        GroupCoordinator(coordinator, view),
        ServerConfig(authorizer_class_name="kafka.security.authorizer.AclAuthorizer"),
        Credentials(coordinator),
        acls,
    )
    yield Setup(context, acls)
    await broker.close(flush=False)
    await coordinator.close()


def _request(api: ApiKey) -> Any:
    return request_of(load_request_schema(int(api), SUPPORTED_VERSIONS[api][1]))


async def _codes(setup: Setup, api: ApiKey, request: object = None) -> set[WireError]:
    if request is None:
        request = _request(api)
    session = Session("test", client_host=HOST, principal=PRINCIPAL)
    response = await HANDLERS[api](setup.context, session, request)  # type: ignore[arg-type]
    assert response is not None
    return error_codes(response)


def test_every_api_but_those_before_authentication_is_in_the_matrix() -> None:
    before = {ApiKey.API_VERSIONS, ApiKey.SASL_HANDSHAKE, ApiKey.SASL_AUTHENTICATE}
    assert set(NEEDS) == set(HANDLERS) - before


@pytest.mark.parametrize("api", sorted(NEEDS), ids=lambda api: api.name)
async def test_granted_everything_it_needs_an_api_is_authorized(setup: Setup, api: ApiKey) -> None:
    await setup.acls.create([need.grant() for need in NEEDS[api]])
    assert not await _codes(setup, api) & set(AUTHORIZATION.values())


@pytest.mark.parametrize(
    ("api", "missing"), CASES, ids=[f"{a.name}-{n.resource_type.name}" for a, n in CASES]
)
async def test_without_one_grant_an_api_answers_that_resources_code(
    setup: Setup, api: ApiKey, missing: Need
) -> None:
    others = [need.grant() for need in NEEDS[api] if need != missing]
    if others:
        await setup.acls.create(others)
    assert AUTHORIZATION[missing.resource_type] in await _codes(setup, api)


@pytest.mark.parametrize(
    ("api", "denied"), CASES, ids=[f"{a.name}-{n.resource_type.name}" for a, n in CASES]
)
async def test_a_deny_overrules_the_grant(setup: Setup, api: ApiKey, denied: Need) -> None:
    deny = denied._replace(operation=Op.ALL).grant(AclPermissionType.DENY)
    await setup.acls.create([*(need.grant() for need in NEEDS[api]), deny])
    assert AUTHORIZATION[denied.resource_type] in await _codes(setup, api)


async def test_find_coordinator_of_a_transactional_id_needs_describe_on_it(setup: Setup) -> None:
    request = dataclasses.replace(_request(ApiKey.FIND_COORDINATOR), key_type=1)
    assert WireError.transactional_id_authorization_failed in await _codes(
        setup, ApiKey.FIND_COORDINATOR, request
    )
    await setup.acls.create([Need(R.TRANSACTIONAL_ID, Op.DESCRIBE).grant()])
    assert not await _codes(setup, ApiKey.FIND_COORDINATOR, request) & set(AUTHORIZATION.values())


@pytest.mark.parametrize(
    "grant",
    [
        Need(R.CLUSTER, Op.IDEMPOTENT_WRITE).grant(),
        Need(R.TOPIC, Op.WRITE).grant(),
        AclBinding(R.TOPIC, "x", PatternType.PREFIXED, PRINCIPAL, "*", Op.WRITE, ALLOW),
    ],
    ids=["idempotent-write-on-the-cluster", "write-on-a-topic", "write-on-a-prefix"],
)
async def test_an_idempotent_producer_needs_idempotent_write_or_write_on_a_topic(
    setup: Setup, grant: AclBinding
) -> None:
    """KIP-679: InitProducerId without a transactional id."""
    request = dataclasses.replace(_request(ApiKey.INIT_PRODUCER_ID), transactional_id=None)
    refused = WireError.cluster_authorization_failed
    assert refused in await _codes(setup, ApiKey.INIT_PRODUCER_ID, request)
    await setup.acls.create([grant])
    assert refused not in await _codes(setup, ApiKey.INIT_PRODUCER_ID, request)


async def test_create_topics_by_a_cluster_grant(setup: Setup) -> None:
    request = _request(ApiKey.CREATE_TOPICS)
    assert WireError.topic_authorization_failed in await _codes(
        setup, ApiKey.CREATE_TOPICS, request
    )
    await setup.acls.create([Need(R.CLUSTER, Op.CREATE).grant()])
    codes = await _codes(setup, ApiKey.CREATE_TOPICS, request)
    assert WireError.topic_authorization_failed not in codes


async def test_offset_for_leader_epoch_by_a_cluster_action_grant(setup: Setup) -> None:
    """Kafka lets a follower's CLUSTER_ACTION on the cluster stand for DESCRIBE on every topic."""
    refused = WireError.topic_authorization_failed
    assert refused in await _codes(setup, ApiKey.OFFSET_FOR_LEADER_EPOCH)
    await setup.acls.create([Need(R.CLUSTER, Op.CLUSTER_ACTION).grant()])
    assert refused not in await _codes(setup, ApiKey.OFFSET_FOR_LEADER_EPOCH)


async def _respond(setup: Setup, api: ApiKey, request: object) -> Any:
    session = Session("test", client_host=HOST, principal=PRINCIPAL)
    return await HANDLERS[api](setup.context, session, request)  # type: ignore[arg-type]


async def test_a_topic_without_describe_leaves_no_trace_in_metadata(setup: Setup) -> None:
    await setup.context.broker.create_topic("visible", 2)
    await setup.acls.create(
        [AclBinding(R.TOPIC, "visible", PatternType.LITERAL, PRINCIPAL, "*", Op.READ, ALLOW)]
    )
    metadata = _request(ApiKey.METADATA)
    listed = await _respond(setup, ApiKey.METADATA, dataclasses.replace(metadata, topics=None))
    assert [t.name for t in listed.topics] == ["visible"]  # `t` exists, and is not listed
    named = dataclasses.replace(
        metadata,
        topics=tuple(dataclasses.replace(metadata.topics[0], name=n) for n in (TOPIC, "nope")),
    )
    existing, missing = (await _respond(setup, ApiKey.METADATA, named)).topics
    assert existing.error_code is WireError.topic_authorization_failed
    # Whether the topic exists or not, the answer is the same.
    assert dataclasses.replace(existing, name="nope") == missing
    assert existing.partitions == () and existing.topic_id is None


async def test_metadata_creates_a_missing_topic_only_with_create(setup: Setup) -> None:
    """Describing a missing topic is not enough to create it: TOPIC_AUTHORIZATION_FAILED, and
    it is not created; with CREATE on it (or on the cluster) it is."""
    setup.context = dataclasses.replace(
        setup.context, config=ServerConfig(auto_create_topics_enable=True)
    )
    describe = AclBinding(R.TOPIC, "new", PatternType.PREFIXED, PRINCIPAL, "*", Op.DESCRIBE, ALLOW)
    await setup.acls.create([describe])
    metadata = _request(ApiKey.METADATA)
    wanted = dataclasses.replace(
        metadata,
        topics=(dataclasses.replace(metadata.topics[0], name="new-one"),),
        allow_auto_topic_creation=True,
    )
    (refused,) = (await _respond(setup, ApiKey.METADATA, wanted)).topics
    assert refused.error_code is WireError.topic_authorization_failed
    assert await setup.context.broker.describe_topics(["new-one"]) == []
    await setup.acls.create([describe._replace(operation=Op.CREATE)])
    (created,) = (await _respond(setup, ApiKey.METADATA, wanted)).topics
    assert created.error_code is WireError.none and len(created.partitions) == 1
