"""Integration: what the read path serves without copying (views of cached bytes behind a new base
offset or a stamped LogAppendTime header, written to the socket buffer by buffer) is what a real
consumer reads: confluent-kafka over PLAINTEXT and over TLS, from a CreateTime and a
LogAppendTime topic, batches large enough to be written by reference; and the same bytes decoded
by kafka-python's codec from a raw Fetch.
"""

from __future__ import annotations

import asyncio
import random
import time
from collections.abc import AsyncIterator

import pytest
from confluent_kafka import TIMESTAMP_CREATE_TIME, TIMESTAMP_LOG_APPEND_TIME, Consumer, Producer
from confluent_kafka import TopicPartition as CkTopicPartition

from diskless import TimestampType
from diskless.coordinator import TopicConfig
from diskless.kafka_server import KafkaCluster, ServerConfig
from diskless.kafka_server._server.settings.server_properties import server_config
from testkit.cluster import end_offsets, local_cluster
from testkit.tls import Certs
from testkit.wire import WireClient
from tests.kafka_server._helpers import batches_of, fetch_partitions

PARTITIONS = 2
RECORDS = 300
VALUE_BYTES = 1500
TIMEOUT_S = 60
CREATED = 1_760_000_000_000
TOPICS = {"create-time": TimestampType.CREATE_TIME, "append-time": TimestampType.LOG_APPEND_TIME}


@pytest.fixture
async def cluster(certs: Certs) -> AsyncIterator[KafkaCluster]:
    config = server_config(
        {
            "listeners": "PLAINTEXT://127.0.0.1:0,SSL://127.0.0.1:0",
            "ssl.keystore.type": "PEM",
            "ssl.keystore.location": str(certs.server_keystore),
            "ssl.truststore.location": str(certs.ca),
        },
        ServerConfig(fetch_wait_ms_max=500),
    )
    async with local_cluster(brokers=1, racks=1, server_config=config) as running:
        for topic, timestamp_type in TOPICS.items():
            await running.create_topic(
                topic, PARTITIONS, TopicConfig(timestamp_type=timestamp_type)
            )
        yield running


def _produce(bootstrap: str, topic: str, values: list[bytes]) -> None:
    producer = Producer(
        {"bootstrap.servers": bootstrap, "acks": "all", "enable.idempotence": True,
         "linger.ms": 50, "batch.size": 256 * 1024}
    )  # fmt: skip
    for i, value in enumerate(values):
        producer.produce(topic, value, partition=i % PARTITIONS, timestamp=CREATED + i)
    assert producer.flush(TIMEOUT_S) == 0


def _consume(settings: dict[str, str], topic: str) -> dict[int, list[tuple[int, int, int, bytes]]]:
    """(offset, timestamp type, timestamp, value) of every record, per partition."""
    consumer = Consumer({**settings, "group.id": "views", "enable.auto.commit": False})
    consumer.assign([CkTopicPartition(topic, p, 0) for p in range(PARTITIONS)])
    read: dict[int, list[tuple[int, int, int, bytes]]] = {p: [] for p in range(PARTITIONS)}
    deadline = time.monotonic() + TIMEOUT_S
    try:
        while sum(map(len, read.values())) < RECORDS:
            assert time.monotonic() < deadline, {p: len(r) for p, r in read.items()}
            for message in consumer.consume(1000, 0.5):
                assert message.error() is None, message.error()
                partition, offset = message.partition(), message.offset()
                assert partition is not None and offset is not None
                kind, timestamp = message.timestamp()
                read[partition].append((offset, kind, timestamp, message.value() or b""))
    finally:
        consumer.close()
    return read


async def test_consumers_over_plaintext_and_tls_read_exactly_what_was_produced(
    cluster: KafkaCluster, certs: Certs
) -> None:
    rng = random.Random(11)
    plaintext = {"bootstrap.servers": cluster.bootstrap(listener="PLAINTEXT")}
    tls = {
        "bootstrap.servers": cluster.bootstrap(listener="SSL"),
        "security.protocol": "SSL",
        "ssl.ca.location": str(certs.ca),
    }
    for topic, timestamp_type in TOPICS.items():
        values = [rng.randbytes(VALUE_BYTES) for _ in range(RECORDS)]
        before = int(time.time() * 1000)
        await asyncio.to_thread(_produce, plaintext["bootstrap.servers"], topic, values)
        after = int(time.time() * 1000)
        for settings in (plaintext, tls):
            read = await asyncio.to_thread(_consume, settings, topic)
            for p, records in read.items():
                assert [offset for offset, *_ in records] == list(range(len(records)))
                assert [value for *_, value in records] == values[p::PARTITIONS]
                if timestamp_type is TimestampType.LOG_APPEND_TIME:
                    assert {kind for _, kind, _, _ in records} == {TIMESTAMP_LOG_APPEND_TIME}
                    assert all(before <= ts <= after for _, _, ts, _ in records)
                else:
                    assert {kind for _, kind, _, _ in records} == {TIMESTAMP_CREATE_TIME}
                    assert [ts for _, _, ts, _ in records] == [
                        CREATED + i for i in range(p, RECORDS, PARTITIONS)
                    ]


async def test_a_raw_fetch_is_decoded_by_kafka_python_with_offsets_set_and_crcs_valid(
    cluster: KafkaCluster,
) -> None:
    rng = random.Random(12)
    topic = "append-time"
    values = [rng.randbytes(VALUE_BYTES) for _ in range(RECORDS)]
    await asyncio.to_thread(_produce, cluster.bootstrap(listener="PLAINTEXT"), topic, values)
    ends = await end_offsets(cluster, topic, PARTITIONS)
    client = await WireClient.connect(cluster.live[0])
    try:
        fetched = await fetch_partitions(client, topic, PARTITIONS)
    finally:
        await client.close()
    for p, (high_watermark, records) in fetched.items():
        assert high_watermark == ends[p] == RECORDS // PARTITIONS
        batches = batches_of(records)  # CRCs checked by kafka-python
        assert any(batch.size_in_bytes >= 16 * 1024 for batch in batches)
        expected_base = 0
        for batch in batches:
            assert batch.base_offset == expected_base
            assert batch.timestamp_type == 1
            expected_base = batch.last_offset + 1
        assert [r.value for b in batches for r in b] == values[p::PARTITIONS]
