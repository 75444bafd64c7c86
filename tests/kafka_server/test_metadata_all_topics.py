"""Metadata for all topics as librdkafka asks for it (v12, topics null).

librdkafka writes the null topics array of Metadata v9+ as four zero bytes (the room it reserves
for an array count) instead of the one-byte varint, so three zero bytes follow the body as kio
reads it. Kafka ignores bytes after a body, so the broker must answer, not close the connection.
"""

from __future__ import annotations

import asyncio
import struct

from confluent_kafka import Consumer
from confluent_kafka.admin import AdminClient
from kio.schema.metadata.v12.request import MetadataRequest
from kio.schema.metadata.v12.response import MetadataResponse

from diskless.kafka_server import KafkaCluster
from testkit.wire import WireClient, decode_response, encode_request

TIMEOUT_S = 30


def _librdkafka_all_topics(correlation_id: int) -> bytes:
    """The request as librdkafka frames it: the null count padded to four bytes."""
    body = MetadataRequest(
        topics=None, allow_auto_topic_creation=False, include_topic_authorized_operations=False
    )
    frame = encode_request(body, correlation_id)[4:]
    assert frame.endswith(b"\x00\x00\x00\x00")  # null topics, two false flags, no tags
    padded = frame + b"\x01\x00\x00"  # as sent: the flags and tags land three bytes later
    return struct.pack(">i", len(padded)) + padded


async def test_padded_null_topics_lists_every_topic(cluster: KafkaCluster) -> None:
    await cluster.create_topic("listed-a", 2)
    await cluster.create_topic("listed-b", 1)
    client = await WireClient.connect(cluster.servers[0])
    try:
        await client.send_raw(_librdkafka_all_topics(7))
        frame = await client.read_frame()
    finally:
        await client.close()
    assert frame is not None, "the connection was closed"
    response: MetadataResponse = decode_response(frame, 3, 12, 7)
    partitions = {t.name: len(t.partitions) for t in response.topics}
    assert partitions == {"listed-a": 2, "listed-b": 1}


async def test_padding_is_tolerated_only_for_null_topics(cluster: KafkaCluster) -> None:
    body = MetadataRequest(
        topics=(), allow_auto_topic_creation=False, include_topic_authorized_operations=False
    )
    frame = encode_request(body, 3)[4:] + b"\x00\x00\x00"
    client = await WireClient.connect(cluster.servers[0])
    try:
        await client.send_raw(struct.pack(">i", len(frame)) + frame)
        assert await client.read_frame() is None
    finally:
        await client.close()


def _list_topics(bootstrap: str) -> set[str]:
    return set(AdminClient({"bootstrap.servers": bootstrap}).list_topics(timeout=TIMEOUT_S).topics)


def _subscribe_by_pattern(bootstrap: str) -> set[str]:
    """A consumer subscribed by regex resolves it from an all-topics Metadata request."""
    consumer = Consumer(
        {"bootstrap.servers": bootstrap, "group.id": "by-pattern", "auto.offset.reset": "earliest"}
    )
    assigned: set[str] = set()
    consumer.subscribe(
        ["^pattern-.*"], on_assign=lambda _, tps: assigned.update(tp.topic for tp in tps)
    )
    try:
        for _ in range(TIMEOUT_S * 2):
            consumer.poll(0.5)
            if assigned:
                break
    finally:
        consumer.close()
    return assigned


async def test_confluent_lists_topics_and_subscribes_by_pattern(cluster: KafkaCluster) -> None:
    await cluster.create_topic("pattern-x", 2)
    await cluster.create_topic("other", 1)
    assert await asyncio.to_thread(_list_topics, cluster.bootstrap()) == {"pattern-x", "other"}
    assert await asyncio.to_thread(_subscribe_by_pattern, cluster.bootstrap()) == {"pattern-x"}
