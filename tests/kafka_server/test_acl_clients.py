"""Integration: ACLs through real clients, and across broker processes.

- confluent-kafka's AdminClient creates, describes (ANY and MATCH filters) and deletes ACLs;
  an invalid binding is refused with Kafka's error; a broker without an authorizer answers
  SECURITY_DISABLED.
- Real clients meet the authorizer as themselves (a plaintext client is `User:ANONYMOUS`): a
  DENY stops their produce with TOPIC_AUTHORIZATION_FAILED, and a topic they may not describe
  is absent from their metadata.
- Two broker processes share a SQLite batch coordinator: an ACL created through one applies on
  the other within `acl_refresh_ms` (plus one coordinator read, given a second here).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any, Final

import pytest
from confluent_kafka import KafkaError, KafkaException, Producer
from confluent_kafka.admin import (
    AclBinding,
    AclBindingFilter,
    AclOperation,
    AclPermissionType,
    AdminClient,
    ResourcePatternType,
    ResourceType,
)
from kio.schema.create_acls.v3 import request as create_acls_v3
from kio.schema.describe_acls.v3 import request as describe_acls_v3
from kio.schema.errors import ErrorCode as WireError
from kio.static.primitive import i8

from diskless.coordinator import InMemoryBatchCoordinator
from diskless.kafka_server import KafkaCluster, ServerConfig
from testkit.batches import build_batch
from testkit.cluster import local_cluster
from testkit.processes import broker_processes
from testkit.wire import ask, produce_to

AUTHORIZER: Final = "org.apache.kafka.metadata.authorizer.StandardAuthorizer"
ANONYMOUS: Final = "User:ANONYMOUS"
EVERYTHING: Final = AclBindingFilter(
    ResourceType.ANY,
    None,
    ResourcePatternType.ANY,
    None,
    None,
    AclOperation.ANY,
    AclPermissionType.ANY,
)
REFRESH_MS: Final = 500
"""The processes' `acl_refresh_ms`: short, so the test is."""


async def _cluster(config: ServerConfig) -> AsyncIterator[KafkaCluster]:
    coordinator = InMemoryBatchCoordinator()
    async with local_cluster(coordinator, brokers=1, racks=1, server_config=config) as running:
        await running.create_topic("orders", 1)
        await running.create_topic("hidden", 1)
        yield running
    await coordinator.close()


@pytest.fixture
async def admin_cluster() -> AsyncIterator[KafkaCluster]:
    """Anonymous clients are super users: they administer the ACLs."""
    config = ServerConfig(authorizer_class_name=AUTHORIZER, super_users=ANONYMOUS)
    async for running in _cluster(config):
        yield running


@pytest.fixture
async def open_cluster() -> AsyncIterator[KafkaCluster]:
    """Resources without ACLs are open to anyone (`allow.everyone.if.no.acl.found`)."""
    config = ServerConfig(authorizer_class_name=AUTHORIZER, allow_everyone_if_no_acl_found=True)
    async for running in _cluster(config):
        yield running


def _admin(bootstrap: str) -> AdminClient:
    return AdminClient({"bootstrap.servers": bootstrap, "broker.address.family": "v4"})


def _result(future: Any) -> Any:
    return future.result(timeout=30)


def _binding(
    resource_type: ResourceType,
    name: str,
    pattern: ResourcePatternType,
    principal: str,
    operation: AclOperation,
    permission: AclPermissionType = AclPermissionType.ALLOW,
) -> AclBinding:
    return AclBinding(resource_type, name, pattern, principal, "*", operation, permission)


def _key(binding: AclBinding) -> tuple[object, ...]:
    return (
        binding.restype,
        binding.name,
        binding.resource_pattern_type,
        binding.principal,
        binding.host,
        binding.operation,
        binding.permission_type,
    )


