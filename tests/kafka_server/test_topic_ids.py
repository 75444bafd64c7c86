"""Topic identity under librdkafka, as its own test suite found it.

- A topic deleted and created again with fewer partitions, while a producer keeps producing to
  it (librdkafka's test 0107): the new topic has a new id (KIP-516), so the producer drops the old
  topic's metadata, and every message it was given completes, delivered or failed, none left
  pending.
- CreateTopics answers the id Metadata then tells; Metadata v10+ describes a topic by its id,
  and DeleteTopics v6 deletes by id: an id no
  topic has now (the id of a topic deleted since, even one created again under the same name)
  is UNKNOWN_TOPIC_ID, and leaves the topic of that name alone.
- Metadata v10 and v11 carry topic ids but cannot answer a topic without its name: a topic named
  there only by id is INVALID_REQUEST, as Kafka refuses it, and the connection goes on.
- A produce to a name no topic can have fails at once with INVALID_TOPIC_EXCEPTION, as Kafka
  answers Metadata for it (librdkafka's test 0057), instead of waiting out
  `message.timeout.ms` for a topic that cannot appear.
"""

from __future__ import annotations

import asyncio
import datetime
import threading
import time
import uuid

import pytest
from confluent_kafka import KafkaError, Producer, TopicCollection
from confluent_kafka.admin import AdminClient, NewTopic
from kio.schema.create_topics.v7.request import CreatableTopic, CreateTopicsRequest
from kio.schema.delete_topics.v6.request import DeleteTopicsRequest, DeleteTopicState
from kio.schema.errors import ErrorCode as WireError
from kio.schema.metadata.v11.request import MetadataRequest as MetadataRequestV11
from kio.schema.metadata.v11.request import MetadataRequestTopic as MetadataRequestTopicV11
from kio.schema.metadata.v12.request import MetadataRequest, MetadataRequestTopic
from kio.static.primitive import i16, i32

from diskless.kafka_server import KafkaCluster
from testkit.wire import WireClient

TOPIC = "recreated"
PARTITIONS_BEFORE = 4
PARTITIONS_AFTER = 2
DELIVERY_BOUND_S = 60.0
"""How long the producer may take to complete every message after the last produce; far below
its `message.timeout.ms`, so no message completes by timing out."""
MESSAGE_TIMEOUT_MS = 300_000
ADMIN_TIMEOUT_S = 30.0


def _admin(bootstrap: str) -> AdminClient:
    return AdminClient({"bootstrap.servers": bootstrap, "broker.address.family": "v4"})


def _topic_id(cluster: KafkaCluster, broker_rack: str) -> str:
    """The topic's id as the Metadata of the brokers of one rack tells it."""
    admin = _admin(cluster.bootstrap(broker_rack))
    future = admin.describe_topics(TopicCollection([TOPIC]))[TOPIC]
    return str(future.result(ADMIN_TIMEOUT_S).topic_id)


def _recreate(admin: AdminClient) -> None:
    admin.delete_topics([TOPIC])[TOPIC].result(ADMIN_TIMEOUT_S)
    deadline = time.monotonic() + ADMIN_TIMEOUT_S
    while True:  # the deletion shows in every broker's Metadata at once (one coordinator)
        future = admin.create_topics([NewTopic(TOPIC, PARTITIONS_AFTER)])[TOPIC]
        try:
            future.result(ADMIN_TIMEOUT_S)
            return
        except Exception:
            assert time.monotonic() < deadline, "the topic could not be created again"
            time.sleep(0.2)


async def test_a_recreated_topic_has_a_new_id_and_a_producer_completes_every_message(
    cluster: KafkaCluster,
) -> None:
    await cluster.create_topic(TOPIC, PARTITIONS_BEFORE)
    racks = cluster.racks
    before = {rack: await asyncio.to_thread(_topic_id, cluster, rack) for rack in racks}
    assert len(set(before.values())) == 1, before  # every broker tells the same id

    produced = 0
    completed: dict[str, int] = {}
    stop = threading.Event()
    recreated = threading.Event()
    after_recreation = 0
    remaining = -1

    def produce() -> None:
        nonlocal produced, after_recreation, remaining
        producer = Producer(
            {
                "bootstrap.servers": cluster.bootstrap(),
                "linger.ms": 5,
                "message.timeout.ms": MESSAGE_TIMEOUT_MS,
                "topic.metadata.refresh.interval.ms": 500,
            }
        )

        def done(error: KafkaError | None, _message: object) -> None:
            key = "delivered" if error is None else error.name()
            completed[key] = completed.get(key, 0) + 1

        while not stop.is_set():
            try:
                producer.produce(TOPIC, value=b"x" * 100, on_delivery=done)
            except BufferError:
                producer.poll(0.05)
                continue
            produced += 1
            if recreated.is_set():
                after_recreation += 1
            producer.poll(0.001)
        remaining = producer.flush(DELIVERY_BOUND_S)

    thread = threading.Thread(target=produce)
    thread.start()
    try:
        await asyncio.sleep(2)
        await asyncio.to_thread(_recreate, _admin(cluster.bootstrap()))
        recreated.set()
        await asyncio.sleep(4)
    finally:
        stop.set()
        await asyncio.to_thread(thread.join)
    after = {rack: await asyncio.to_thread(_topic_id, cluster, rack) for rack in racks}

    assert remaining == 0, f"{remaining} of {produced} messages never completed: {completed}"
    assert sum(completed.values()) == produced, (produced, completed)
    assert after_recreation > 0 and completed.get("delivered", 0) > 0, completed
    assert len(set(after.values())) == 1, after
    assert set(after.values()).isdisjoint(before.values()), (before, after)


