"""Integration: SASL on a SASL_PLAINTEXT listener, request by request over a raw connection.

What Kafka's `SaslServerAuthenticator` does, checked on the wire: only ApiVersions and the SASL
requests before authentication (anything else closes the connection unanswered); PLAIN and SCRAM
logins; a wrong password answered with SASL_AUTHENTICATION_FAILED and a message that does not
say what was wrong, no sooner than `connection.failed.authentication.delay.ms`, then closed; an
unknown mechanism; the handshake time limit; rate-limited failure logs that hold no secret; a
client resetting its connection in the middle of a login is an ordinary departure.
"""

from __future__ import annotations

import asyncio
import logging
import socket
import struct
import time
from collections.abc import AsyncIterator
from typing import Any

import kio.schema.api_versions.v3 as api_versions_v3
import kio.schema.metadata.v9 as metadata_v9
import kio.schema.sasl_authenticate.v2 as sasl_authenticate_v2
import kio.schema.sasl_handshake.v0 as sasl_handshake_v0
import pytest
from kio.schema.errors import ErrorCode as WireError

from diskless._scram import ITERATIONS_MIN, ScramMechanism, salted_password
from diskless.coordinator import InMemoryBatchCoordinator, ScramUpsertion
from diskless.kafka_server import KafkaCluster, ServerConfig
from diskless.kafka_server._protocol.apis import ApiKey
from diskless.kafka_server._protocol.fields import build
from diskless.storage import MemoryObjectStore
from testkit.cluster import broker_config
from testkit.sasl import authenticate, handshake, sasl_server_config, scram_login
from testkit.wire import WireClient, encode_request

GENERIC = (
    "Authentication failed during authentication due to invalid credentials with SASL mechanism "
)
DELAY_MS = 300


def metadata() -> Any:
    return build(
        metadata_v9.MetadataRequest,
        topics=None,
        allow_auto_topic_creation=False,
        include_cluster_authorized_operations=False,
        include_topic_authorized_operations=False,
    )


def api_versions() -> Any:
    return build(
        api_versions_v3.ApiVersionsRequest,
        client_software_name="wire",
        client_software_version="1",
    )


async def start(config: ServerConfig) -> tuple[KafkaCluster, InMemoryBatchCoordinator]:
    coordinator = InMemoryBatchCoordinator()
    cluster = KafkaCluster(
        MemoryObjectStore(), coordinator, brokers=1, broker_config=broker_config(),
        server_config=config,
    )  # fmt: skip
    await cluster.start()
    for mechanism in ScramMechanism:
        salted = salted_password(mechanism, b"bob-secret", b"bob-salt", ITERATIONS_MIN)
        upsertion = ScramUpsertion("bob", mechanism, ITERATIONS_MIN, b"bob-salt", salted)
        assert (await coordinator.alter_scram_credentials([], [upsertion]))[0].error == 0
    return cluster, coordinator


@pytest.fixture
async def cluster() -> AsyncIterator[KafkaCluster]:
    running, coordinator = await start(
        sasl_server_config(connection_failed_authentication_delay_ms=DELAY_MS)
    )
    try:
        yield running
    finally:
        await running.close()
        await coordinator.close()


async def connect(cluster: KafkaCluster) -> WireClient:
    (server,) = cluster.servers.values()
    return await WireClient.connect(server)


async def test_only_api_versions_and_sasl_come_before_authentication(
    cluster: KafkaCluster,
) -> None:
    client = await connect(cluster)
    versions = await client.request(api_versions())
    advertised = {k.api_key: (k.min_version, k.max_version) for k in versions.api_keys}
    assert advertised[ApiKey.SASL_HANDSHAKE] == (0, 1)
    assert advertised[ApiKey.SASL_AUTHENTICATE] == (0, 2)
    await client.send_raw(_framed(metadata()))
    assert await client.read_frame() is None, "a request before authentication must close"
    await client.close()


async def test_a_malformed_frame_before_authentication_closes(
    cluster: KafkaCluster, caplog: pytest.LogCaptureFixture
) -> None:
    for garbage in (
        encode_request(api_versions(), 1)[:-2],  # cut short: a frame that does not decode
        b"\x00\x00\x00\x02\x00\x12",  # shorter than a request header
        b"\x7f\xff\xff\xff",  # far above sasl.server.max.receive.size
    ):
        client = await connect(cluster)
        size = len(garbage) - 4
        frame = garbage if garbage.startswith(b"\x7f") else size.to_bytes(4, "big") + garbage[4:]
        await client.send_raw(frame)
        assert await client.read_frame() is None
        await client.close()
    assert not [r for r in caplog.records if r.levelno >= logging.ERROR]  # refused, not crashed


async def test_scram_logins_then_requests_are_served(cluster: KafkaCluster) -> None:
    for mechanism in ("SCRAM-SHA-256", "SCRAM-SHA-512"):
        client = await connect(cluster)
        final = await scram_login(client, mechanism, "bob", "bob-secret")
        assert (final.error_code, final.error_message) == (WireError.none, None)
        assert final.session_lifetime.total_seconds() == 0  # no re-authentication required
        assert (await client.request(metadata())).brokers
        (session,) = next(iter(cluster.servers.values())).sessions()
        assert session.principal == "User:bob"
        # Once authenticated, SASL requests are out of place (Kafka: ILLEGAL_SASL_STATE).
        assert (await handshake(client, mechanism)).error_code == WireError.illegal_sasl_state
        await client.close()