def _admin_session(bootstrap: str) -> None:
    admin = _admin(bootstrap)
    read_orders = _binding(
        ResourceType.TOPIC, "orders", ResourcePatternType.LITERAL, "User:alice", AclOperation.READ
    )
    write_prefix = _binding(
        ResourceType.TOPIC, "ord", ResourcePatternType.PREFIXED, "User:bob", AclOperation.WRITE
    )
    group = _binding(
        ResourceType.GROUP, "g", ResourcePatternType.LITERAL, "User:alice", AclOperation.READ
    )
    created = admin.create_acls([read_orders, write_prefix, group])
    assert all(_result(f) is None for f in created.values())
    described = _result(admin.describe_acls(EVERYTHING))
    assert sorted(map(_key, described)) == sorted(map(_key, [read_orders, write_prefix, group]))
    match = AclBindingFilter(
        ResourceType.TOPIC,
        "orders",
        ResourcePatternType.MATCH,
        None,
        None,
        AclOperation.ANY,
        AclPermissionType.ANY,
    )
    matched = _result(admin.describe_acls(match))
    assert sorted(map(_key, matched)) == sorted(map(_key, [read_orders, write_prefix]))
    # The CLUSTER resource has one name: anything else is INVALID_REQUEST.
    bad = _binding(
        ResourceType.BROKER, "other", ResourcePatternType.LITERAL, "User:x", AclOperation.ALTER
    )
    (refused,) = admin.create_acls([bad]).values()
    with pytest.raises(KafkaException) as caught:
        _result(refused)
    assert caught.value.args[0].code() == KafkaError.INVALID_REQUEST
    alice = AclBindingFilter(
        ResourceType.ANY,
        None,
        ResourcePatternType.ANY,
        "User:alice",
        None,
        AclOperation.ANY,
        AclPermissionType.ANY,
    )
    (deleted,) = admin.delete_acls([alice]).values()
    assert sorted(map(_key, _result(deleted))) == sorted(map(_key, [read_orders, group]))
    assert list(map(_key, _result(admin.describe_acls(EVERYTHING)))) == [_key(write_prefix)]


async def test_admin_client_manages_acls(admin_cluster: KafkaCluster) -> None:
    await asyncio.to_thread(_admin_session, admin_cluster.bootstrap())


def _refused_as_disabled(bootstrap: str) -> None:
    admin = _admin(bootstrap)
    binding = _binding(
        ResourceType.TOPIC, "orders", ResourcePatternType.LITERAL, "User:a", AclOperation.READ
    )
    (created,) = admin.create_acls([binding]).values()
    with pytest.raises(KafkaException) as caught:
        _result(created)
    assert caught.value.args[0].code() == KafkaError.SECURITY_DISABLED
    # (confluent-kafka's describe_acls drops a top-level error: asked directly.)
    any_ = i8(1)
    describe = describe_acls_v3.DescribeAclsRequest(
        resource_type_filter=any_,
        resource_name_filter=None,
        pattern_type_filter=any_,
        principal_filter=None,
        host_filter=None,
        operation=any_,
        permission_type=any_,
    )
    assert ask(bootstrap, describe, 30).error_code is WireError.security_disabled


async def test_without_an_authorizer_the_acl_apis_are_disabled() -> None:
    async for running in _cluster(ServerConfig()):
        await asyncio.to_thread(_refused_as_disabled, running.bootstrap())


def _produce_one(bootstrap: str, topic: str) -> KafkaError | None:
    """One record through a real producer; its delivery error (None: delivered)."""
    producer = Producer(
        {
            "bootstrap.servers": bootstrap,
            "broker.address.family": "v4",
            "message.timeout.ms": 10_000,
        }
    )
    outcome: list[KafkaError | None] = []
    producer.produce(topic, b"v", on_delivery=lambda error, _: outcome.append(error))
    producer.flush(30)
    return outcome[0] if outcome else KafkaError(KafkaError._MSG_TIMED_OUT)


def _enforced_on_real_clients(bootstrap: str) -> None:
    admin = _admin(bootstrap)
    assert _produce_one(bootstrap, "orders") is None
    assert "hidden" in admin.list_topics(timeout=30).topics
    deny_write = _binding(
        ResourceType.TOPIC,
        "orders",
        ResourcePatternType.LITERAL,
        "User:*",
        AclOperation.WRITE,
        AclPermissionType.DENY,
    )
    deny_describe = _binding(
        ResourceType.TOPIC,
        "hid",
        ResourcePatternType.PREFIXED,
        ANONYMOUS,
        AclOperation.ALL,
        AclPermissionType.DENY,
    )
    # Once a topic has an ACL, `allow.everyone.if.no.acl.found` no longer speaks for it: its
    # DESCRIBE must be allowed explicitly.
    describe = _binding(
        ResourceType.TOPIC, "orders", ResourcePatternType.LITERAL, "User:*", AclOperation.DESCRIBE
    )
    for future in admin.create_acls([deny_write, deny_describe, describe]).values():
        _result(future)
    error = _produce_one(bootstrap, "orders")
    assert error is not None and error.code() == KafkaError.TOPIC_AUTHORIZATION_FAILED
    topics = admin.list_topics(timeout=30).topics
    assert "hidden" not in topics and "orders" in topics


