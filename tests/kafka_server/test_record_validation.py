"""Fuzzed batches the broker accepts are readable by librdkafka through the wire broker."""

from __future__ import annotations

import asyncio
import random

from diskless._types import ErrorCode, TopicPartition
from diskless.clock import SystemClock
from diskless.kafka_server import KafkaCluster
from testkit.clients import confluent_consume
from testkit.mutate import CODECS, build, decode, mutate

SEED = 4242


async def test_accepted_hostile_batches_are_consumed_by_confluent_kafka(
    cluster: KafkaCluster,
) -> None:
    print(f"record fuzz seed {SEED}")
    rng = random.Random(SEED)
    await cluster.create_topic("fz", 2)
    broker = cluster.live[0].broker
    hostile_tp, neighbour_tp = TopicPartition("fz", 0), TopicPartition("fz", 1)
    ends = {0: 0, 1: 0}
    values: dict[int, list[bytes]] = {0: [], 1: []}
    refused = 0
    for _ in range(60):
        now = SystemClock().now_ms()
        _, hostile = mutate(rng, build(now, rng.choice(CODECS), rng.randrange(1, 6), rng=rng))
        neighbour = build(now, rng.choice(CODECS), 3, rng=rng)
        results = await broker.produce({hostile_tp: hostile, neighbour_tp: neighbour})
        assert results[neighbour_tp].error == ErrorCode.NONE, results
        for partition, batch in ((0, hostile), (1, neighbour)):
            result = results[TopicPartition("fz", partition)]
            if result.error == ErrorCode.NONE:
                records = decode(batch)
                ends[partition] += len(records)
                values[partition] += [r.value or b"" for r in records]  # type: ignore[attr-defined]
            else:
                refused += 1
    assert refused > 0 and ends[0] > 0
    audit = await asyncio.to_thread(
        confluent_consume, cluster.bootstrap(cluster.racks[0]), "fz", ends
    )
    for partition, expected in values.items():  # every record, in order, as kafka-python read it
        assert [value for _, value in audit.records[partition]] == expected
