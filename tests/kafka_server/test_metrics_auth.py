"""Integration: failed logins on a SASL listener are counted by listener and mechanism, and a
successful one is not."""

from __future__ import annotations

from kio.schema.errors import ErrorCode as WireError

from diskless.coordinator import InMemoryBatchCoordinator
from diskless.storage import MemoryObjectStore
from testkit.metrics import observed_cluster, scrape, value
from testkit.sasl import LISTENER, authenticate, handshake, sasl_server_config
from testkit.wire import WireClient

FAILURES = "diskless_authentication_failures_total"


async def _plain_login(client: WireClient, user: str, password: str) -> WireError:
    assert (await handshake(client, "PLAIN")).error_code == WireError.none
    return (await authenticate(client, f"\0{user}\0{password}".encode())).error_code


async def test_failed_logins_are_counted_by_listener_and_mechanism() -> None:
    config = sasl_server_config(connection_failed_authentication_delay_ms=0)
    async with observed_cluster(MemoryObjectStore(), InMemoryBatchCoordinator(), config) as (
        cluster,
        observability,
    ):
        (server,) = cluster.servers.values()
        for password in ("wrong", "also-wrong"):
            client = await WireClient.connect(server)
            assert (
                await _plain_login(client, "alice", password)
                == WireError.sasl_authentication_failed
            )
            await client.close()
        client = await WireClient.connect(server)
        assert await _plain_login(client, "alice", "alice-secret") == WireError.none
        await client.close()
        text = await scrape(observability)
    assert value(text, FAILURES, listener=LISTENER, mechanism="PLAIN") == 2
