"""Integration: SCRAM credentials created through one broker process authenticate on another.

The test's process runs broker 0; a child process (`_sasl_child`) runs broker 1 over the same
batch coordinator (one SQLite file, or one PostgreSQL database) and object directory. A user
created through broker 0 with confluent-kafka's AdminClient logs in on broker 1 with
SCRAM-SHA-512 and produces and consumes there; a user deleted through broker 1 no longer logs in
on broker 0 once broker 0's copy of the credentials is refreshed. (PostgreSQL's variant is slow:
the coordinator's own tests already share one database between two coordinators on every run.)
"""

from __future__ import annotations

import asyncio
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from confluent_kafka import KafkaError, KafkaException
from confluent_kafka.admin import (
    AdminClient,
    NewTopic,
    ScramMechanism,
    UserScramCredentialDeletion,
)

from diskless.coordinator import (
    BatchCoordinator,
    PostgresBatchCoordinator,
    SqliteBatchCoordinator,
)
from diskless.storage import LocalObjectStore
from testkit.clients import confluent_consume, confluent_produce
from testkit.cluster import local_cluster
from testkit.postgres import database_dsn
from testkit.sasl import ADMIN, client_settings, create_scram_user, sasl_server_config

TOPIC = "shared-secrets"
PARTITIONS = 2
START_TIMEOUT_S = 60


class Child:
    """Broker 1 in a process of its own; stopped by closing its stdin."""

    def __init__(self, spec: str, objects: Path) -> None:
        self.process = subprocess.Popen(
            [sys.executable, "-m", "tests.kafka_server._sasl_child", spec, str(objects), "1"],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        assert self.process.stdout is not None
        line = self.process.stdout.readline()
        assert line.startswith("bootstrap.servers="), f"broker 1 did not start: {line!r}"
        self.bootstrap = line.strip().partition("=")[2]

    def stop(self) -> None:
        assert self.process.stdin is not None
        self.process.stdin.close()
        try:
            self.process.wait(START_TIMEOUT_S)
        finally:
            self.process.kill()
            if self.process.stdout is not None:
                self.process.stdout.close()


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.slow)])
def spec(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    if request.param == "sqlite":
        yield f"sqlite:{tmp_path / 'coordinator.db'}"
    else:
        yield f"postgres:{database_dsn(tmp_path, 'shared')}"


def _coordinator(spec: str) -> BatchCoordinator:
    kind, _, where = spec.partition(":")
    return SqliteBatchCoordinator(where) if kind == "sqlite" else PostgresBatchCoordinator(where)


async def test_a_scram_user_created_on_one_broker_process_logs_in_on_another(
    spec: str, tmp_path: Path
) -> None:
    objects = tmp_path / "objects"
    coordinator = _coordinator(spec)
    store = LocalObjectStore(objects)
    async with local_cluster(
        coordinator,
        store=store,
        brokers=1,
        racks=1,
        broker_ids=[0],
        server_config=sasl_server_config(),
    ) as here:
        local = here.servers[0].bootstrap

        def prepare() -> None:
            create_scram_user(local, "grace", "grace-secret", (ScramMechanism.SCRAM_SHA_512,))
            admin = AdminClient({"bootstrap.servers": local, **ADMIN})
            admin.create_topics([NewTopic(TOPIC, PARTITIONS, 1)])[TOPIC].result(30)

        await asyncio.to_thread(prepare)
        child = await asyncio.to_thread(Child, spec, objects)
        try:
            grace = client_settings("SCRAM-SHA-512", "grace", "grace-secret")
            acked = await asyncio.to_thread(
                confluent_produce, child.bootstrap, TOPIC, "grace", 40, PARTITIONS, extra=grace
            )
            ends = dict.fromkeys(range(PARTITIONS), 20)
            audit = await asyncio.to_thread(
                confluent_consume, child.bootstrap, TOPIC, ends, extra=grace
            )
            audit.check({"grace": acked})

            def delete_there() -> None:
                admin = AdminClient({"bootstrap.servers": child.bootstrap, **grace})
                deletion = UserScramCredentialDeletion("grace", ScramMechanism.SCRAM_SHA_512)
                admin.alter_user_scram_credentials([deletion])["grace"].result(30)

            await asyncio.to_thread(delete_there)
            # Once this process's copy of the credentials is refreshed (within acl_refresh_ms):
            deleted = await coordinator.acl_version()
            deadline = asyncio.get_running_loop().time() + 30
            while (here.credentials.version or 0) < deleted:
                assert asyncio.get_running_loop().time() < deadline, "never refreshed"
                await asyncio.sleep(0.02)

            def login_here() -> list[KafkaError]:
                errors: list[KafkaError] = []
                probe = AdminClient(
                    {"bootstrap.servers": local, "error_cb": errors.append, **grace}
                )
                with pytest.raises(KafkaException):
                    probe.list_topics(timeout=3)
                probe.poll(1)
                return errors

            errors = await asyncio.to_thread(login_here)
            assert any(e.code() == KafkaError._AUTHENTICATION for e in errors), errors
        finally:
            await asyncio.to_thread(child.stop)
    await coordinator.close()
    await store.close()