async def test_real_clients_meet_the_authorizer_as_themselves(open_cluster: KafkaCluster) -> None:
    await asyncio.to_thread(_enforced_on_real_clients, open_cluster.bootstrap())


def _produce_raw(address: str, topic: str) -> WireError:
    """One Produce straight to the broker at `address` (no metadata, no retries)."""
    return produce_to(address, topic, build_batch([b"v"]))


def test_an_acl_created_through_one_process_applies_on_another(tmp_path: Path) -> None:
    options = [
        "--data-dir", str(tmp_path / "data"),
        "--topic", "locked:1",
        "--authorizer-class-name", AUTHORIZER,
        "--allow-everyone-if-no-acl-found",
        "--server-option", f"acl_refresh_ms={REFRESH_MS}",
        "--no-lifecycle",
    ]  # fmt: skip
    with broker_processes(2, tmp_path, options) as (one, other):
        assert _produce_raw(other.address, "locked") is WireError.none
        deny = create_acls_v3.AclCreation(
            resource_type=i8(2),  # TOPIC
            resource_name="locked",
            resource_pattern_type=i8(3),  # LITERAL
            principal="User:*",
            host="*",
            operation=i8(4),  # WRITE
            permission_type=i8(2),  # DENY
        )
        created = ask(one.address, create_acls_v3.CreateAclsRequest(creations=(deny,)), 30)
        assert [r.error_code for r in created.results] == [WireError.none]
        # At once on the process it was made through...
        assert _produce_raw(one.address, "locked") is WireError.topic_authorization_failed
        # ... and on the other within the bound.
        time.sleep(REFRESH_MS / 1000 + 1.0)
        assert _produce_raw(other.address, "locked") is WireError.topic_authorization_failed


def _deny_write(topic: str) -> create_acls_v3.AclCreation:
    return create_acls_v3.AclCreation(
        resource_type=i8(2),  # TOPIC
        resource_name=topic,
        resource_pattern_type=i8(3),  # LITERAL
        principal="User:*",
        host="*",
        operation=i8(4),  # WRITE
        permission_type=i8(2),  # DENY
    )


def test_a_process_never_goes_back_on_an_acl_it_applied(tmp_path: Path) -> None:
    """Once a process refuses by an ACL, it refuses on every later request, while changes made
    through either process make both load new snapshots again and again."""
    options = [
        "--data-dir", str(tmp_path / "data"),
        "--topic", "locked:1",
        "--authorizer-class-name", AUTHORIZER,
        "--allow-everyone-if-no-acl-found",
        "--server-option", f"acl_refresh_ms={REFRESH_MS}",
        "--no-lifecycle",
    ]  # fmt: skip
    with broker_processes(2, tmp_path, options) as brokers:
        one, other = brokers
        body = create_acls_v3.CreateAclsRequest(creations=(_deny_write("locked"),))
        assert [r.error_code for r in ask(one.address, body, 30).results] == [WireError.none]
        deadline = time.monotonic() + 30
        while _produce_raw(other.address, "locked") is not WireError.topic_authorization_failed:
            assert time.monotonic() < deadline, "the other process never applied the ACL"
            time.sleep(0.05)
        for round_ in range(8):  # over several refresh intervals, each with a new version
            through = brokers[round_ % 2]
            body = create_acls_v3.CreateAclsRequest(creations=(_deny_write(f"other-{round_}"),))
            assert [r.error_code for r in ask(through.address, body, 30).results] == [
                WireError.none
            ]
            for broker in brokers:
                code = _produce_raw(broker.address, "locked")
                assert code is WireError.topic_authorization_failed, (round_, broker.broker_id)
            time.sleep(REFRESH_MS / 2000)
