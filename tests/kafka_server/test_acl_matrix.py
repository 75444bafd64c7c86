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
import datetime
from collections.abc import AsyncIterator
from typing import Any, Final, NamedTuple

import kio.schema.consumer_group_heartbeat.v1 as consumer_group_heartbeat_v1
import pytest
from kio.index import load_request_schema
from kio.schema.errors import ErrorCode as WireError
from kio.static.primitive import i32, i32Timedelta

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
from diskless.kafka_server._coordination.share_sessions import ShareSessionKey
from diskless.kafka_server._handlers.context import Session
from diskless.kafka_server._handlers.table import HANDLERS
from diskless.storage import MemoryObjectStore
from tests.kafka_server._handler_rig import (
    TOPIC,
    Context,
    context_of,
    error_codes,
    request_of,
    started_broker,
)

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
    ApiKey.DESCRIBE_GROUPS: [Need(R.GROUP, Op.DESCRIBE)],
    ApiKey.LIST_GROUPS: [],  # no ACL: groups the principal may not describe are left out
    ApiKey.DELETE_GROUPS: [Need(R.GROUP, Op.DELETE)],
    ApiKey.OFFSET_DELETE: [Need(R.GROUP, Op.DELETE), Need(R.TOPIC, Op.READ)],
    # subscribed by name to topic `t` (a regular expression matches only described topics)
    ApiKey.CONSUMER_GROUP_HEARTBEAT: [Need(R.GROUP, Op.READ), Need(R.TOPIC, Op.DESCRIBE)],
    ApiKey.CONSUMER_GROUP_DESCRIBE: [Need(R.GROUP, Op.DESCRIBE)],
    ApiKey.CREATE_TOPICS: [Need(R.TOPIC, Op.CREATE)],
    ApiKey.DELETE_TOPICS: [Need(R.TOPIC, Op.DELETE)],
    ApiKey.CREATE_PARTITIONS: [Need(R.TOPIC, Op.ALTER)],
    ApiKey.DESCRIBE_CONFIGS: [Need(R.TOPIC, Op.DESCRIBE_CONFIGS)],
    ApiKey.ALTER_CONFIGS: [Need(R.TOPIC, Op.ALTER_CONFIGS)],
    ApiKey.INCREMENTAL_ALTER_CONFIGS: [Need(R.TOPIC, Op.ALTER_CONFIGS)],
    ApiKey.DELETE_RECORDS: [Need(R.TOPIC, Op.DELETE)],
    ApiKey.CREATE_ACLS: [Need(R.CLUSTER, Op.ALTER)],
    ApiKey.DESCRIBE_ACLS: [Need(R.CLUSTER, Op.DESCRIBE)],
    ApiKey.DELETE_ACLS: [Need(R.CLUSTER, Op.ALTER)],
    ApiKey.DESCRIBE_USER_SCRAM_CREDENTIALS: [Need(R.CLUSTER, Op.DESCRIBE)],
    ApiKey.ALTER_USER_SCRAM_CREDENTIALS: [Need(R.CLUSTER, Op.ALTER)],
    ApiKey.DESCRIBE_CLUSTER: [],  # no ACL: only KIP-430's operations depend on them
    ApiKey.DESCRIBE_TOPIC_PARTITIONS: [Need(R.TOPIC, Op.DESCRIBE)],
    ApiKey.DESCRIBE_LOG_DIRS: [Need(R.CLUSTER, Op.DESCRIBE)],
    ApiKey.ELECT_LEADERS: [Need(R.CLUSTER, Op.ALTER)],
    ApiKey.DESCRIBE_PRODUCERS: [Need(R.TOPIC, Op.READ)],
    ApiKey.LIST_TRANSACTIONS: [],  # no ACL: ids the principal may not describe are left out
    ApiKey.DESCRIBE_TRANSACTIONS: [Need(R.TRANSACTIONAL_ID, Op.DESCRIBE)],
    # subscribed by name to topic `t`
    ApiKey.SHARE_GROUP_HEARTBEAT: [Need(R.GROUP, Op.READ), Need(R.TOPIC, Op.DESCRIBE)],
    ApiKey.SHARE_GROUP_DESCRIBE: [Need(R.GROUP, Op.DESCRIBE)],
    ApiKey.DESCRIBE_SHARE_GROUP_OFFSETS: [Need(R.GROUP, Op.DESCRIBE), Need(R.TOPIC, Op.DESCRIBE)],
    ApiKey.ALTER_SHARE_GROUP_OFFSETS: [Need(R.GROUP, Op.READ), Need(R.TOPIC, Op.READ)],
    ApiKey.DELETE_SHARE_GROUP_OFFSETS: [Need(R.GROUP, Op.DELETE), Need(R.TOPIC, Op.READ)],
    # in the session of member `t` of group `t`, naming topic `t` by its id
    ApiKey.SHARE_FETCH: [Need(R.GROUP, Op.READ), Need(R.TOPIC, Op.READ)],
    ApiKey.SHARE_ACKNOWLEDGE: [Need(R.GROUP, Op.READ), Need(R.TOPIC, Op.READ)],
}
CASES: Final = [(api, need) for api, needs in NEEDS.items() for need in needs]


