"""Integration: real clients look offsets up by time over the wire (SQLite coordinator).

Regression: ten batches of twenty records, batch k stamped base + 1000k + 10j for its record j.
kafka-python's and librdkafka's `offsets_for_times` get the record inside the batch that Kafka
answers (offset 67 for base + 3070, 79 for base + 3190, 199 for the last record), not the
batch's first offset.
"""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

from confluent_kafka import Consumer
from confluent_kafka import TopicPartition as CkTopicPartition
from kafka import KafkaConsumer
from kafka import TopicPartition as KpTopicPartition

from diskless import TopicPartition
from diskless._types import ErrorCode
from diskless.coordinator import SqliteBatchCoordinator
from testkit.batches import build_batch
from testkit.cluster import local_cluster, server_config

TOPIC = "times"
TIMEOUT_S = 10.0


def _kafka_python(bootstrap: str, targets: list[int]) -> list[tuple[int, int] | None]:
    consumer = KafkaConsumer(bootstrap_servers=bootstrap, request_timeout_ms=10_000)
    try:
        tp = KpTopicPartition(TOPIC, 0)
        answers: list[tuple[int, int] | None] = []
        for target in targets:
            found = consumer.offsets_for_times({tp: target})[tp]
            answers.append(None if found is None else (found.offset, found.timestamp))
        return answers
    finally:
        consumer.close()


def _confluent(bootstrap: str, targets: list[int]) -> list[int]:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "times"})
    try:
        return [
            consumer.offsets_for_times([CkTopicPartition(TOPIC, 0, target)], TIMEOUT_S)[0].offset
            for target in targets
        ]
    finally:
        consumer.close()


async def test_clients_get_the_record_inside_the_batch_by_time(tmp_path: Path) -> None:
    base = int(time.time() * 1000) - 3_600_000
    coordinator = SqliteBatchCoordinator(tmp_path / "coordinator.db")
    try:
        async with local_cluster(
            coordinator, brokers=1, racks=1, server_config=server_config()
        ) as cluster:
            await cluster.create_topic(TOPIC, 1)
            broker = cluster.live[0].broker
            tp = TopicPartition(TOPIC, 0)
            for k in range(10):
                values = [b"r%d" % (20 * k + j) for j in range(20)]
                batch = build_batch(values, timestamp_ms=base + 1000 * k, timestamp_step=10)
                (result,) = (await broker.produce({tp: batch})).values()
                assert (result.error, result.base_offset) == (ErrorCode.NONE, 20 * k)
            targets = [base + 3070, base + 3065, base + 3190, base + 3191, base + 9190]
            targets.append(base + 9191)
            bootstrap = cluster.bootstrap()
            kafka_python = await asyncio.to_thread(_kafka_python, bootstrap, targets)
            confluent = await asyncio.to_thread(_confluent, bootstrap, targets)
    finally:
        await coordinator.close()
    assert kafka_python == [
        (67, base + 3070),
        (67, base + 3070),
        (79, base + 3190),
        (80, base + 4000),
        (199, base + 9190),
        None,
    ]
    assert confluent == [67, 67, 79, 80, 199, -1]
