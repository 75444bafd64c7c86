"""SASL's settings as Kafka's properties, and SASL over TLS (SASL_SSL) configured as an operator
writes `server.properties`: the JAAS line of a listener, its enabled mechanisms, and a SCRAM user
logging in over TLS with confluent-kafka.
"""

from __future__ import annotations

import asyncio
import subprocess
import sys
from pathlib import Path

import pytest
from confluent_kafka.admin import AdminClient, NewTopic, ScramMechanism

from diskless.coordinator import InMemoryBatchCoordinator
from diskless.kafka_server import ServerConfig
from diskless.kafka_server._server.settings.server_properties import server_config
from testkit.clients import confluent_consume, confluent_produce
from testkit.cluster import local_cluster
from testkit.ports import free_port
from testkit.sasl import ADMIN, JAAS, client_settings, create_scram_user
from testkit.tls import make_certs

SASL_SSL_PROPERTIES = {
    "listeners": "SASL_SSL://127.0.0.1:0",
    "sasl.enabled.mechanisms": "SCRAM-SHA-512",
    "listener.name.sasl_ssl.sasl.enabled.mechanisms": "PLAIN,SCRAM-SHA-512",
    "listener.name.sasl_ssl.plain.sasl.jaas.config": JAAS,
    "connection.failed.authentication.delay.ms": "250",
    "sasl.server.max.receive.size": "65536",
}


def test_the_sasl_properties_set_their_fields_per_listener() -> None:
    config = server_config({**SASL_SSL_PROPERTIES, "ssl.keystore.location": "unused"})
    assert config.sasl_mechanisms_for("SASL_SSL") == ("PLAIN", "SCRAM-SHA-512")
    assert config.sasl_mechanisms_for("OTHER") == ("SCRAM-SHA-512",)
    assert config.plain_jaas_config_for("SASL_SSL") == JAAS
    assert config.plain_jaas_config_for("OTHER") == ""
    assert config.connection_failed_authentication_delay_ms == 250
    assert config.sasl_server_max_receive_size == 65536
    assert "alice-secret" not in repr(config)  # JAAS lines hold passwords


@pytest.mark.parametrize(
    ("properties", "named"),
    [
        ({"sasl.enabled.mechanisms": "GSSAPI"}, "sasl.enabled.mechanisms"),
        (
            {
                "listeners": "SASL_PLAINTEXT://127.0.0.1:0",
                "listener.name.sasl_plaintext.sasl.enabled.mechanisms": "PLAIN,OAUTHBEARER",
            },
            "listener.name.sasl_plaintext.sasl.enabled.mechanisms",
        ),
        (
            {
                "listeners": "SASL_PLAINTEXT://127.0.0.1:0",
                "listener.name.sasl_plaintext.plain.sasl.jaas.config": 'x required user_a="pw";',
            },
            "listener.name.sasl_plaintext.plain.sasl.jaas.config",
        ),
        ({"connection.failed.authentication.delay.ms": "-1"}, "connection.failed.authentication"),
        (
            {
                "listeners": "SASL_PLAINTEXT://127.0.0.1:0",
                "sasl.enabled.mechanisms": "PLAIN,SCRAM-SHA-256",
            },
            "listener.name.sasl_plaintext.plain.sasl.jaas.config: required",
        ),
        ({"sasl.server.max.receive.size": "big"}, "sasl.server.max.receive.size"),
    ],
)
def test_an_invalid_sasl_property_fails_naming_it_and_no_secret(
    properties: dict[str, str], named: str
) -> None:
    with pytest.raises(ValueError) as refused:
        server_config(properties)
    assert named in str(refused.value), refused.value
    assert "pw" not in str(refused.value)


