"""Consume-transform-produce exactly once with confluent-kafka's `send_offsets_to_transaction`.

The input offsets commit atomically with the output (AddOffsetsToTxn, TxnOffsetCommit, EndTxn);
an aborted transaction leaves both unchanged, and the loop re-processes from the committed
offsets. At the end, the output read with read_committed is the transformed input exactly once
and the group's committed offsets are the input's end offsets.
"""

from __future__ import annotations

import asyncio
import time

from confluent_kafka import Consumer, KafkaError, Producer
from confluent_kafka import TopicPartition as CkTopicPartition

from diskless import TopicPartition
from diskless.kafka_server import KafkaCluster
from testkit.clients import confluent_consume, value
from testkit.cluster import end_offsets

PARTITIONS = 3
RECORDS = 120
BATCH = 9
GROUP = "transformer"
LOOP_TIMEOUT_S = 120


def _produce_input(bootstrap: str) -> None:
    producer = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True})
    for i in range(RECORDS):
        producer.produce("in", value=value("in", i), partition=i % PARTITIONS)
    assert producer.flush(30) == 0


def _assign_committed(consumer: Consumer) -> None:
    """(Re)start every input partition at the group's committed offset (the earliest if none)."""
    consumer.unassign()
    consumer.assign([CkTopicPartition("in", p) for p in range(PARTITIONS)])


def _transform_loop(bootstrap: str) -> tuple[int, int]:
    """Transform all of `in` into `out`, aborting every third transaction; returns the numbers
    of committed and aborted transactions."""
    producer = Producer({"bootstrap.servers": bootstrap, "transactional.id": "transformer-1"})
    producer.init_transactions(30)
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": GROUP,
            "enable.auto.commit": False,
            "auto.offset.reset": "earliest",
            "isolation.level": "read_committed",
            "enable.partition.eof": True,
        }
    )
    committed = aborted = 0
    done: set[int] = set()
    deadline = time.monotonic() + LOOP_TIMEOUT_S
    try:
        _assign_committed(consumer)
        while len(done) < PARTITIONS:
            assert time.monotonic() < deadline, f"only partitions {done} done"
            messages = consumer.consume(BATCH, 0.5)
            positions: dict[int, int] = {}
            outputs: list[tuple[int, bytes]] = []
            for message in messages:
                error = message.error()
                partition, offset = message.partition(), message.offset()
                assert partition is not None and offset is not None
                if error is not None:
                    assert error.code() == KafkaError._PARTITION_EOF, error
                    if offset >= RECORDS // PARTITIONS:
                        done.add(partition)
                    continue
                producer_name, _, sequence = (message.value() or b"").decode().partition(":")
                assert producer_name == "in"
                outputs.append((partition, value("out", int(sequence))))
                positions[partition] = offset + 1
            if not outputs:
                continue
            producer.begin_transaction()
            for partition, data in outputs:
                producer.produce("out", value=data, partition=partition)
            producer.send_offsets_to_transaction(
                [CkTopicPartition("in", p, o) for p, o in sorted(positions.items())],
                consumer.consumer_group_metadata(),
                30,
            )
            if (committed + aborted) % 3 == 1:
                producer.abort_transaction(30)
                aborted += 1
                done.clear()
                _assign_committed(consumer)  # re-process what the abort undid
            else:
                producer.commit_transaction(30)
                committed += 1
    finally:
        consumer.close()
    return committed, aborted


def _group_offsets(bootstrap: str) -> dict[int, int]:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": GROUP})
    try:
        answered = consumer.committed(
            [CkTopicPartition("in", p) for p in range(PARTITIONS)], timeout=10
        )
        return {tp.partition: tp.offset for tp in answered}
    finally:
        consumer.close()


async def test_consume_transform_produce_commits_input_offsets_with_the_output(
    cluster: KafkaCluster,
) -> None:
    await cluster.create_topic("in", PARTITIONS)
    await cluster.create_topic("out", PARTITIONS)
    bootstrap = cluster.bootstrap("rack-0")
    await asyncio.to_thread(_produce_input, bootstrap)
    committed, aborted = await asyncio.to_thread(_transform_loop, bootstrap)
    assert aborted >= 2 and committed >= RECORDS // BATCH

    inputs = await end_offsets(cluster, "in", PARTITIONS)
    assert await asyncio.to_thread(_group_offsets, bootstrap) == inputs
    stored = await cluster.coordinator.fetch_offsets(GROUP)
    assert {tp.partition: c.offset for tp, c in stored.items()} == inputs
    assert all(tp.topic == "in" for tp in stored) and TopicPartition("in", 0) in stored

    outputs = await end_offsets(cluster, "out", PARTITIONS)
    audit = await asyncio.to_thread(
        confluent_consume, bootstrap, "out", outputs, isolation="read_committed"
    )
    audit.check({"out": range(RECORDS)})
    assert audit.count == RECORDS
