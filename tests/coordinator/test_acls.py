"""Conformance: ACL bindings are stored by the batch coordinator on every backend, shared by every
process using it, with Kafka's validation and its filter semantics (ANY, MATCH)."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from diskless import ErrorCode, ManualClock
from diskless.coordinator import (
    MATCH_ALL,
    AclBinding,
    AclBindingFilter,
    AclOperation,
    AclPermissionType,
    BatchCoordinator,
    PatternType,
    ResourceType,
)
from testkit.backends import BACKENDS, open_coordinator

T = ResourceType.TOPIC
LIT = PatternType.LITERAL
PRE = PatternType.PREFIXED
ALLOW = AclPermissionType.ALLOW
DENY = AclPermissionType.DENY
READ = AclOperation.READ

FOO_READ = AclBinding(T, "foo", LIT, "User:alice", "*", READ, ALLOW)
FO_PREFIX = AclBinding(T, "fo", PRE, "User:bob", "*", AclOperation.WRITE, ALLOW)
ANY_TOPIC = AclBinding(T, "*", LIT, "User:*", "10.0.0.1", READ, DENY)
GROUP = AclBinding(ResourceType.GROUP, "g", LIT, "User:alice", "*", READ, ALLOW)
CLUSTER = AclBinding(
    ResourceType.CLUSTER, "kafka-cluster", LIT, "User:ops", "*", AclOperation.ALTER, ALLOW
)
ALL_FOUR = [FOO_READ, FO_PREFIX, ANY_TOPIC, GROUP, CLUSTER]


def _filter(
    resource_type: ResourceType = ResourceType.ANY,
    name: str | None = None,
    pattern: PatternType = PatternType.ANY,
    principal: str | None = None,
    host: str | None = None,
    operation: AclOperation = AclOperation.ANY,
    permission: AclPermissionType = AclPermissionType.ANY,
) -> AclBindingFilter:
    return AclBindingFilter(resource_type, name, pattern, principal, host, operation, permission)


async def test_create_describe_delete(coordinator: BatchCoordinator) -> None:
    assert await coordinator.acl_version() == 0
    outcomes = await coordinator.create_acls(ALL_FOUR)
    assert [o.error for o in outcomes] == [ErrorCode.NONE] * 5
    version = await coordinator.acl_version()
    assert version > 0
    assert await coordinator.describe_acls(MATCH_ALL) == sorted(ALL_FOUR)
    snapshot = await coordinator.acl_snapshot()
    assert snapshot == (version, sorted(ALL_FOUR))
    # Creating what exists changes nothing, not even the version.
    assert [o.error for o in await coordinator.create_acls([FOO_READ])] == [ErrorCode.NONE]
    assert await coordinator.acl_version() == version
    (deleted,) = await coordinator.delete_acls([_filter(principal="User:alice")])
    assert deleted.error is ErrorCode.NONE and sorted(deleted.deleted) == sorted([FOO_READ, GROUP])
    assert await coordinator.acl_version() > version
    assert await coordinator.describe_acls(MATCH_ALL) == sorted([FO_PREFIX, ANY_TOPIC, CLUSTER])


async def test_filters_match_as_kafka_does(coordinator: BatchCoordinator) -> None:
    await coordinator.create_acls(ALL_FOUR)
    # MATCH: the bindings that apply to a topic named "foo": its literal, "*", and prefixes.
    assert await coordinator.describe_acls(_filter(T, "foo", PatternType.MATCH)) == sorted(
        [FOO_READ, FO_PREFIX, ANY_TOPIC]
    )
    assert await coordinator.describe_acls(_filter(T, "fob", PatternType.MATCH)) == sorted(
        [FO_PREFIX, ANY_TOPIC]
    )
    # ANY with a name: exactly that name, whatever the pattern type (no prefix matching).
    assert await coordinator.describe_acls(_filter(T, "fo")) == [FO_PREFIX]
    assert await coordinator.describe_acls(_filter(T, "foo", PRE)) == []
    assert await coordinator.describe_acls(_filter(pattern=LIT)) == sorted(
        [FOO_READ, ANY_TOPIC, GROUP, CLUSTER]
    )
    assert await coordinator.describe_acls(_filter(host="10.0.0.1")) == [ANY_TOPIC]
    assert await coordinator.describe_acls(_filter(permission=DENY)) == [ANY_TOPIC]
    assert await coordinator.describe_acls(_filter(operation=AclOperation.ALTER)) == [CLUSTER]
    assert await coordinator.describe_acls(_filter(ResourceType.GROUP)) == [GROUP]
    # A filter with an UNKNOWN field matches nothing and deletes nothing.
    bad = _filter(operation=AclOperation.UNKNOWN)
    assert await coordinator.describe_acls(bad) == []
    (refused,) = await coordinator.delete_acls([bad])
    assert refused.error is ErrorCode.INVALID_REQUEST and refused.deleted == []


async def test_invalid_bindings_are_refused_one_by_one(coordinator: BatchCoordinator) -> None:
    invalid = [
        FOO_READ._replace(resource_type=ResourceType.ANY),
        FOO_READ._replace(pattern_type=PatternType.MATCH),
        FOO_READ._replace(operation=AclOperation.ANY),
        FOO_READ._replace(permission=AclPermissionType.ANY),
        FOO_READ._replace(resource_name=""),
        CLUSTER._replace(resource_name="other"),
        FOO_READ._replace(principal="alice"),
    ]
    outcomes = await coordinator.create_acls([*invalid, GROUP])
    assert [o.error for o in outcomes] == [ErrorCode.INVALID_REQUEST] * 7 + [ErrorCode.NONE]
    assert all(o.message for o in outcomes[:7])
    assert await coordinator.describe_acls(MATCH_ALL) == [GROUP]


async def test_one_delete_request_deletes_each_binding_once(coordinator: BatchCoordinator) -> None:
    await coordinator.create_acls(ALL_FOUR)
    first, second = await coordinator.delete_acls([_filter(T), _filter(principal="User:bob")])
    assert sorted(first.deleted) == sorted([FOO_READ, FO_PREFIX, ANY_TOPIC])
    assert second.deleted == [FO_PREFIX]  # both filters matched it; it is deleted once
    assert await coordinator.describe_acls(MATCH_ALL) == sorted([GROUP, CLUSTER])
    version = await coordinator.acl_version()
    (none,) = await coordinator.delete_acls([_filter(T)])
    assert none.deleted == [] and await coordinator.acl_version() == version


@pytest.mark.parametrize("backend", [b for b in BACKENDS if b != "memory"])
async def test_acls_are_shared_and_survive_a_reopen(backend: str, tmp_path: Path) -> None:
    clock = ManualClock()
    one = open_coordinator(backend, tmp_path, clock)
    two = open_coordinator(backend, tmp_path, clock)
    try:
        await one.create_acls([FOO_READ, GROUP])
        assert await two.acl_snapshot() == await one.acl_snapshot()
        await two.delete_acls([_filter(ResourceType.GROUP)])
        assert await one.describe_acls(MATCH_ALL) == [FOO_READ]
        version = await one.acl_version()
    finally:
        await one.close()
        await two.close()
    again = open_coordinator(backend, tmp_path, clock)
    try:
        assert await again.acl_snapshot() == (version, [FOO_READ])
    finally:
        await again.close()


@pytest.mark.parametrize("backend", [b for b in BACKENDS if b != "memory"])
async def test_concurrent_changes_from_two_processes_serialize(
    backend: str, tmp_path: Path
) -> None:
    """Every change loads and bumps the version counter under its lock: none is lost."""
    clock = ManualClock()
    one = open_coordinator(backend, tmp_path, clock)
    two = open_coordinator(backend, tmp_path, clock)
    try:
        await one.acl_version()  # both stores open (and migrated) before the race
        await two.acl_version()
        bindings = [FOO_READ._replace(resource_name=f"t{i}") for i in range(8)]
        await asyncio.gather(
            *((one if i % 2 else two).create_acls([b]) for i, b in enumerate(bindings))
        )
        assert await one.describe_acls(MATCH_ALL) == sorted(bindings)
        assert await two.acl_version() == 8
    finally:
        await one.close()
        await two.close()
