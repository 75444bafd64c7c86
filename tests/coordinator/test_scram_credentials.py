"""Conformance: SCRAM credentials (KIP-554) in the batch coordinator, on every backend.

AlterUserScramCredentials and DescribeUserScramCredentials with Kafka's codes and messages; the
stored credential is the one RFC 5802 derives from the salted password (so a client's proof
checks against it), and a credential written by one coordinator is read by another one over the
same store, as broker processes sharing a cluster do. Every change grows the security version
(`acl_version`) that brokers poll, and the snapshot they copy holds every credential.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from diskless._scram import (
    ITERATIONS_MAX,
    ITERATIONS_MIN,
    ScramMechanism,
    credential_of_password,
    salted_password,
)
from diskless._types import ErrorCode
from diskless.clock import ManualClock
from diskless.coordinator import (
    BatchCoordinator,
    ScramDeletion,
    ScramDescription,
    ScramResult,
    ScramUpsertion,
)
from testkit.backends import BACKENDS, open_coordinator

SHA256 = ScramMechanism.SCRAM_SHA_256
SHA512 = ScramMechanism.SCRAM_SHA_512
OK = ErrorCode.NONE


def upsertion(
    user: str, password: str, mechanism: int = SHA512, iterations: int = ITERATIONS_MIN
) -> ScramUpsertion:
    salt = f"salt-of-{user}".encode()
    known = ScramMechanism.of_type(mechanism) or SHA256
    salted = salted_password(known, password.encode(), salt, iterations)
    return ScramUpsertion(user, mechanism, iterations, salt, salted)


async def test_an_upserted_credential_is_derived_from_the_salted_password(
    coordinator: BatchCoordinator,
) -> None:
    assert await coordinator.alter_scram_credentials([], [upsertion("alice", "secret")]) == [
        ScramResult("alice", OK)
    ]
    stored = await coordinator.scram_credential("alice", SHA512)
    assert stored == credential_of_password(SHA512, "secret", b"salt-of-alice", ITERATIONS_MIN)
    assert stored != credential_of_password(SHA512, "other", b"salt-of-alice", ITERATIONS_MIN)
    assert await coordinator.scram_credential("alice", SHA256) is None
    assert await coordinator.scram_credential("bob", SHA512) is None


async def test_a_change_grows_the_version_and_the_snapshot_holds_every_credential(
    coordinator: BatchCoordinator,
) -> None:
    empty = await coordinator.scram_snapshot()
    assert empty.credentials == {} and empty.version == await coordinator.acl_version()
    await coordinator.alter_scram_credentials(
        [], [upsertion("alice", "a"), upsertion("bob", "b", mechanism=SHA256)]
    )
    created = await coordinator.scram_snapshot()
    assert created.version > empty.version
    assert dict(created.credentials) == {
        ("alice", SHA512): await coordinator.scram_credential("alice", SHA512),
        ("bob", SHA256): await coordinator.scram_credential("bob", SHA256),
    }
    refused = await coordinator.alter_scram_credentials([ScramDeletion("nobody", SHA512)], [])
    assert refused[0].error is not OK
    assert await coordinator.acl_version() == created.version, "nothing changed"
    await coordinator.alter_scram_credentials([ScramDeletion("alice", SHA512)], [])
    deleted = await coordinator.scram_snapshot()
    assert deleted.version > created.version
    assert list(deleted.credentials) == [("bob", SHA256)]


async def test_describe_lists_mechanisms_and_iterations_per_user(
    coordinator: BatchCoordinator,
) -> None:
    await coordinator.alter_scram_credentials([], [upsertion("alice", "a", SHA256, 8192)])
    await coordinator.alter_scram_credentials([], [upsertion("alice", "a", SHA512)])
    await coordinator.alter_scram_credentials([], [upsertion("bob", "b")])
    everyone = [
        ScramDescription("alice", OK, None, [(1, 8192), (2, ITERATIONS_MIN)]),
        ScramDescription("bob", OK, None, [(2, ITERATIONS_MIN)]),
    ]
    assert await coordinator.describe_scram_credentials(None) == everyone
    assert await coordinator.describe_scram_credentials([]) == everyone
    assert await coordinator.describe_scram_credentials(["bob", "carol", "bob", "alice"]) == [
        ScramDescription(
            "bob",
            ErrorCode.DUPLICATE_RESOURCE,
            "Cannot describe SCRAM credentials for the same user twice in a single request: bob",
            [],
        ),
        ScramDescription(
            "carol",
            ErrorCode.RESOURCE_NOT_FOUND,
            "Attempt to describe a user credential that does not exist: carol",
            [],
        ),
        everyone[0],
    ]


async def test_an_upsertion_replaces_and_a_deletion_removes_one_mechanism(
    coordinator: BatchCoordinator,
) -> None:
    await coordinator.alter_scram_credentials([], [upsertion("alice", "old", SHA256)])
    await coordinator.alter_scram_credentials([], [upsertion("alice", "old", SHA512)])
    await coordinator.alter_scram_credentials([], [upsertion("alice", "new", SHA512, 10_000)])
    assert await coordinator.scram_credential("alice", SHA512) == credential_of_password(
        SHA512, "new", b"salt-of-alice", 10_000
    )
    deleted = await coordinator.alter_scram_credentials([ScramDeletion("alice", SHA256)], [])
    assert deleted == [ScramResult("alice", OK)]
    assert await coordinator.scram_credential("alice", SHA256) is None
    assert await coordinator.describe_scram_credentials(["alice"]) == [
        ScramDescription("alice", OK, None, [(2, 10_000)])
    ]
    again = await coordinator.alter_scram_credentials([ScramDeletion("alice", SHA256)], [])
    assert again == [
        ScramResult(
            "alice",
            ErrorCode.RESOURCE_NOT_FOUND,
            "Attempt to delete a user credential that does not exist",
        )
    ]


async def test_refused_alterations_get_kafkas_codes_and_leave_the_others_applied(
    coordinator: BatchCoordinator,
) -> None:
    await coordinator.alter_scram_credentials([], [upsertion("dup", "x")])
    results = await coordinator.alter_scram_credentials(
        [ScramDeletion("dup", SHA512), ScramDeletion("nobody", SHA512), ScramDeletion("z", 0)],
        [
            upsertion("ok", "fine"),
            upsertion("dup", "y"),
            upsertion("few", "p", iterations=ITERATIONS_MIN - 1),
            upsertion("many", "p", iterations=ITERATIONS_MAX + 1),
            upsertion("", "p"),
            upsertion("odd", "p", mechanism=3),
        ],
    )
    assert results == [
        ScramResult("ok", OK),
        ScramResult(
            "nobody",
            ErrorCode.RESOURCE_NOT_FOUND,
            "Attempt to delete a user credential that does not exist",
        ),
        ScramResult("z", ErrorCode.UNSUPPORTED_SASL_MECHANISM, "Unknown SCRAM mechanism"),
        ScramResult(
            "dup",
            ErrorCode.DUPLICATE_RESOURCE,
            "A user credential cannot be altered twice in the same request",
        ),
        ScramResult("few", ErrorCode.UNACCEPTABLE_CREDENTIAL, "Too few iterations"),
        ScramResult("many", ErrorCode.UNACCEPTABLE_CREDENTIAL, "Too many iterations"),
        ScramResult("", ErrorCode.UNACCEPTABLE_CREDENTIAL, "Username must not be empty"),
        ScramResult("odd", ErrorCode.UNSUPPORTED_SASL_MECHANISM, "Unknown SCRAM mechanism"),
    ]
    described = await coordinator.describe_scram_credentials(None)
    # The duplicated user was neither deleted nor replaced; only "ok" was added.
    assert [d.user for d in described] == ["dup", "ok"]
    assert await coordinator.scram_credential("dup", SHA512) == credential_of_password(
        SHA512, "x", b"salt-of-dup", ITERATIONS_MIN
    )


async def test_the_boundary_iterations_are_accepted(coordinator: BatchCoordinator) -> None:
    results = await coordinator.alter_scram_credentials(
        [],
        [
            upsertion("low", "p", iterations=ITERATIONS_MIN),
            upsertion("high", "p", SHA256, ITERATIONS_MAX),
        ],
    )
    assert results == [ScramResult("low", OK), ScramResult("high", OK)]


@pytest.mark.parametrize("backend", [b for b in BACKENDS if b != "memory"])
async def test_credentials_written_by_one_coordinator_are_read_by_another(
    backend: str, tmp_path: Path
) -> None:
    clock = ManualClock()
    one = open_coordinator(backend, tmp_path, clock, name="shared")
    two = open_coordinator(backend, tmp_path, clock, name="shared")
    try:
        await one.alter_scram_credentials([], [upsertion("alice", "secret")])
        assert await two.scram_credential("alice", SHA512) == credential_of_password(
            SHA512, "secret", b"salt-of-alice", ITERATIONS_MIN
        )
        await two.alter_scram_credentials([ScramDeletion("alice", SHA512)], [])
        assert await one.scram_credential("alice", SHA512) is None
    finally:
        await one.close()
        await two.close()
