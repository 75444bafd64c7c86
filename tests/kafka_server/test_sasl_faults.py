"""Integration: when the batch coordinator fails, SASL and the SCRAM administration say so the
way a client retries.

A SCRAM login whose credential cannot be looked up ends with the connection closed and no
verdict (SASL_AUTHENTICATION_FAILED would be final for the client; a closed connection is
retried); DescribeUserScramCredentials and AlterUserScramCredentials answer the admin family's
retriable code. Faults are injected at the store boundary (`FaultyBatchCoordinator`).
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator

import kio.schema.alter_user_scram_credentials.v0.request as alter_v0
import kio.schema.describe_user_scram_credentials.v0.request as describe_v0
import kio.schema.sasl_authenticate.v2 as sasl_authenticate_v2
import pytest
from kio.schema.errors import ErrorCode as WireError

from diskless.coordinator import CallFaults, FaultyBatchCoordinator, InMemoryBatchCoordinator
from diskless.kafka_server import KafkaCluster
from diskless.kafka_server._protocol.fields import build
from testkit.cluster import local_cluster
from testkit.sasl import authenticate, handshake, sasl_server_config, scram_login
from testkit.wire import WireClient, encode_request


@pytest.fixture
async def faulty() -> AsyncIterator[tuple[KafkaCluster, FaultyBatchCoordinator]]:
    coordinator = FaultyBatchCoordinator(
        InMemoryBatchCoordinator(),
        reads=CallFaults(fail_rate=1.0),
        writes=CallFaults(fail_rate=1.0),
    )
    coordinator.enabled = False
    async with local_cluster(coordinator, brokers=1, server_config=sasl_server_config()) as cluster:
        yield cluster, coordinator
    await coordinator.close()


async def test_a_login_the_coordinator_cannot_check_is_closed_without_a_verdict(
    faulty: tuple[KafkaCluster, FaultyBatchCoordinator], caplog: pytest.LogCaptureFixture
) -> None:
    cluster, coordinator = faulty
    caplog.set_level(logging.DEBUG, logger="diskless.kafka_server._server.network._authenticator")
    (server,) = cluster.servers.values()
    client = await WireClient.connect(server)
    assert (await handshake(client, "SCRAM-SHA-512")).error_code == WireError.none
    coordinator.enabled = True
    try:
        await client.send_raw(_authenticate_frame(b"n,,n=bob,r=abcdefgh"))
        assert await client.read_frame() is None  # closed, no SASL_AUTHENTICATION_FAILED
    finally:
        coordinator.enabled = False
    await client.close()
    assert any("no credential lookup" in r.getMessage() for r in caplog.records)
    # Once the coordinator answers again, logins are checked again (bob has no credential).
    client = await WireClient.connect(server)
    failed = await scram_login(client, "SCRAM-SHA-512", "bob", "pw")
    assert failed.error_code == WireError.sasl_authentication_failed
    await client.close()


async def test_the_scram_administration_answers_retriably_when_the_coordinator_fails(
    faulty: tuple[KafkaCluster, FaultyBatchCoordinator],
) -> None:
    cluster, coordinator = faulty
    (server,) = cluster.servers.values()
    client = await WireClient.connect(server)
    assert (await handshake(client, "PLAIN")).error_code == WireError.none
    assert (await authenticate(client, b"\0admin\0admin-secret")).error_code == WireError.none
    coordinator.enabled = True
    try:
        described = await client.request(
            build(describe_v0.DescribeUserScramCredentialsRequest, users=None)
        )
        assert described.error_code == WireError.request_timed_out
        upsertion = alter_v0.ScramCredentialUpsertion(
            name="bob", mechanism=2, iterations=4096, salt=b"s", salted_password=b"p" * 64
        )
        altered = await client.request(
            build(alter_v0.AlterUserScramCredentialsRequest, deletions=(), upsertions=(upsertion,))
        )
        assert [(r.user, r.error_code) for r in altered.results] == [
            ("bob", WireError.request_timed_out)
        ]
    finally:
        coordinator.enabled = False
    altered = await client.request(
        build(alter_v0.AlterUserScramCredentialsRequest, deletions=(), upsertions=(upsertion,))
    )
    assert [(r.user, r.error_code) for r in altered.results] == [("bob", WireError.none)]
    await client.close()


def _authenticate_frame(token: bytes) -> bytes:
    request = build(sasl_authenticate_v2.SaslAuthenticateRequest, auth_bytes=token)
    return encode_request(request, 7)
