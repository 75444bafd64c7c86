"""Kafka's listeners: parsing and checks (unit), each broker's own ports, and Metadata naming
each broker at its endpoint of the listener the client came on (real clients).
"""

from __future__ import annotations

import asyncio
import socket
from collections.abc import AsyncIterator
from pathlib import Path

import kio.schema.find_coordinator.v3.request as find_coordinator_v3
import kio.schema.metadata.v1.request as metadata_v1
import pytest
from confluent_kafka.admin import AdminClient
from kafka import KafkaConsumer, KafkaProducer
from kafka import TopicPartition as KpTopicPartition

from diskless.clock import SystemClock
from diskless.kafka_server import KafkaCluster, ServerConfig
from diskless.kafka_server._coordination.cluster_view import (
    BrokerAddress,
    Endpoint,
    from_registry,
    registry_host,
)
from diskless.kafka_server._protocol.security_protocol import SecurityProtocol
from diskless.kafka_server._server.settings.listeners import listener_plan
from diskless.storage import MemoryObjectStore
from testkit.backends import BACKENDS, open_coordinator
from testkit.cluster import broker_config, local_cluster
from testkit.wire import ask

DEFAULT_MAP = ServerConfig().listener_security_protocol_map


@pytest.mark.parametrize(
    ("listeners", "advertised", "protocols", "blamed", "why"),
    [
        ("PLAINTEXT://127.0.0.1", "", DEFAULT_MAP, "listeners", "is not NAME://HOST:PORT"),
        ("PLAINTEXT://:9092,PLAINTEXT://:9093", "", DEFAULT_MAP, "listeners", "different name"),
        ("A://:9092,B://:9092", "", "A:PLAINTEXT,B:SSL", "listeners", "different port"),
        ("PLAINTEXT://:70000", "", DEFAULT_MAP, "listeners", "outside 0..65535"),
        ("INTERNAL://:9092", "", DEFAULT_MAP, "listeners", "no security protocol defined"),
        ("PLAINTEXT://:1", "", "PLAINTEXT:TLS", "listener.security.protocol.map", "NAME:PROTOCOL"),
        ("PLAINTEXT://0.0.0.0:1", "", DEFAULT_MAP, "listeners", "nonroutable address 0.0.0.0"),
        ("PLAINTEXT://:1", "PLAINTEXT://[::]:1", DEFAULT_MAP, "advertised.listeners", "address ::"),
        ("PLAINTEXT://:1", "SSL://h:9093", DEFAULT_MAP, "advertised.listeners", "SSL is not one"),
        ("", "PLAINTEXT://h:9092", DEFAULT_MAP, "advertised.listeners", "needs listeners"),
    ],
)
def test_bad_listener_settings_are_refused_naming_the_property(
    listeners: str, advertised: str, protocols: str, blamed: str, why: str
) -> None:
    with pytest.raises(ValueError) as refused:
        listener_plan(listeners, advertised, protocols)
    assert str(refused.value).startswith(f"{blamed}: ") and why in str(refused.value)
    with pytest.raises(ValueError, match=f"^{blamed}: "):
        ServerConfig(
            listeners=listeners,
            advertised_listeners=advertised,
            listener_security_protocol_map=protocols,
        )