@dataclasses.dataclass
class Setup:
    context: Context
    acls: AclCache


@pytest.fixture
async def setup() -> AsyncIterator[Setup]:
    coordinator = InMemoryBatchCoordinator()
    broker = await started_broker(coordinator, 1)
    acls = AclCache(coordinator, AuthorizerSettings(), 1000)
    await acls.refresh()
    config = ServerConfig(authorizer_class_name="kafka.security.authorizer.AclAuthorizer")
    context = context_of(broker, coordinator, config, acls)
    yield Setup(context, acls)
    await broker.close(flush=False)
    await coordinator.close()


def _request(api: ApiKey) -> Any:
    return request_of(load_request_schema(int(api), SUPPORTED_VERSIONS[api][1]))


async def _codes(setup: Setup, api: ApiKey, request: object = None) -> set[WireError]:
    if request is None:
        request = _request(api)
    if api in (ApiKey.SHARE_FETCH, ApiKey.SHARE_ACKNOWLEDGE):
        request = await _share_request(setup.context, request)
    session = Session("test", client_host=HOST, principal=PRINCIPAL)
    response = await HANDLERS[api](setup.context, session, request)  # type: ignore[arg-type]
    assert response is not None
    return error_codes(response)


async def _share_request(context: Context, request: Any) -> Any:
    """A share request (epoch -1: it closes its session) in an open session, naming topic `t`
    by its id."""
    context.shares.sessions.fetch(ShareSessionKey(0, TOPIC, TOPIC), 0, None, (), ())
    (described,) = await context.broker.describe_topics([TOPIC])
    topics = tuple(dataclasses.replace(t, topic_id=described.topic_id) for t in request.topics)
    return dataclasses.replace(request, topics=topics)


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


async def test_metadata_answers_kip_430s_operations_when_asked(setup: Setup) -> None:
    """v10 asks for both: a topic answered carries the operations the principal may do on it
    (READ implies DESCRIBE), a refused one the schema's default; the cluster's are none without
    DESCRIBE on it, and each allowed operation's bit once it has it."""
    grants = [
        AclBinding(R.TOPIC, TOPIC, PatternType.LITERAL, PRINCIPAL, "*", Op.READ, ALLOW),
        AclBinding(R.CLUSTER, CLUSTER_NAME, PatternType.LITERAL, PRINCIPAL, "*", Op.ALTER, ALLOW),
    ]
    await setup.acls.create(grants)
    metadata = load_request_schema(int(ApiKey.METADATA), 10)
    base = request_of(metadata)
    named = tuple(dataclasses.replace(base.topics[0], name=n) for n in (TOPIC, "refused"))
    asked = dataclasses.replace(
        base,
        topics=named,
        allow_auto_topic_creation=False,
        include_cluster_authorized_operations=True,
        include_topic_authorized_operations=True,
    )
    answer = await _respond(setup, ApiKey.METADATA, asked)
    allowed, refused = answer.topics
    assert allowed.topic_authorized_operations == (1 << Op.READ) | (1 << Op.DESCRIBE)
    assert refused.error_code is WireError.topic_authorization_failed
    assert refused.topic_authorized_operations == -(2**31)
    # ALTER implies DESCRIBE, so the cluster's operations are answered: ALTER and DESCRIBE.
    assert answer.cluster_authorized_operations == (1 << Op.ALTER) | (1 << Op.DESCRIBE)

    unasked = dataclasses.replace(
        asked,
        include_cluster_authorized_operations=False,
        include_topic_authorized_operations=False,
    )
    answer = await _respond(setup, ApiKey.METADATA, unasked)
    assert answer.cluster_authorized_operations == -(2**31)
    assert {t.topic_authorized_operations for t in answer.topics} == {-(2**31)}