@pytest.mark.parametrize("name", ["bad topic!", "x" * 250, ".", ".."])
async def test_a_produce_to_an_illegal_topic_name_fails_with_invalid_topic(
    cluster: KafkaCluster, name: str
) -> None:
    """The delivery report carries Kafka's INVALID_TOPIC_EXCEPTION (17); the message timeout is
    far beyond the wait for the report, so only the Metadata answer can fail it."""

    def produce() -> list[KafkaError | None]:
        reports: list[KafkaError | None] = []
        producer = Producer(
            {
                "bootstrap.servers": cluster.bootstrap(),
                "message.timeout.ms": MESSAGE_TIMEOUT_MS,
            }
        )
        producer.produce(name, value=b"v", on_delivery=lambda e, _m: reports.append(e))
        producer.flush(DELIVERY_BOUND_S)
        return reports

    (error,) = await asyncio.to_thread(produce)
    assert error is not None
    assert error.code() == KafkaError.TOPIC_EXCEPTION, error
    assert [d.name for d in await cluster.coordinator.describe_topics()] == []


def _create(name: str) -> CreateTopicsRequest:
    topic = CreatableTopic(
        name=name, num_partitions=i32(2), replication_factor=i16(1), assignments=(), configs=()
    )
    return CreateTopicsRequest(
        topics=(topic,), timeout=datetime.timedelta(seconds=5), validate_only=False
    )


def _delete(*topics: tuple[str | None, uuid.UUID | None]) -> DeleteTopicsRequest:
    return DeleteTopicsRequest(
        topics=tuple(DeleteTopicState(name=n, topic_id=i) for n, i in topics),
        timeout=datetime.timedelta(seconds=5),
    )


def _metadata(name: str | None, topic_id: uuid.UUID | None = None) -> MetadataRequest:
    return MetadataRequest(
        topics=(MetadataRequestTopic(topic_id=topic_id, name=name),),
        allow_auto_topic_creation=False,
        include_topic_authorized_operations=False,
    )


async def test_create_topics_answers_the_id_and_delete_topics_deletes_by_id(
    cluster: KafkaCluster,
) -> None:
    client = await WireClient.connect(cluster.servers[0])
    try:
        (created,) = (await client.request(_create("by-id"))).topics
        assert created.error_code == WireError.none and created.topic_id is not None
        (described,) = (await client.request(_metadata("by-id"))).topics
        assert described.topic_id == created.topic_id
        first = created.topic_id
        (by_id,) = (await client.request(_metadata(None, first))).topics
        assert (by_id.name, by_id.topic_id, by_id.error_code) == ("by-id", first, WireError.none)
        assert len(by_id.partitions) == 2

        (deleted,) = (await client.request(_delete((None, first)))).responses
        assert (deleted.name, deleted.topic_id, deleted.error_code) == (
            "by-id",
            first,
            WireError.none,
        )
        (again,) = (await client.request(_create("by-id"))).topics
        assert again.topic_id not in (None, first)
        stale, both = (
            await client.request(_delete((None, first), ("by-id", again.topic_id)))
        ).responses
        assert (stale.name, stale.error_code) == (None, WireError.unknown_topic_id)
        (gone,) = (await client.request(_metadata(None, first))).topics
        assert (gone.name, gone.topic_id, gone.error_code) == (
            None,
            first,
            WireError.unknown_topic_id,
        )
        assert both.error_code == WireError.invalid_request
        assert [d.topic_id for d in await cluster.coordinator.describe_topics()] == [again.topic_id]
        (by_name,) = (await client.request(_delete(("by-id", None)))).responses
        assert (by_name.name, by_name.error_code) == ("by-id", WireError.none)
    finally:
        await client.close()
    assert await cluster.coordinator.describe_topics() == []


async def test_metadata_v11_refuses_a_topic_named_only_by_id_and_the_connection_goes_on(
    cluster: KafkaCluster,
) -> None:
    client = await WireClient.connect(cluster.servers[0])
    try:
        (created,) = (await client.request(_create("by-id-v11"))).topics
        assert created.topic_id is not None
        by_id_v11 = MetadataRequestV11(
            topics=(MetadataRequestTopicV11(topic_id=created.topic_id, name=None),),
            allow_auto_topic_creation=False,
            include_topic_authorized_operations=False,
        )
        (refused,) = (await client.request(by_id_v11)).topics
        assert (refused.name, refused.topic_id, refused.error_code) == (
            "",
            created.topic_id,
            WireError.invalid_request,
        )
        (by_name,) = (await client.request(_metadata("by-id-v11"))).topics
        assert (by_name.topic_id, by_name.error_code) == (created.topic_id, WireError.none)
    finally:
        await client.close()
