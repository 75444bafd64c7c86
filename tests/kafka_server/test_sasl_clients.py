"""Integration: real clients authenticate over SASL_PLAINTEXT, then produce and consume.

confluent-kafka's AdminClient, logged in with PLAIN as a JAAS user, creates SCRAM users
(AlterUserScramCredentials: the client salts the password, the broker never sees it) and
describes them; librdkafka, kafka-python and aiokafka then log in with SCRAM-SHA-512,
SCRAM-SHA-256 and PLAIN, produce and read back. A wrong password is an authentication error the
client reports; so is an unknown user.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import aiokafka
import aiokafka.errors
import kafka
import pytest
from confluent_kafka import KafkaError, KafkaException, Producer
from confluent_kafka.admin import (
    AdminClient,
    NewTopic,
    ScramMechanism,
    UserScramCredentialDeletion,
)

from diskless.coordinator import InMemoryBatchCoordinator
from diskless.kafka_server import KafkaCluster
from testkit.clients import confluent_consume, confluent_produce
from testkit.cluster import local_cluster
from testkit.sasl import ADMIN, client_settings, create_scram_user, sasl_server_config

TOPIC = "secured"
PARTITIONS = 3


@pytest.fixture
async def cluster() -> AsyncIterator[KafkaCluster]:
    coordinator = InMemoryBatchCoordinator()
    async with local_cluster(
        coordinator,
        brokers=2,
        racks=2,
        server_config=sasl_server_config(connection_failed_authentication_delay_ms=10),
    ) as running:
        yield running
    await coordinator.close()


async def test_confluent_admin_creates_scram_users_that_librdkafka_logs_in_with(
    cluster: KafkaCluster,
) -> None:
    bootstrap = cluster.bootstrap()
    await asyncio.to_thread(
        create_scram_user, bootstrap, "carol", "carol-secret", (ScramMechanism.SCRAM_SHA_512,)
    )
    await asyncio.to_thread(
        create_scram_user, bootstrap, "carol", "carol-secret", (ScramMechanism.SCRAM_SHA_256,)
    )

    def describe() -> None:
        admin = AdminClient({"bootstrap.servers": bootstrap, **ADMIN})
        described = admin.describe_user_scram_credentials(["carol"])["carol"].result(30)
        infos = {(i.mechanism, i.iterations) for i in described.scram_credential_infos}
        assert infos == {(ScramMechanism.SCRAM_SHA_256, 8192), (ScramMechanism.SCRAM_SHA_512, 8192)}
        with pytest.raises(KafkaException) as unknown:
            admin.describe_user_scram_credentials(["nobody"])["nobody"].result(30)
        assert unknown.value.args[0].code() == KafkaError.RESOURCE_NOT_FOUND
        admin.create_topics([NewTopic(TOPIC, PARTITIONS, 1)])[TOPIC].result(30)

    await asyncio.to_thread(describe)
    scram = client_settings("SCRAM-SHA-512", "carol", "carol-secret")
    acked = await asyncio.to_thread(
        confluent_produce, bootstrap, TOPIC, "carol", 300, PARTITIONS, extra=scram
    )
    assert len(acked) == 300
    reader = client_settings("SCRAM-SHA-256", "carol", "carol-secret")
    ends = {p: 100 for p in range(PARTITIONS)}
    audit = await asyncio.to_thread(confluent_consume, bootstrap, TOPIC, ends, extra=reader)
    audit.check({"carol": acked})


@pytest.mark.parametrize(
    ("mechanism", "user", "password"),
    [
        ("SCRAM-SHA-512", "dave", "wrong"),
        ("SCRAM-SHA-512", "nobody", "dave-secret"),
        ("PLAIN", "alice", "wrong"),
    ],
)
async def test_librdkafka_reports_a_failed_login_as_an_authentication_error(
    cluster: KafkaCluster, mechanism: str, user: str, password: str
) -> None:
    bootstrap = cluster.bootstrap()
    await asyncio.to_thread(
        create_scram_user, bootstrap, "dave", "dave-secret", (ScramMechanism.SCRAM_SHA_512,)
    )

    def produce() -> list[KafkaError]:
        errors: list[KafkaError] = []
        producer = Producer(
            {
                "bootstrap.servers": bootstrap,
                "error_cb": errors.append,
                **client_settings(mechanism, user, password),
            }
        )
        producer.produce("anything", b"x")
        for _ in range(100):
            producer.poll(0.1)
            if errors:
                break
        producer.purge()
        producer.flush(1)
        return errors

    errors = await asyncio.to_thread(produce)
    assert errors and errors[0].code() == KafkaError._AUTHENTICATION, errors
    assert "Authentication failed" in errors[0].str()


async def test_a_deleted_credential_no_longer_logs_in(cluster: KafkaCluster) -> None:
    bootstrap = cluster.bootstrap()
    await asyncio.to_thread(
        create_scram_user, bootstrap, "erin", "erin-secret", (ScramMechanism.SCRAM_SHA_512,)
    )

    def delete_then_login() -> list[KafkaError]:
        admin = AdminClient({"bootstrap.servers": bootstrap, **ADMIN})
        deletion = UserScramCredentialDeletion("erin", ScramMechanism.SCRAM_SHA_512)
        admin.alter_user_scram_credentials([deletion])["erin"].result(30)
        errors: list[KafkaError] = []
        settings = client_settings("SCRAM-SHA-512", "erin", "erin-secret")
        probe = AdminClient({"bootstrap.servers": bootstrap, "error_cb": errors.append, **settings})
        with pytest.raises(KafkaException):
            probe.list_topics(timeout=3)
        probe.poll(1)  # serves the error callbacks
        return errors

    errors = await asyncio.to_thread(delete_then_login)
    assert any(e.code() == KafkaError._AUTHENTICATION for e in errors), errors


async def test_kafka_python_and_aiokafka_log_in_produce_and_consume(cluster: KafkaCluster) -> None:
    bootstrap = cluster.bootstrap()
    await asyncio.to_thread(
        create_scram_user,
        bootstrap,
        "frank",
        "frank-secret",
        (ScramMechanism.SCRAM_SHA_256, ScramMechanism.SCRAM_SHA_512),
    )
    await cluster.create_topic(TOPIC, PARTITIONS)

    def kafka_python(mechanism: str, user: str, password: str, tag: bytes) -> None:
        login = {
            "security_protocol": "SASL_PLAINTEXT",
            "sasl_mechanism": mechanism,
            "sasl_plain_username": user,
            "sasl_plain_password": password,
        }
        producer = kafka.KafkaProducer(bootstrap_servers=bootstrap, **login)
        for i in range(20):
            producer.send(TOPIC, tag + b"-%d" % i, partition=i % PARTITIONS)
        producer.flush(30)
        producer.close()

    await asyncio.to_thread(kafka_python, "SCRAM-SHA-256", "frank", "frank-secret", b"kp-scram")
    await asyncio.to_thread(kafka_python, "PLAIN", "alice", "alice-secret", b"kp-plain")

    login = {
        "security_protocol": "SASL_PLAINTEXT",
        "sasl_mechanism": "SCRAM-SHA-512",
        "sasl_plain_username": "frank",
        "sasl_plain_password": "frank-secret",
    }
    wrong = aiokafka.AIOKafkaProducer(
        bootstrap_servers=bootstrap, **{**login, "sasl_plain_password": "nope"}
    )
    with pytest.raises(aiokafka.errors.KafkaError):
        await wrong.start()
    await wrong.stop()
    producer = aiokafka.AIOKafkaProducer(bootstrap_servers=bootstrap, **login)
    await producer.start()
    try:
        for i in range(20):
            await producer.send_and_wait(TOPIC, b"aio-%d" % i, partition=i % PARTITIONS)
    finally:
        await producer.stop()
    consumer = aiokafka.AIOKafkaConsumer(
        TOPIC, bootstrap_servers=bootstrap, auto_offset_reset="earliest", **login
    )
    await consumer.start()
    seen: set[bytes] = set()
    try:
        async with asyncio.timeout(30):
            while len(seen) < 60:
                batch = await consumer.getmany(timeout_ms=500)
                seen.update(m.value for ms in batch.values() for m in ms if m.value is not None)
    finally:
        await consumer.stop()
    assert {v.split(b"-")[0] for v in seen} == {b"kp", b"aio"}
    assert len(seen) == 60