async def test_plain_logs_in_the_jaas_users(cluster: KafkaCluster) -> None:
    client = await connect(cluster)
    assert (await handshake(client, "PLAIN")).error_code == WireError.none
    done = await authenticate(client, b"\0alice\0alice-secret")
    assert done.error_code == WireError.none
    assert (await client.request(metadata())).brokers
    await client.close()


@pytest.mark.parametrize(
    ("mechanism", "user", "password", "message"),
    [
        ("SCRAM-SHA-512", "bob", "bob-secreT", GENERIC + "SCRAM-SHA-512"),
        ("SCRAM-SHA-512", "nobody", "bob-secret", GENERIC + "SCRAM-SHA-512"),
        ("SCRAM-SHA-256", "bob", "", GENERIC + "SCRAM-SHA-256"),
        ("PLAIN", "alice", "bob-secret", "Authentication failed: Invalid username or password"),
        ("PLAIN", "nobody", "alice-secret", "Authentication failed: Invalid username or password"),
    ],
)
async def test_a_failed_login_is_answered_58_after_the_delay_then_closed(
    cluster: KafkaCluster, mechanism: str, user: str, password: str, message: str
) -> None:
    client = await connect(cluster)
    started = time.monotonic()
    if mechanism == "PLAIN":
        assert (await handshake(client, "PLAIN")).error_code == WireError.none
        failed = await authenticate(client, f"\0{user}\0{password}".encode())
    else:
        failed = await scram_login(client, mechanism, user, password)
    assert failed.error_code == WireError.sasl_authentication_failed
    assert failed.error_message == message  # the same whether the user or the password is wrong
    assert time.monotonic() - started >= DELAY_MS / 1000  # a lower bound: it cannot flake
    assert await client.read_frame() is None
    assert next(iter(cluster.servers.values())).sessions() == []
    await client.close()


async def test_an_unknown_mechanism_is_refused_with_the_enabled_ones(
    cluster: KafkaCluster,
) -> None:
    client = await connect(cluster)
    refused = await handshake(client, "GSSAPI")
    assert refused.error_code == WireError.unsupported_sasl_mechanism
    assert refused.mechanisms == ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512")
    assert await client.read_frame() is None
    await client.close()


async def test_a_request_between_handshake_and_authenticate_closes(cluster: KafkaCluster) -> None:
    client = await connect(cluster)
    assert (await handshake(client, "SCRAM-SHA-256")).error_code == WireError.none
    await client.send_raw(_framed(metadata()))
    assert await client.read_frame() is None
    await client.close()


async def test_handshake_v0_is_followed_by_raw_tokens(cluster: KafkaCluster) -> None:
    client = await connect(cluster)
    shake = await client.request(build(sasl_handshake_v0.SaslHandshakeRequest, mechanism="PLAIN"))
    assert shake.error_code == WireError.none
    token = b"\0alice\0alice-secret"
    await client.send_raw(len(token).to_bytes(4, "big") + token)
    assert await client.read_frame() == b""  # PLAIN's empty answer, size-prefixed
    assert (await client.request(metadata())).brokers
    await client.close()


async def test_a_failed_raw_token_login_is_closed_after_the_delay(cluster: KafkaCluster) -> None:
    """After SaslHandshake v0 there is no way to say why: the connection just closes."""
    client = await connect(cluster)
    shake = await client.request(build(sasl_handshake_v0.SaslHandshakeRequest, mechanism="PLAIN"))
    assert shake.error_code == WireError.none
    token = b"\0alice\0not-her-password"
    started = time.monotonic()
    await client.send_raw(len(token).to_bytes(4, "big") + token)
    assert await client.read_frame() is None
    assert time.monotonic() - started >= DELAY_MS / 1000
    await client.close()


async def test_a_client_that_does_not_authenticate_in_time_is_closed() -> None:
    running, coordinator = await start(sasl_server_config(sasl_handshake_ms_max=200))
    try:
        client = await connect(running)
        assert (await handshake(client, "PLAIN")).error_code == WireError.none
        assert await client.read_frame(timeout_s=10) is None  # nothing more sent: closed
        await client.close()
    finally:
        await running.close()
        await coordinator.close()


async def test_failed_logins_are_logged_once_per_interval_without_secrets(
    caplog: pytest.LogCaptureFixture,
) -> None:
    running, coordinator = await start(
        sasl_server_config(connection_failed_authentication_delay_ms=0)
    )
    caplog.set_level(logging.WARNING)
    try:
        for _ in range(5):
            client = await connect(running)
            assert (await handshake(client, "PLAIN")).error_code == WireError.none
            failed = await authenticate(client, b"\0alice\0guess-secret-123")
            assert failed.error_code == WireError.sasl_authentication_failed
            await client.close()
    finally:
        await running.close()  # ends the interval: the count of the others is logged
        await coordinator.close()
    lines = [r.getMessage() for r in caplog.records if "authentication" in r.getMessage()]
    assert len(lines) == 2, lines
    assert "failed authentication of 127.0.0.1:" in lines[0]
    assert lines[1].startswith("4 more failed authentications")
    assert not any(
        "guess-secret" in r.getMessage() or "alice-secret" in r.getMessage() for r in caplog.records
    )


