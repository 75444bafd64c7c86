"""Produce rules that depend on the request or fix the batch, through real wire requests.

- zstd needs Produce v7 or later: below, Kafka answers UNSUPPORTED_COMPRESSION_TYPE (76) for the
  zstd partition alone, and the request's other partitions are stored. Real clients that
  compress with zstd negotiate v7 or later, and their batches are stored.
- A compacted topic refuses a batch holding a record without a key (INVALID_RECORD) for its
  partition alone, as Kafka's LogValidator does, through the wire and confluent-kafka.
- A batch whose maxTimestamp is -1 (Sarama before 2025) or larger than its records' is stored
  with its largest record timestamp, as Kafka's LogValidator stores it: Fetch reads it back with
  a valid CRC, and ListOffsets finds its records by MAX_TIMESTAMP (-3) and by time.

Batches are built by kafka-python's record classes, read back by kafka-python.
"""

from __future__ import annotations

import asyncio
import datetime
import importlib
import warnings
from typing import Any

import pytest
from confluent_kafka import KafkaError, Producer
from kio.schema.errors import ErrorCode as WireError
from kio.schema.list_offsets.v7 import request as list_offsets_v7
from kio.static.primitive import i8, i32, i64

from diskless.clock import SystemClock
from diskless.coordinator import TopicConfig
from diskless.kafka_server import KafkaCluster
from testkit.clients import confluent_consume, confluent_produce, value
from testkit.oracle import MAX_TIMESTAMP_AT, build_batch, patch
from testkit.wire import WireClient
from tests.kafka_server._helpers import batches_of, fetch_partitions

with warnings.catch_warnings():
    warnings.simplefilter("ignore", DeprecationWarning)
    from kafka import KafkaProducer

GZIP, ZSTD = 1, 4
NOW = 1_700_000_000_000


def _batch(timestamps: list[int], codec: int, *, claimed: int | None = None) -> bytes:
    records = [(ts, None, f"at {ts}".encode() * 10, []) for ts in timestamps]
    batch = build_batch(records, compression=codec)
    return batch if claimed is None else patch(batch, ">q", MAX_TIMESTAMP_AT, claimed)


def _produce(version: int, topic: str, batches: dict[int, bytes]) -> Any:
    """A Produce request of `version` carrying one batch per partition."""
    schema = importlib.import_module(f"kio.schema.produce.v{version}.request")
    return schema.ProduceRequest(
        transactional_id=None,
        acks=-1,
        timeout=datetime.timedelta(seconds=30),
        topic_data=(
            schema.TopicProduceData(
                name=topic,
                partition_data=tuple(
                    schema.PartitionProduceData(index=i32(p), records=batch)
                    for p, batch in batches.items()
                ),
            ),
        ),
    )


def _errors(response: Any) -> dict[int, WireError]:
    [topic] = response.responses
    return {p.index: p.error_code for p in topic.partition_responses}


async def test_zstd_below_produce_v7_fails_its_partition_alone(cluster: KafkaCluster) -> None:
    await cluster.create_topic("z", 2)
    client = await WireClient.connect(cluster.servers[0])
    try:
        zstd, gzip = _batch([NOW, NOW + 1], ZSTD), _batch([NOW + 2], GZIP)
        for version in (3, 6):
            response = await client.request(_produce(version, "z", {0: zstd, 1: gzip}))
            assert _errors(response) == {
                0: WireError.unsupported_compression_type,
                1: WireError.none,
            }, version
        fetched = await fetch_partitions(client, "z", 2)
        assert fetched[0] == (0, b"")  # nothing of the refused batches was stored
        assert fetched[1][0] == 2
        for version in (7, 11):
            response = await client.request(_produce(version, "z", {0: zstd, 1: gzip}))
            assert _errors(response) == {0: WireError.none, 1: WireError.none}, version
        fetched = await fetch_partitions(client, "z", 2)
        assert fetched[0][0] == 4 and fetched[1][0] == 4
        stored = batches_of(fetched[0][1])
        assert [b.compression_type for b in stored] == [ZSTD, ZSTD]
        assert [[r.timestamp for r in b] for b in stored] == [[NOW, NOW + 1]] * 2
    finally:
        await client.close()


def _kafka_python_produce_zstd(bootstrap: str, topic: str, count: int) -> None:
    producer = KafkaProducer(bootstrap_servers=bootstrap, acks="all", compression_type="zstd")
    futures = [producer.send(topic, value("kp", s), partition=s % 2) for s in range(count)]
    producer.flush(60)
    for future in futures:
        future.get(timeout=60)
    producer.close()


async def test_real_clients_compressing_with_zstd_are_accepted(cluster: KafkaCluster) -> None:
    await cluster.create_topic("zc", 2)
    bootstrap = cluster.bootstrap(cluster.racks[0])
    extra = {"compression.type": "zstd"}
    await asyncio.to_thread(confluent_produce, bootstrap, "zc", "rd", 400, 2, extra=extra)
    await asyncio.to_thread(_kafka_python_produce_zstd, bootstrap, "zc", 400)
    audit = await asyncio.to_thread(confluent_consume, bootstrap, "zc", {0: 400, 1: 400})
    read = sorted(v for records in audit.records.values() for _, v in records)
    assert read == sorted(
        [value("rd", s) for s in range(400)] + [value("kp", s) for s in range(400)]
    )
    client = await WireClient.connect(cluster.servers[0])
    try:
        fetched = await fetch_partitions(client, "zc", 2)
    finally:
        await client.close()
    codecs = {b.compression_type for _, records in fetched.values() for b in batches_of(records)}
    # Compressed as asked, so sent with Produce v7 or later. (librdkafka sends a batch that
    # zstd would not make smaller, say a single small record, uncompressed.)
    assert ZSTD in codecs and codecs <= {ZSTD, 0}


