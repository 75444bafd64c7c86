"""A topic's `compression.type` honoured as Kafka honours it, through real clients (librdkafka's
own tests 0081 and 0129 found it refused).

confluent-kafka's AdminClient creates a topic with `compression.type=gzip` (at
`compression.gzip.level=9`) and one with `uncompressed`; DescribeConfigs reports them as set on
the topic, and a codec or level Kafka does not know is refused with INVALID_CONFIG. Idempotent
confluent-kafka producers send lz4 and uncompressed batches to both, with keys, headers and
timestamps; a confluent-kafka consumer reads every record back as it was sent, in order, and
every stored batch, fetched over the wire and decoded by kafka-python, is in the topic's codec.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

from confluent_kafka import Consumer, KafkaError, Producer
from confluent_kafka import TopicPartition as CkTopicPartition
from confluent_kafka.admin import AdminClient, ConfigResource, ConfigSource, NewTopic

from diskless import CompressionType
from diskless.kafka_server import KafkaCluster
from testkit.wire import WireClient
from tests.kafka_server._helpers import TIMEOUT_S, batches_of, error_code_of, fetch_partitions

TOPICS = {
    "gz": ({"compression.type": "gzip", "compression.gzip.level": "9"}, CompressionType.GZIP),
    "raw": ({"compression.type": "uncompressed"}, CompressionType.UNCOMPRESSED),
}
PARTITIONS = 2
PRODUCER_CODECS = ("lz4", "none")
RECORDS = 300
REFUSED = {
    "brotli": {"compression.type": "brotli"},
    "none": {"compression.type": "none"},  # a producer's name for it, not a topic's
    "deep": {"compression.type": "zstd", "compression.zstd.level": "23"},
    "shallow": {"compression.type": "gzip", "compression.gzip.level": "0"},
    "lz4": {"compression.lz4.level": "18"},
}

Sent = tuple[int, bytes, bytes, list[tuple[str, bytes]], int]
"""(partition, key, value, headers, timestamp) of one record."""


def _admin_session(bootstrap: str) -> dict[str, Any]:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    created = admin.create_topics(
        [NewTopic(name, PARTITIONS, config=config) for name, (config, _) in TOPICS.items()]
        + [NewTopic(f"refused-{name}", 1, config=config) for name, config in REFUSED.items()]
    )
    errors = {name: error_code_of(future) for name, future in created.items()}
    described = {}
    for resource, future in admin.describe_configs(
        [ConfigResource("topic", name) for name in TOPICS]
    ).items():
        entries = future.result(TIMEOUT_S)
        described[resource.name] = {
            name: (entry.value, entry.source, entry.is_read_only)
            for name, entry in entries.items()
            if name.startswith("compression.")
        }
    return {"errors": errors, "described": described}


def _records(topic: str, codec: str) -> list[Sent]:
    now = int(time.time() * 1000)
    return [
        (
            i % PARTITIONS,
            f"{topic}/{codec}/key-{i}".encode(),
            f"{codec} value {i} ".encode() * (1 + i % 9),
            [("codec", codec.encode()), ("i", b"%d" % i)],
            now - 1000 + i,
        )
        for i in range(RECORDS)
    ]


def _produce(bootstrap: str, topic: str, codec: str) -> list[Sent]:
    producer = Producer(
        {
            "bootstrap.servers": bootstrap,
            "enable.idempotence": True,
            "acks": "all",
            "compression.type": codec,
            "linger.ms": 20,
        }
    )
    failures: list[KafkaError] = []
    sent = _records(topic, codec)
    for partition, key, value, headers, timestamp in sent:
        producer.produce(
            topic,
            value=value,
            key=key,
            headers=headers,
            partition=partition,
            timestamp=timestamp,
            on_delivery=lambda error, _: failures.append(error) if error else None,
        )
    assert producer.flush(60) == 0
    assert not failures, failures[:3]
    return sent


def _consume(bootstrap: str, topic: str, count: int) -> list[Sent]:
    consumer = Consumer(
        {"bootstrap.servers": bootstrap, "group.id": "compression", "enable.auto.commit": False}
    )
    read: list[Sent] = []
    try:
        consumer.assign([CkTopicPartition(topic, p, 0) for p in range(PARTITIONS)])
        deadline = time.monotonic() + 60
        while len(read) < count:
            assert time.monotonic() < deadline, f"read {len(read)} of {count}"
            for message in consumer.consume(500, 0.5):
                assert message.error() is None, message.error()
                partition, key, value = message.partition(), message.key(), message.value()
                assert partition is not None and key is not None and value is not None
                headers = [(k, v or b"") for k, v in message.headers() or []]
                read.append((partition, key, value, headers, message.timestamp()[1]))
    finally:
        consumer.close()
    return read


async def test_a_topics_compression_type_is_applied_to_real_clients_batches(
    cluster: KafkaCluster,
) -> None:
    bootstrap = cluster.bootstrap()
    admin = await asyncio.to_thread(_admin_session, bootstrap)
    assert admin["errors"] == {
        **dict.fromkeys(TOPICS, 0),
        **{f"refused-{name}": KafkaError.INVALID_CONFIG for name in REFUSED},
    }
    dynamic = ConfigSource.DYNAMIC_TOPIC_CONFIG.value
    default = ConfigSource.DEFAULT_CONFIG.value
    assert admin["described"]["gz"] == {
        "compression.type": ("gzip", dynamic, False),
        "compression.gzip.level": ("9", dynamic, False),
        "compression.lz4.level": ("9", default, False),
        "compression.zstd.level": ("3", default, False),
    }
    assert admin["described"]["raw"]["compression.type"] == ("uncompressed", dynamic, False)
    assert {d.name for d in await cluster.coordinator.describe_topics()} == set(TOPICS)

    for topic, (_, kind) in TOPICS.items():
        sent: list[Sent] = []
        for codec in PRODUCER_CODECS:
            sent += await asyncio.to_thread(_produce, bootstrap, topic, codec)
        read = await asyncio.to_thread(_consume, bootstrap, topic, len(sent))
        for partition in range(PARTITIONS):
            # Each producer's records in the order it sent them, the producers one after another.
            assert [r for r in read if r[0] == partition] == [s for s in sent if s[0] == partition]
        client = await WireClient.connect(cluster.servers[0])
        try:
            fetched = await fetch_partitions(client, topic, PARTITIONS)
        finally:
            await client.close()
        stored = [batch for _, records in fetched.values() for batch in batches_of(records)]
        assert sum(len(list(batch)) for batch in stored) == len(sent)
        assert {batch.compression_type for batch in stored} == {int(kind)}, topic
        assert all(batch.producer_id >= 0 and batch.base_sequence >= 0 for batch in stored)