async def test_scram_sha_512_over_sasl_ssl(tmp_path_factory: pytest.TempPathFactory) -> None:
    certs = make_certs(tmp_path_factory.mktemp("certs"))
    config = server_config(
        {
            **SASL_SSL_PROPERTIES,
            "ssl.keystore.type": "PEM",
            "ssl.keystore.location": str(certs.server_keystore),
        },
        ServerConfig(fetch_wait_ms_max=500),
    )
    coordinator = InMemoryBatchCoordinator()
    async with local_cluster(coordinator, brokers=2, racks=1, server_config=config) as cluster:
        bootstrap = cluster.bootstrap()
        tls = {"security.protocol": "SASL_SSL", "ssl.ca.location": str(certs.ca)}
        admin = {**tls, "sasl.mechanism": "PLAIN", "sasl.username": "admin",
                 "sasl.password": "admin-secret"}  # fmt: skip
        user = {**tls, "sasl.mechanism": "SCRAM-SHA-512", "sasl.username": "heidi",
                "sasl.password": "heidi-secret"}  # fmt: skip

        def prepare() -> None:
            create_scram_user(
                bootstrap, "heidi", "heidi-secret", (ScramMechanism.SCRAM_SHA_512,), admin
            )
            client = AdminClient({"bootstrap.servers": bootstrap, **admin})
            client.create_topics([NewTopic("tls", 2, 1)])["tls"].result(30)

        await asyncio.to_thread(prepare)
        acked = await asyncio.to_thread(
            confluent_produce, bootstrap, "tls", "heidi", 40, 2, extra=user
        )
        audit = await asyncio.to_thread(
            confluent_consume, bootstrap, "tls", {0: 20, 1: 20}, extra=user
        )
        audit.check({"heidi": acked})
    await coordinator.close()


def test_a_broker_process_configured_by_server_properties_authenticates(tmp_path: Path) -> None:
    """`python -m diskless.kafka_server --config server.properties`, as an operator runs it."""
    port = free_port(3)  # its three brokers listen on port, port + 1 and port + 2
    address = f"127.0.0.1:{port}"
    properties = tmp_path / "server.properties"
    properties.write_text(
        f"listeners=SASL_PLAINTEXT://{address}\n"
        "sasl.enabled.mechanisms=PLAIN,SCRAM-SHA-512\n"
        f"listener.name.sasl_plaintext.plain.sasl.jaas.config={JAAS}\n"
    )
    log = tmp_path / "broker.log"
    with log.open("w") as stderr:
        process = subprocess.Popen(
            [sys.executable, "-m", "diskless.kafka_server", "--config", str(properties),
             "--data-dir", str(tmp_path / "data")],
            stdout=subprocess.PIPE, stderr=stderr, text=True,
        )  # fmt: skip
    try:
        assert process.stdout is not None
        while not (line := process.stdout.readline()).startswith("bootstrap.servers="):
            assert line, f"the broker did not start: {log.read_text()[-2000:]}"
        create_scram_user(address, "ivan", "ivan-secret", (ScramMechanism.SCRAM_SHA_512,))
        admin = AdminClient({"bootstrap.servers": address, **ADMIN})
        admin.create_topics([NewTopic("props", 1, 1)])["props"].result(30)
        ivan = client_settings("SCRAM-SHA-512", "ivan", "ivan-secret")
        acked = confluent_produce(address, "props", "ivan", 10, 1, extra=ivan)
        assert len(acked) == 10
    finally:
        process.kill()
        process.wait(30)
        if process.stdout is not None:
            process.stdout.close()
    assert "secret" not in log.read_text()  # neither password nor JAAS line is ever logged


def test_a_bad_jaas_line_stops_the_process_in_one_line_without_its_secret(tmp_path: Path) -> None:
    properties = tmp_path / "server.properties"
    properties.write_text(
        "listeners=SASL_PLAINTEXT://127.0.0.1:0\n"
        "sasl.enabled.mechanisms=PLAIN\n"
        'listener.name.sasl_plaintext.plain.sasl.jaas.config=PlainLoginModule user_a="pw-9";\n'
    )
    result = subprocess.run(
        [sys.executable, "-m", "diskless.kafka_server", "--config", str(properties),
         "--data-dir", str(tmp_path / "data")],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert result.returncode == 2, result.stderr
    (line,) = result.stderr.splitlines()
    assert "listener.name.sasl_plaintext.plain.sasl.jaas.config" in line, line
    assert "pw-9" not in line