def _list_offsets(topic: str, timestamp: int) -> Any:
    return list_offsets_v7.ListOffsetsRequest(
        replica_id=-1,
        isolation_level=i8(0),
        topics=(
            list_offsets_v7.ListOffsetsTopic(
                name=topic,
                partitions=(
                    list_offsets_v7.ListOffsetsPartition(
                        partition_index=i32(0), timestamp=i64(timestamp)
                    ),
                ),
            ),
        ),
    )


async def _offset_for(client: WireClient, topic: str, timestamp: int) -> tuple[int, int]:
    response = await client.request(_list_offsets(topic, timestamp))
    [answer] = response.topics
    [partition] = answer.partitions
    assert partition.error_code == WireError.none, partition
    return int(partition.offset), int(partition.timestamp)


@pytest.mark.parametrize("version", [3, 7, 9])
@pytest.mark.parametrize("codec", [0, GZIP], ids=["none", "gzip"])
async def test_a_wrong_max_timestamp_is_stored_fixed(
    cluster: KafkaCluster, codec: int, version: int
) -> None:
    await cluster.create_topic("m", 1)
    now = SystemClock().now_ms()
    sent = [
        [now - 50_000, now - 20_000, now - 60_000],  # offsets 0..2, claims -1
        [now - 10_000, now - 15_000],  # offsets 3..4, claims ten minutes ahead
    ]
    client = await WireClient.connect(cluster.servers[1])
    try:
        for timestamps, claimed in zip(sent, (-1, now + 600_000), strict=True):
            batch = _batch(timestamps, codec, claimed=claimed)
            response = await client.request(_produce(version, "m", {0: batch}))
            assert _errors(response) == {0: WireError.none}
        ((high_watermark, records),) = (await fetch_partitions(client, "m", 1)).values()
        assert high_watermark == 5
        stored = batches_of(records)
        assert [[r.timestamp for r in b] for b in stored] == sent
        assert [b.max_timestamp for b in stored] == [now - 20_000, now - 10_000]
        assert await _offset_for(client, "m", -3) == (3, now - 10_000)  # MAX_TIMESTAMP
        offset, timestamp = await _offset_for(client, "m", now - 55_000)
        assert offset == 0 and timestamp >= now - 55_000
        offset, timestamp = await _offset_for(client, "m", now - 12_000)
        assert offset == 3 and timestamp >= now - 12_000
        assert await _offset_for(client, "m", now - 9_000) == (-1, -1)
    finally:
        await client.close()


COMPACTED = TopicConfig(inapplicable_configs=(("cleanup.policy", "compact"),))


async def test_a_record_without_a_key_fails_its_partition_of_a_compacted_topic(
    cluster: KafkaCluster,
) -> None:
    """Kafka's LogValidator: a compacted topic refuses a batch holding a record without a key
    (INVALID_RECORD); the request's other partitions, keyed, are stored."""
    await cluster.create_topic("table", 2, COMPACTED)
    client = await WireClient.connect(cluster.servers[0])
    try:
        keyed = build_batch([(NOW, b"k", b"v", []), (NOW, b"j", None, [])], compression=GZIP)
        unkeyed = build_batch([(NOW, b"k", b"v", []), (NOW, None, b"v", [])])
        response = await client.request(_produce(11, "table", {0: keyed, 1: unkeyed}))
        [topic] = response.responses
        answers = {p.index: (p.error_code, p.error_message) for p in topic.partition_responses}
        assert answers[0] == (WireError.none, None)
        assert answers[1][0] == WireError.invalid_record
        assert answers[1][1] == (
            "Compacted topic cannot accept message without key in topic partition table-1."
        )
        fetched = await fetch_partitions(client, "table", 2)
        assert fetched[0][0] == 2 and fetched[1] == (0, b"")
    finally:
        await client.close()
    delivered = await asyncio.to_thread(_confluent_keys, cluster.bootstrap(), "table")
    assert delivered == {b"key": None, None: KafkaError.INVALID_RECORD}


def _confluent_keys(bootstrap: str, topic: str) -> dict[bytes | None, int | None]:
    """confluent-kafka's delivery reports of a keyed and an unkeyed record."""
    producer = Producer({"bootstrap.servers": bootstrap, "retries": 0})
    reports: dict[bytes | None, int | None] = {}

    def report(error: Any, message: Any) -> None:
        reports[message.key()] = None if error is None else error.code()

    producer.produce(topic, key=b"key", value=b"v", partition=0, on_delivery=report)
    producer.produce(topic, value=b"v", partition=1, on_delivery=report)
    assert producer.flush(60) == 0
    return reports