async def test_sasl_requests_on_a_plaintext_listener_are_illegal() -> None:
    running, coordinator = await start(ServerConfig())
    try:
        client = await connect(running)
        assert (await handshake(client, "PLAIN")).error_code == WireError.illegal_sasl_state
        refused = await authenticate(client, b"\0alice\0alice-secret")
        assert refused.error_code == WireError.illegal_sasl_state
        assert (await client.request(metadata())).brokers
        await client.close()
    finally:
        await running.close()
        await coordinator.close()


def _framed(body: Any) -> bytes:
    return encode_request(body, 99)


def _reset(client: WireClient) -> None:
    """Close with SO_LINGER 0: the kernel sends a TCP RST instead of a FIN."""
    sock = client.writer.get_extra_info("socket")
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    client.writer.transport.abort()


async def _wrong_password_then_reset(cluster: KafkaCluster, when: str) -> None:
    client = await connect(cluster)
    if when == "in the server-first exchange":
        assert (await handshake(client, "SCRAM-SHA-256")).error_code == WireError.none
        await client.send_raw(_framed(sasl_authenticate_v2_request(b"n,,n=bob,r=abc")))
    else:
        assert (await handshake(client, "PLAIN")).error_code == WireError.none
        await client.send_raw(_framed(sasl_authenticate_v2_request(b"\0alice\0wrong")))
        if when == "after the failure's answer":
            assert await client.read_frame() is not None
    _reset(client)


@pytest.mark.parametrize(
    "when",
    ["during the failure's delay", "after the failure's answer", "in the server-first exchange"],
)
async def test_a_client_resetting_its_connection_during_a_login_is_not_an_error(
    when: str, caplog: pytest.LogCaptureFixture
) -> None:
    """A client that sends a wrong password (or stops half-way through SCRAM) and resets its
    connection (RST, SO_LINGER 0) is a client leaving: at most a DEBUG line, no traceback, and
    nothing reaches the event loop's handler ("Unhandled exception in client_connected_cb")."""
    caplog.set_level(logging.DEBUG)
    loop = asyncio.get_running_loop()
    reports: list[dict[str, Any]] = []
    loop.set_exception_handler(lambda _, context: reports.append(context))
    running, coordinator = await start(
        sasl_server_config(connection_failed_authentication_delay_ms=DELAY_MS)
    )
    try:
        for _ in range(3):
            await _wrong_password_then_reset(running, when)
        (server,) = running.servers.values()
        while server.sessions():  # every connection ended on the server's side
            await asyncio.sleep(0.05)
        await asyncio.sleep(DELAY_MS / 1000 * 2)  # past the delay, the answer written
    finally:
        await running.close()
        await coordinator.close()
        loop.set_exception_handler(None)
    assert reports == []
    assert [r.getMessage() for r in caplog.records if r.levelno >= logging.ERROR] == []
    assert [r.getMessage() for r in caplog.records if r.exc_info] == []


class FailingLookups(InMemoryBatchCoordinator):
    """A coordinator whose credential lookups fail in a way nothing expects (a bug)."""

    async def scram_credential(self, user: str, mechanism: ScramMechanism) -> Any:
        raise RuntimeError("an unexpected failure")


async def test_an_unexpected_failure_during_a_login_closes_with_one_line(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """Not reported by asyncio as an unhandled callback error: one ERROR line naming the peer
    and the failure (its traceback only at DEBUG), and the connection closes."""
    caplog.set_level(logging.INFO)
    loop = asyncio.get_running_loop()
    reports: list[dict[str, Any]] = []
    loop.set_exception_handler(lambda _, context: reports.append(context))
    coordinator = FailingLookups()
    running = KafkaCluster(
        MemoryObjectStore(), coordinator, brokers=1, broker_config=broker_config(),
        server_config=sasl_server_config(),
    )  # fmt: skip
    await running.start()
    try:
        client = await connect(running)
        assert (await handshake(client, "SCRAM-SHA-256")).error_code == WireError.none
        await client.send_raw(_framed(sasl_authenticate_v2_request(b"n,,n=bob,r=abc")))
        assert await client.read_frame() is None
        await client.close()
    finally:
        await running.close()
        await coordinator.close()
        loop.set_exception_handler(None)
    assert reports == []
    errors = [r for r in caplog.records if r.levelno >= logging.ERROR]
    assert [r.getMessage() for r in errors if r.exc_info is None] == [
        r.getMessage() for r in errors
    ]
    (line,) = [r.getMessage() for r in errors]
    assert line.startswith("closing 127.0.0.1:") and "an unexpected failure" in line, line


def sasl_authenticate_v2_request(token: bytes) -> Any:
    return build(sasl_authenticate_v2.SaslAuthenticateRequest, auth_bytes=token)
