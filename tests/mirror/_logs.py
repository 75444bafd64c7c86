"""The mirror tests' workloads and their auditor: a history of idempotent and transactional
produces (committed and aborted) with a DeleteRecords, and a log read back record by record
(offset, key, value, headers, timestamp) with a real client, to compare source and
destination."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from typing import Any

from confluent_kafka import Consumer, KafkaError, Producer
from confluent_kafka import TopicPartition as CkTopicPartition
from confluent_kafka.admin import AdminClient

from diskless._types import ErrorCode, TopicPartition
from diskless.mirror import SourceCluster
from diskless.records import InvalidBatch, parse_batch

LogRecord = tuple[int, int, bytes | None, bytes | None, Any, int]
"""(partition, offset, key, value, headers, timestamp)."""
READ_TIMEOUT_S = 60.0


async def wait_for(condition: Callable[[], bool], timeout_s: float = 60.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        assert time.monotonic() < deadline, "timed out"
        await asyncio.sleep(0.05)


def idempotent_produce(bootstrap: str, topic: str, partitions: int, count: int, tag: str) -> None:
    producer = Producer(
        {"bootstrap.servers": bootstrap, "enable.idempotence": True, "linger.ms": 2}
    )
    for i in range(count):
        producer.produce(
            topic,
            key=f"{tag}-k{i % 7}".encode(),
            value=f"{tag}-{i}".encode() * (1 + i % 5),
            partition=i % partitions,
            headers=[("h", f"{i}".encode())],
        )
        producer.poll(0)
    assert producer.flush(60) == 0


def transactional_produce(
    bootstrap: str, topic: str, partitions: int, count: int, tag: str, commit: bool
) -> None:
    producer = Producer(
        {"bootstrap.servers": bootstrap, "transactional.id": f"txn-{tag}", "linger.ms": 2}
    )
    producer.init_transactions(30)
    producer.begin_transaction()
    for i in range(count):
        producer.produce(
            topic, key=f"{tag}{i}".encode(), value=f"{tag}-{i}".encode(), partition=i % partitions
        )
    if commit:
        producer.commit_transaction(30)
    else:
        producer.abort_transaction(30)


def delete_records(bootstrap: str, topic: str, partition: int, before: int) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    futures = admin.delete_records([CkTopicPartition(topic, partition, before)])
    for future in futures.values():
        future.result(30)


def transactional_history(bootstrap: str, topic: str, partitions: int) -> None:
    """Idempotent records, a committed and an aborted transaction, more idempotent records,
    and partition 0's first 3 records deleted."""
    idempotent_produce(bootstrap, topic, partitions, 20, "a")
    transactional_produce(bootstrap, topic, partitions, 10, "t1", commit=True)
    transactional_produce(bootstrap, topic, partitions, 6, "t2", commit=False)
    idempotent_produce(bootstrap, topic, partitions, 10, "b")
    delete_records(bootstrap, topic, 0, 3)


def read_log(bootstrap: str, topic: str, partitions: int, isolation: str) -> list[LogRecord]:
    """Every record of the topic from each partition's log start to its end (for
    read_committed, its last stable offset), in partition and offset order."""
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"reader-{time.monotonic_ns()}",
            "enable.auto.commit": False,
            "isolation.level": isolation,
            "enable.partition.eof": True,
            "auto.offset.reset": "earliest",
        }
    )
    records: list[LogRecord] = []
    try:
        consumer.assign([CkTopicPartition(topic, p, -2) for p in range(partitions)])  # earliest
        done: set[int] = set()
        deadline = time.monotonic() + READ_TIMEOUT_S
        while len(done) < partitions:
            assert time.monotonic() < deadline, f"read only partitions {done}"
            for message in consumer.consume(500, 0.5):
                error = message.error()
                if error is not None:
                    assert error.code() == KafkaError._PARTITION_EOF, error
                    done.add(message.partition() or 0)
                    continue
                _, timestamp = message.timestamp()
                records.append(
                    (
                        message.partition() or 0,
                        message.offset() or 0,
                        message.key(),
                        message.value(),
                        message.headers(),
                        timestamp,
                    )
                )
    finally:
        consumer.close()
    return sorted(records, key=lambda r: (r[0], r[1]))


async def raw_batches(bootstrap: str, topic: str, partitions: int) -> dict[int, list[bytes]]:
    """Every whole batch of each partition, from its log start to its end, as a Fetch returns
    it, with the partition leader epoch (bytes 12..16, outside the CRC) blanked."""
    client = SourceCluster(bootstrap)
    found: dict[int, list[bytes]] = {}
    try:
        metadata = await client.metadata([topic])
        for p in range(partitions):
            tp = TopicPartition(topic, p)
            batches: list[bytes] = []
            position = 0
            while True:
                answer = (
                    await client.fetch(metadata.leaders[tp], {tp: position}, 1 << 20, 1 << 20, 0)
                )[tp]
                if answer.error == ErrorCode.OFFSET_OUT_OF_RANGE:
                    position = answer.log_start_offset
                    continue
                at = 0
                while at < len(answer.records):
                    header = parse_batch(answer.records, at)
                    if isinstance(header, InvalidBatch):
                        break
                    if header.last_offset >= position:
                        raw = bytearray(header.bytes_view())
                        raw[12:16] = b"\0\0\0\0"
                        batches.append(bytes(raw))
                        position = header.last_offset + 1
                    at += header.size
                if position >= answer.high_watermark:
                    break
            found[p] = batches
    finally:
        await client.close()
    return found
