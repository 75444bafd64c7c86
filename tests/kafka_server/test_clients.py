"""Unmodified Kafka clients against a 3-broker, 3-rack local cluster: produce, then read back.

Integration tests. librdkafka (confluent-kafka), kafka-python and aiokafka each produce
idempotently and consume; the auditor checks every acknowledged record is read exactly once and in
per-partition producer order.
"""

from __future__ import annotations

import asyncio

import pytest
from kafka import KafkaConsumer, KafkaProducer
from kafka import TopicPartition as KpTopicPartition

from diskless.kafka_server import ApiKey, KafkaCluster
from testkit.clients import (
    Audit,
    confluent_consume,
    confluent_produce,
    split_evenly,
    value,
)
from testkit.cluster import end_offsets, local_cluster, server_config

PARTITIONS = 12


async def confluent_round_trip(cluster: KafkaCluster, topic: str, total: int) -> None:
    """One idempotent producer per rack (client.rack set), bootstrapped from its rack."""
    await cluster.create_topic(topic, PARTITIONS)
    racks = cluster.racks
    counts = split_evenly(total, len(racks))
    names = [f"producer-{rack}" for rack in racks]
    acknowledged = await asyncio.gather(
        *(
            asyncio.to_thread(
                confluent_produce,
                cluster.bootstrap(rack),
                topic,
                name,
                count,
                PARTITIONS,
                rack=rack,
            )
            for rack, name, count in zip(racks, names, counts, strict=True)
        )
    )
    assert [len(a) for a in acknowledged] == list(counts)
    ends = await end_offsets(cluster, topic, PARTITIONS)
    assert sum(ends.values()) == total
    audit = await asyncio.to_thread(
        confluent_consume, cluster.bootstrap(racks[0]), topic, ends, rack=racks[0]
    )
    assert audit.count == total
    audit.check(dict(zip(names, acknowledged, strict=True)))
    # Routing: each producer's requests went to the brokers of its own rack.
    for server in cluster.servers.values():
        for client_id, requests in server.received(ApiKey.PRODUCE).items():
            if client_id in names:
                assert client_id == f"producer-{server.rack}", (client_id, server.rack, requests)
    assert all(server.received(ApiKey.PRODUCE) for server in cluster.servers.values())


async def test_six_brokers_each_producer_writes_only_to_its_rack_representatives() -> None:
    """Two brokers per rack: each rack's producer spreads over both, and never leaves its rack."""
    async with local_cluster(brokers=6, racks=3, server_config=server_config()) as six:
        await confluent_round_trip(six, "six", 30_000)
        for rack in six.racks:
            servers = [s for s in six.servers.values() if s.rack == rack]
            assert len(servers) == 2
            assert all(s.received(ApiKey.PRODUCE)[f"producer-{rack}"] > 0 for s in servers)


async def test_confluent_idempotent_producers_in_three_racks_100k_records(
    cluster: KafkaCluster,
) -> None:
    await confluent_round_trip(cluster, "events", 100_000)


@pytest.mark.slow
async def test_confluent_idempotent_producers_in_three_racks_1m_records(
    cluster: KafkaCluster,
) -> None:
    await confluent_round_trip(cluster, "events-1m", 1_000_000)


def _kafka_python_round_trip(bootstrap: str, topic: str, count: int) -> Audit:
    producer = KafkaProducer(
        bootstrap_servers=bootstrap, acks="all", enable_idempotence=True, client_id="kafka-python"
    )
    futures = [
        producer.send(topic, value=value("kp", s), partition=s % PARTITIONS) for s in range(count)
    ]
    producer.flush(60)
    for future in futures:
        future.get(timeout=60)
    producer.close()
    consumer = KafkaConsumer(
        bootstrap_servers=bootstrap,
        group_id="kafka-python-readers",
        enable_auto_commit=False,
        auto_offset_reset="earliest",
        consumer_timeout_ms=3000,
    )
    audit = Audit()
    consumer.assign([KpTopicPartition(topic, p) for p in range(PARTITIONS)])
    for message in consumer:
        audit.add(message.partition, message.offset, message.value)
    consumer.commit()
    committed = {p: consumer.committed(KpTopicPartition(topic, p)) for p in range(PARTITIONS)}
    consumer.close()
    assert sum(c or 0 for c in committed.values()) == count, committed
    return audit


async def test_kafka_python_round_trip(cluster: KafkaCluster) -> None:
    await cluster.create_topic("kp", PARTITIONS)
    audit = await asyncio.to_thread(
        _kafka_python_round_trip, cluster.bootstrap("rack-1"), "kp", 3000
    )
    assert audit.count == 3000
    audit.check({"kp": range(3000)})


async def test_aiokafka_round_trip_with_a_consumer_group(cluster: KafkaCluster) -> None:
    import aiokafka

    await cluster.create_topic("aio", PARTITIONS)
    bootstrap = cluster.bootstrap("rack-2")
    producer = aiokafka.AIOKafkaProducer(
        bootstrap_servers=bootstrap, enable_idempotence=True, acks="all", client_id="aiokafka"
    )
    await producer.start()
    try:
        sent = [
            await producer.send("aio", value=value("aio", s), partition=s % PARTITIONS)
            for s in range(2000)
        ]
        results = await asyncio.gather(*sent)
    finally:
        await producer.stop()
    assert len(results) == 2000
    consumers = [
        aiokafka.AIOKafkaConsumer(
            "aio",
            bootstrap_servers=bootstrap,
            group_id="aio-group",
            auto_offset_reset="earliest",
            enable_auto_commit=False,
        )
        for _ in range(2)
    ]
    # A group delivers at least once: a partition that moves in a rebalance is read again from
    # its committed offset. So reads are keyed by (partition, offset); the values must agree.
    read: dict[tuple[int, int], bytes] = {}
    for consumer in consumers:
        await consumer.start()
    try:

        async def drain(consumer: aiokafka.AIOKafkaConsumer) -> None:
            idle = 0
            while idle < 3 or (len(read) < 2000 and idle < 40):
                batches = await consumer.getmany(timeout_ms=500)
                if not batches:
                    idle += 1
                    continue
                idle = 0
                for tp, messages in batches.items():
                    for m in messages:
                        data = read.setdefault((tp.partition, m.offset), m.value or b"")
                        assert data == m.value, (tp, m.offset)
                await consumer.commit()

        await asyncio.gather(*(drain(c) for c in consumers))
    finally:
        for consumer in consumers:
            await consumer.stop()
    audit = Audit()
    for (partition, offset), data in sorted(read.items()):
        audit.add(partition, offset, data)
    audit.check({"aio": range(2000)})
    committed = await cluster.coordinator.fetch_offsets("aio-group")
    assert sum(c.offset for c in committed.values()) == 2000