def test_broker_k_of_a_process_listens_and_advertises_on_each_port_plus_k() -> None:
    plan = listener_plan(
        "INTERNAL://0.0.0.0:9092,external://:9192,ANY://127.0.0.1:0",
        "INTERNAL://10.0.0.5:9092,EXTERNAL://kafka.example:19092,ANY://127.0.0.1:0",
        "INTERNAL:PLAINTEXT,EXTERNAL:SSL,ANY:SASL_SSL",
    )
    second = plan.for_broker(2)
    assert [(b.name, b.host, b.port, b.protocol) for b in second] == [
        ("INTERNAL", "0.0.0.0", 9094, SecurityProtocol.PLAINTEXT),
        ("EXTERNAL", "", 9194, SecurityProtocol.SSL),  # names are case-insensitive, as Kafka's
        ("ANY", "127.0.0.1", 0, SecurityProtocol.SASL_SSL),  # 0 stays a free port each
    ]
    assert [(b.advertised_host, b.advertised_port) for b in second] == [
        ("10.0.0.5", 9094),
        ("kafka.example", 19094),
        ("127.0.0.1", 0),
    ]
    assert plan.highest_port(3) == 19094
    # a listener bound on every interface but with no advertised address: this host's name
    (own,) = listener_plan("PLAINTEXT://:9092", "", DEFAULT_MAP).for_broker(0)
    assert own.advertised_host == socket.getfqdn() and own.host == ""


def test_without_listeners_a_broker_has_one_plaintext_listener_on_loopback() -> None:
    (only,) = listener_plan("", "", DEFAULT_MAP).for_broker(3, default_port=9000)
    assert (only.name, only.host, only.port, only.protocol) == (
        "PLAINTEXT",
        "127.0.0.1",
        9000,
        SecurityProtocol.PLAINTEXT,
    )


def test_the_registry_keeps_every_endpoint_of_a_broker_with_several_listeners() -> None:
    endpoints = (Endpoint("INTERNAL", "10.0.0.5", 9092), Endpoint("EXTERNAL", "fe80::1", 9093))
    address = BrokerAddress(4, "10.0.0.5", 9092, "r", endpoints)
    host = registry_host(address)
    assert host == "INTERNAL://10.0.0.5:9092,EXTERNAL://[fe80::1]:9093"
    assert from_registry(4, host, 9092, "r") == address
    assert from_registry(4, host, 9092, "r").on("EXTERNAL") == ("fe80::1", 9093)
    assert from_registry(4, host, 9092, "r").on("OTHER") is None
    single = BrokerAddress(1, "h", 1, None)
    assert registry_host(single) == "h" and from_registry(1, "h", 1, None) == single
    assert single.on("ANY") == ("h", 1)


# --- real clients -----------------------------------------------------------------------------
TWO_LISTENERS = ServerConfig(
    fetch_wait_ms_max=500,
    listeners="INTERNAL://127.0.0.2:0,EXTERNAL://127.0.0.1:0",
    advertised_listeners="INTERNAL://127.0.0.2:0,EXTERNAL://localhost:0",
    listener_security_protocol_map="INTERNAL:PLAINTEXT,EXTERNAL:PLAINTEXT",
    broker_rack="east",
)


@pytest.fixture
async def two_listeners() -> AsyncIterator[KafkaCluster]:
    async with local_cluster(brokers=2, racks=2, server_config=TWO_LISTENERS) as running:
        await running.create_topic("two", 2)
        yield running


def _brokers_seen(bootstrap: str) -> dict[int, tuple[str, int, str | None]]:
    """The brokers Metadata of the first broker of `bootstrap` lists."""
    response = ask(bootstrap.split(",")[0], metadata_v1.MetadataRequest(topics=()))
    return {int(b.node_id): (b.host, int(b.port), b.rack) for b in response.brokers}


