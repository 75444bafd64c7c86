"""Integration: a real client identity end to end. A confluent-kafka producer with a TLS client
certificate (made by `openssl`) is authorized as its subject, `User:<DN>`: the ACLs a super user
grants that principal over PLAINTEXT let it write one topic, and no other.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import pytest
from confluent_kafka import KafkaError, Producer
from confluent_kafka.admin import (
    AclBinding,
    AclOperation,
    AclPermissionType,
    AdminClient,
    ResourcePatternType,
    ResourceType,
)

from diskless.coordinator import InMemoryBatchCoordinator
from diskless.kafka_server import KafkaCluster, ServerConfig
from diskless.kafka_server._server.settings.server_properties import server_config
from testkit.cluster import local_cluster
from testkit.tls import CLIENT_DN, Certs

PRINCIPAL = f"User:{CLIENT_DN}"


@pytest.fixture
async def cluster(certs: Certs) -> AsyncIterator[KafkaCluster]:
    config = server_config(
        {
            "listeners": "PLAINTEXT://127.0.0.1:0,SSL://127.0.0.1:0",
            "ssl.keystore.type": "PEM",
            "ssl.keystore.location": str(certs.server_keystore),
            "ssl.truststore.location": str(certs.ca),
            "ssl.client.auth": "required",
            "authorizer.class.name": "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
            "super.users": "User:ANONYMOUS",  # the PLAINTEXT administrator
        },
        ServerConfig(fetch_wait_ms_max=500),
    )
    coordinator = InMemoryBatchCoordinator()
    async with local_cluster(coordinator, brokers=1, racks=1, server_config=config) as running:
        await running.create_topic("granted", 1)
        await running.create_topic("refused", 1)
        yield running
    await coordinator.close()


def _grant(plaintext: str) -> None:
    admin = AdminClient({"bootstrap.servers": plaintext})
    bindings = [
        AclBinding(
            ResourceType.TOPIC,
            "granted",
            ResourcePatternType.LITERAL,
            PRINCIPAL,
            "*",
            operation,
            AclPermissionType.ALLOW,
        )
        for operation in (AclOperation.WRITE, AclOperation.DESCRIBE)
    ]
    for future in admin.create_acls(bindings).values():
        future.result(timeout=30)


def _deliveries(bootstrap: str, certs: Certs) -> dict[str, Any]:
    """Each topic's delivery error (None: delivered) for one record from the certified client."""
    producer = Producer(
        {
            "bootstrap.servers": bootstrap,
            "security.protocol": "SSL",
            "ssl.ca.location": str(certs.ca),
            "ssl.certificate.location": str(certs.client_cert),
            "ssl.key.location": str(certs.client_key),
            "message.timeout.ms": 10_000,
        }
    )
    outcome: dict[str, Any] = {}
    for topic in ("granted", "refused"):
        producer.produce(
            topic, b"v", on_delivery=lambda error, _, topic=topic: outcome.update({topic: error})
        )
    producer.flush(30)
    return outcome


async def test_a_certificate_subject_is_authorized_as_its_principal(
    cluster: KafkaCluster, certs: Certs
) -> None:
    await asyncio.to_thread(_grant, cluster.bootstrap(listener="PLAINTEXT"))
    outcome = await asyncio.to_thread(_deliveries, cluster.bootstrap(listener="SSL"), certs)
    assert outcome["granted"] is None
    refused = outcome["refused"]
    assert refused is not None and refused.code() == KafkaError.TOPIC_AUTHORIZATION_FAILED
