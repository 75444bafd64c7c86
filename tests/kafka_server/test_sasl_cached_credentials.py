"""Integration: each broker process keeps a copy of the SCRAM credentials, kept current as its
ACLs are (`_coordination.credentials`).

- Known users log in while the coordinator does not answer (`FaultyBatchCoordinator`, every
  read and write failing): librdkafka with SCRAM-SHA-512 gets its metadata; a user the copy does
  not hold is still closed without a verdict (nothing to check its proof against).
- Two processes over one coordinator: a credential deleted through one is refused by the other
  once its copy is refreshed (within `acl_refresh_ms`), and a user created through one logs in
  on the other at once (looked up when the copy does not hold it).
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from typing import Final

import pytest
from confluent_kafka.admin import AdminClient, ScramMechanism, UserScramCredentialDeletion
from kio.schema.errors import ErrorCode as WireError

from diskless import coordinator as diskless_coordinator
from diskless.coordinator import CallFaults, FaultyBatchCoordinator, InMemoryBatchCoordinator
from diskless.kafka_server import KafkaCluster
from diskless.storage import MemoryObjectStore
from testkit.cluster import broker_config, local_cluster
from testkit.sasl import (
    ADMIN,
    SHA_512,
    create_scram_user,
    librdkafka_login,
    sasl_server_config,
    scram_login,
)
from testkit.wire import WireClient

REFRESH_MS: Final = 300
WAIT_S: Final = 30.0


async def _until(condition: Callable[[], bool], what: str) -> None:
    loop = asyncio.get_running_loop()
    deadline = loop.time() + WAIT_S
    while not condition():
        assert loop.time() < deadline, what
        await asyncio.sleep(0.01)


async def _raw_login(cluster: KafkaCluster, user: str, password: str) -> WireError:
    """A SCRAM-SHA-512 login to the cluster's one broker itself: its verdict."""
    (server,) = cluster.servers.values()
    client = await WireClient.connect(server)
    try:
        return WireError((await scram_login(client, "SCRAM-SHA-512", user, password)).error_code)
    finally:
        await client.close()


@pytest.fixture
async def faulty() -> AsyncIterator[tuple[KafkaCluster, FaultyBatchCoordinator]]:
    coordinator = FaultyBatchCoordinator(
        InMemoryBatchCoordinator(),
        reads=CallFaults(fail_rate=1.0),
        writes=CallFaults(fail_rate=1.0),
    )
    coordinator.enabled = False
    async with local_cluster(
        coordinator, brokers=1, server_config=sasl_server_config(acl_refresh_ms=REFRESH_MS)
    ) as cluster:
        yield cluster, coordinator
    await coordinator.close()


async def test_known_users_log_in_while_the_coordinator_is_away(
    faulty: tuple[KafkaCluster, FaultyBatchCoordinator],
) -> None:
    cluster, coordinator = faulty
    bootstrap = cluster.bootstrap()
    await asyncio.to_thread(create_scram_user, bootstrap, "frank", "frank-secret", SHA_512)
    coordinator.enabled = True
    await _until(lambda: cluster.credentials.failed_refreshes > 0, "a refresh failing")
    errors = await asyncio.to_thread(librdkafka_login, bootstrap, "frank", "frank-secret")
    assert not errors, errors
    assert await _raw_login(cluster, "frank", "wrong") is WireError.sasl_authentication_failed
    # The refresher keeps retrying in the background, so the store's counts move on their own:
    # what must not happen is the login's own lookup of the user.
    looked_up: list[str] = []
    lookup = coordinator.scram_credential

    async def counted(
        user: str, mechanism: diskless_coordinator.ScramMechanism
    ) -> diskless_coordinator.ScramCredential | None:
        looked_up.append(user)
        return await lookup(user, mechanism)

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(coordinator, "scram_credential", counted)
        assert await _raw_login(cluster, "frank", "frank-secret") is WireError.none
    assert looked_up == [], "a known user's login reads nothing"
    coordinator.enabled = False


async def test_a_credential_deleted_through_one_process_is_refused_by_another() -> None:
    coordinator = InMemoryBatchCoordinator()
    store = MemoryObjectStore()
    config = sasl_server_config(acl_refresh_ms=REFRESH_MS)

    def cluster(broker_id: int) -> KafkaCluster:
        return KafkaCluster(
            store, coordinator, brokers=1, racks=1, broker_ids=[broker_id],
            broker_config=broker_config(), server_config=config,
        )  # fmt: skip

    async with cluster(0) as one, cluster(1) as other:
        # Created through one: the other logs in at once (not in its copy yet: looked up).
        await asyncio.to_thread(create_scram_user, one.bootstrap(), "gina", "gina-secret", SHA_512)
        assert await _raw_login(other, "gina", "gina-secret") is WireError.none
        await _until(lambda: other.credentials.version == one.credentials.version, "a refresh")
        assert await _raw_login(other, "gina", "gina-secret") is WireError.none

        def delete() -> None:
            admin = AdminClient({"bootstrap.servers": one.bootstrap(), **ADMIN})
            deletion = UserScramCredentialDeletion("gina", ScramMechanism.SCRAM_SHA_512)
            admin.alter_user_scram_credentials([deletion])["gina"].result(30)

        await asyncio.to_thread(delete)
        assert await _raw_login(one, "gina", "gina-secret") is WireError.sasl_authentication_failed
        deleted = one.credentials.version
        assert deleted is not None
        await _until(lambda: (other.credentials.version or 0) >= deleted, "the other refreshing")
        assert (
            await _raw_login(other, "gina", "gina-secret") is WireError.sasl_authentication_failed
        )
    await coordinator.close()