async def test_metadata_names_each_broker_at_its_endpoint_of_the_client_s_listener(
    two_listeners: KafkaCluster,
) -> None:
    internal = two_listeners.bootstrap(listener="INTERNAL")
    external = two_listeners.bootstrap(listener="EXTERNAL")
    internal_ports = [int(a.rpartition(":")[2]) for a in internal.split(",")]
    external_ports = [int(a.rpartition(":")[2]) for a in external.split(",")]
    assert all(a.startswith("127.0.0.2:") for a in internal.split(","))
    assert all(a.startswith("localhost:") for a in external.split(","))
    assert len(set(internal_ports + external_ports)) == 4  # each broker its own ports
    seen_inside = await asyncio.to_thread(_brokers_seen, internal)
    assert seen_inside == {
        0: ("127.0.0.2", internal_ports[0], "east"),
        1: ("127.0.0.2", internal_ports[1], "east"),
    }
    # the EXTERNAL listener binds 127.0.0.1 and advertises localhost
    bound = f"127.0.0.1:{external_ports[0]}"
    seen_outside = await asyncio.to_thread(_brokers_seen, bound)
    assert seen_outside == {
        0: ("localhost", external_ports[0], "east"),
        1: ("localhost", external_ports[1], "east"),
    }
    # FindCoordinator too: the coordinator at its endpoint of the client's listener
    for address, host in ((internal.split(",")[0], "127.0.0.2"), (bound, "localhost")):
        found = await asyncio.to_thread(
            ask, address, find_coordinator_v3.FindCoordinatorRequest(key="g")
        )
        assert found.error_code == 0 and found.host == host
        assert f"{host}:{found.port}" in (internal if host == "127.0.0.2" else external)


def _round_trip(bootstrap: str) -> list[bytes]:
    producer = KafkaProducer(bootstrap_servers=bootstrap, acks="all")
    for future in [producer.send("two", value=b"%d" % i, partition=i % 2) for i in range(20)]:
        future.get(timeout=30)
    producer.close()
    consumer = KafkaConsumer(
        bootstrap_servers=bootstrap, auto_offset_reset="earliest", consumer_timeout_ms=3000
    )
    consumer.assign([KpTopicPartition("two", 0), KpTopicPartition("two", 1)])
    values = [m.value for m in consumer]
    consumer.close()
    return values


def _admin_brokers(bootstrap: str) -> set[str]:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    brokers = admin.list_topics(timeout=10).brokers
    return {f"{b.host}:{b.port}" for b in brokers.values()}


async def test_clients_of_either_listener_work_through_the_addresses_it_advertises(
    two_listeners: KafkaCluster,
) -> None:
    internal = two_listeners.bootstrap(listener="INTERNAL")
    external = two_listeners.bootstrap(listener="EXTERNAL")
    assert sorted(await asyncio.to_thread(_round_trip, internal), key=int) == [
        b"%d" % i for i in range(20)
    ]
    values = await asyncio.to_thread(_round_trip, external)  # through localhost, as advertised
    assert sorted(values, key=int) == sorted([b"%d" % i for i in range(20)] * 2, key=int)
    assert await asyncio.to_thread(_admin_brokers, external) == set(external.split(","))


@pytest.mark.parametrize("backend", BACKENDS)
async def test_processes_learn_each_other_s_endpoints_per_listener_through_the_registry(
    backend: str, tmp_path: Path
) -> None:
    """Two clusters over one coordinator stand for two processes: Metadata from either lists
    the other's brokers at their endpoint of the client's listener, read from the registry."""
    coordinator = open_coordinator(backend, tmp_path, SystemClock())
    store = MemoryObjectStore()
    clusters = [
        KafkaCluster(
            store,
            coordinator,
            brokers=1,
            broker_ids=[broker_id],
            broker_config=broker_config(),
            server_config=TWO_LISTENERS,
        )
        for broker_id in (0, 1)
    ]
    try:
        for cluster in clusters:
            await cluster.start()
        for cluster in (*clusters, *clusters):  # each announced before the other reads
            await cluster.view.renew()
        for listener, host in (("INTERNAL", "127.0.0.2"), ("EXTERNAL", "localhost")):
            expected = {
                c.servers[b].broker_id: (
                    host,
                    int(c.servers[b].bootstrap_on(listener).rpartition(":")[2]),
                    "east",
                )
                for c, b in zip(clusters, (0, 1), strict=True)
            }
            bound = {"INTERNAL": "127.0.0.2", "EXTERNAL": "127.0.0.1"}[listener]
            port = expected[0][1]
            assert await asyncio.to_thread(_brokers_seen, f"{bound}:{port}") == expected
    finally:
        for cluster in clusters:
            await cluster.close()
        await coordinator.close()