async def test_describe_cluster_answers_no_operations_without_describe(setup: Setup) -> None:
    request = dataclasses.replace(
        request_of(load_request_schema(int(ApiKey.DESCRIBE_CLUSTER), 1)),
        include_cluster_authorized_operations=True,
        endpoint_type=1,
    )
    await setup.acls.create(
        [AclBinding(R.CLUSTER, CLUSTER_NAME, PatternType.LITERAL, PRINCIPAL, "*", Op.CREATE, ALLOW)]
    )
    assert (
        await _respond(setup, ApiKey.DESCRIBE_CLUSTER, request)
    ).cluster_authorized_operations == 0
    await setup.acls.create(
        [
            AclBinding(
                R.CLUSTER, CLUSTER_NAME, PatternType.LITERAL, PRINCIPAL, "*", Op.DESCRIBE, ALLOW
            )
        ]
    )
    answer = await _respond(setup, ApiKey.DESCRIBE_CLUSTER, request)
    assert answer.cluster_authorized_operations == (1 << Op.CREATE) | (1 << Op.DESCRIBE)
    assert [b.broker_id for b in answer.brokers] == [answer.controller_id] == [0]


async def test_a_regular_expression_matches_only_the_topics_the_member_may_describe() -> None:
    """ConsumerGroupHeartbeat at the group's owner, as Kafka's `KafkaApis`: a subscription by
    name to a topic the member may not describe is refused; a regular expression silently
    leaves such topics out."""
    coordinator = InMemoryBatchCoordinator()
    broker = DisklessBroker(0, MemoryObjectStore(), coordinator)
    await broker.start()
    view = ClusterView("test", coordinator)
    groups = GroupCoordinator(coordinator, view)
    try:
        for topic in ("t-a", "t-b"):
            await broker.create_topic(topic, 1)
        view.join(BrokerAddress(0, "127.0.0.1", 9092, None), broker.broker_epoch)
        await view.renew()
        assert await groups.locate("g") is not None
        acls = AclCache(coordinator, AuthorizerSettings(), 1000)
        await acls.refresh()
        context = Context(
            broker,
            view,
            TransactionFront(coordinator),
            groups,
            ServerConfig(authorizer_class_name="kafka.security.authorizer.AclAuthorizer"),
            Credentials(coordinator),
            acls,
        )
        grants = [(R.GROUP, "g", Op.READ), (R.TOPIC, "t-a", Op.DESCRIBE)]
        await acls.create(
            [
                AclBinding(kind, name, PatternType.LITERAL, PRINCIPAL, "*", op, ALLOW)
                for kind, name, op in grants
            ]
        )
        ids = {d.name: d.topic_id for d in await broker.describe_topics()}
        session = Session("test", client_host=HOST, principal=PRINCIPAL)
        heartbeat = HANDLERS[ApiKey.CONSUMER_GROUP_HEARTBEAT]
        by_name = consumer_group_heartbeat_v1.ConsumerGroupHeartbeatRequest(
            group_id="g",
            member_id="m1",
            member_epoch=i32(0),
            rebalance_timeout=i32Timedelta.parse(datetime.timedelta(seconds=5)),
            subscribed_topic_names=("t-a", "t-b"),
            topic_partitions=(),
        )
        refused: Any = await heartbeat(context, session, by_name)  # type: ignore[arg-type]
        assert refused.error_code is WireError.topic_authorization_failed
        by_regex = dataclasses.replace(
            by_name, subscribed_topic_names=None, subscribed_topic_regex="t-.*"
        )
        joined: Any = await heartbeat(context, session, by_regex)  # type: ignore[arg-type]
        assert (joined.error_code, joined.member_epoch) == (WireError.none, 1)
        assigned = {(t.topic_id, tuple(t.partitions)) for t in joined.assignment.topic_partitions}
        assert assigned == {(ids["t-a"], (0,))}
    finally:
        await groups.close()
        await broker.close(flush=False)
        await coordinator.close()
