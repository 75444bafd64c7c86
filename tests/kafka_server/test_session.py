"""Unit and wire: who a connection's `Session` says is asking, and on which listener.

The security protocols' properties are Kafka's; a real connection's session names the peer's
address as the socket reports it, the listener it came on, and the anonymous principal until
something authenticates it.
"""

from __future__ import annotations

import asyncio

import pytest
from kio.schema.api_versions.v3.request import ApiVersionsRequest

from diskless.kafka_server import KafkaCluster
from diskless.kafka_server._handlers.context import ANONYMOUS, Session
from diskless.kafka_server._protocol.security_protocol import SecurityProtocol
from testkit.wire import WireClient


@pytest.mark.parametrize(
    ("protocol", "tls", "sasl"),
    [
        (SecurityProtocol.PLAINTEXT, False, False),
        (SecurityProtocol.SSL, True, False),
        (SecurityProtocol.SASL_PLAINTEXT, False, True),
        (SecurityProtocol.SASL_SSL, True, True),
    ],
)
def test_security_protocols_say_whether_they_use_tls_and_sasl(
    protocol: SecurityProtocol, tls: bool, sasl: bool
) -> None:
    assert (protocol.uses_tls, protocol.uses_sasl) == (tls, sasl)
    assert SecurityProtocol(protocol.name) is protocol  # the names are the property values


def test_a_session_is_anonymous_on_the_plaintext_listener_unless_told() -> None:
    session = Session("peer")
    assert (session.principal, session.listener, session.security_protocol) == (
        "User:ANONYMOUS",
        "PLAINTEXT",
        SecurityProtocol.PLAINTEXT,
    )
    assert ANONYMOUS == "User:ANONYMOUS"


async def _sessions_when_connected(cluster: KafkaCluster, count: int) -> list[Session]:
    server = cluster.live[0]
    for _ in range(200):
        if len(server.sessions()) == count:
            return server.sessions()
        await asyncio.sleep(0.01)
    raise AssertionError(f"{len(server.sessions())} sessions, expected {count}")


async def test_a_connection_s_session_names_its_peer_and_listener(cluster: KafkaCluster) -> None:
    server = cluster.live[0]
    client = await WireClient.connect(server)
    try:
        answer = await client.request(
            ApiVersionsRequest(client_software_name="t", client_software_version="1")
        )
        assert answer.error_code == 0
        (session,) = await _sessions_when_connected(cluster, 1)
        local = client.writer.get_extra_info("sockname")
        assert session.client_host == local[0] == "127.0.0.1"
        assert session.peer == f"{local[0]}:{local[1]}"
        assert session.listener == "PLAINTEXT"
        assert session.security_protocol is SecurityProtocol.PLAINTEXT
        assert session.principal == "User:ANONYMOUS"
    finally:
        await client.close()
    assert await _sessions_when_connected(cluster, 0) == []
