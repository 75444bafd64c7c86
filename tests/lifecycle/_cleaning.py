"""What the compaction tests of this package share: a cluster with the cleaner's stores, a
compacted topic and its keyed workload, and reads of the log back with kafka-python and
confluent-kafka."""

from __future__ import annotations

import contextlib
import time
import warnings
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer, Producer
from confluent_kafka import TopicPartition as CkTopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from diskless import SystemClock
from diskless._types import TopicPartition
from diskless.coordinator import BatchCoordinator
from diskless.kafka_server import KafkaCluster
from diskless.storage import LocalObjectStore, ObjectStore
from testkit.backends import open_coordinator
from testkit.cluster import local_cluster, server_config
from testkit.s3server import create_bucket, s3_store

with warnings.catch_warnings():
    warnings.simplefilter("ignore", DeprecationWarning)
    from kafka import KafkaConsumer
    from kafka import TopicPartition as KpTopicPartition

TIMEOUT_S = 30
TOPIC = "table"
TP = TopicPartition(TOPIC, 0)

Row = tuple[int, bytes, bytes | None]
"""A record read back: offset, key, value (None: a tombstone)."""


@contextlib.asynccontextmanager
async def running_cluster(
    kind: tuple[str, str], tmp_path: Path, request: pytest.FixtureRequest
) -> AsyncIterator[tuple[KafkaCluster, ObjectStore, BatchCoordinator]]:
    backend, store_kind = kind
    coordinator = open_coordinator(backend, tmp_path, SystemClock())
    store: ObjectStore
    if store_kind == "s3":
        endpoint: str = request.getfixturevalue("s3_endpoint")
        store = s3_store(endpoint, await create_bucket(endpoint))
    else:
        store = LocalObjectStore(tmp_path / "objects")
    try:
        async with local_cluster(
            coordinator, store=store, brokers=1, server_config=server_config()
        ) as cluster:
            yield cluster, store, coordinator
    finally:
        await coordinator.close()
        await store.close()


def create_compacted(bootstrap: str, **configs: str) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    config = {"cleanup.policy": "compact", **configs}
    (future,) = admin.create_topics([NewTopic(TOPIC, 1, config=config)]).values()
    future.result(TIMEOUT_S)


def produce_round(bootstrap: str, round_: int) -> tuple[list[Row], list[Row]]:
    """Updates and tombstones of ten keys, then a committed and an aborted transaction: the
    records committed and the records aborted, each at the offset its ack gave."""
    committed: list[Row] = []
    aborted: list[Row] = []

    def keep(into: list[Row]) -> Any:
        def report(error: Any, message: Any) -> None:
            assert error is None, error
            into.append((message.offset(), message.key(), message.value()))

        return report

    plain = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5, "compression.type": "lz4"})
    for update in range(4):
        for k in range(10):
            value = None if (k + update + round_) % 7 == 0 else b"r%d-u%d-k%d" % (round_, update, k)
            plain.produce(
                TOPIC, key=b"k%d" % k, value=value, partition=0, on_delivery=keep(committed)
            )
        assert plain.flush(TIMEOUT_S) == 0
    txn = Producer({"bootstrap.servers": bootstrap, "transactional.id": f"writer-{round_}"})
    txn.init_transactions(TIMEOUT_S)

    def transaction(keys: tuple[int, ...], tag: bytes, sink: list[Row]) -> None:
        txn.begin_transaction()
        for k in keys:
            value = b"r%d-%s-k%d" % (round_, tag, k)
            txn.produce(TOPIC, key=b"k%d" % k, value=value, partition=0, on_delivery=keep(sink))

    transaction((1, 2, 11), b"txn", committed)
    txn.commit_transaction(TIMEOUT_S)
    transaction((3, 4, 12), b"aborted", aborted)
    assert txn.flush(TIMEOUT_S) == 0
    txn.abort_transaction(TIMEOUT_S)
    return committed, aborted


def latest_by_key(committed: list[Row]) -> dict[bytes, Row]:
    latest: dict[bytes, Row] = {}
    for row in sorted(committed):
        latest[row[1]] = row
    return latest


def read_confluent(bootstrap: str, end: int) -> list[Row]:
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": "reader",
            "enable.auto.commit": False,
            "isolation.level": "read_committed",
            "enable.partition.eof": True,
            "auto.offset.reset": "earliest",
        }
    )
    rows: list[Row] = []
    try:
        consumer.assign([CkTopicPartition(TOPIC, 0, 0)])
        deadline = time.monotonic() + TIMEOUT_S
        done = False
        while not done:
            assert time.monotonic() < deadline, rows
            for message in consumer.consume(100, 0.5):
                if message.error() is not None:
                    done = done or message.offset() >= end
                    continue
                rows.append((message.offset(), message.key(), message.value()))
            position = consumer.position([CkTopicPartition(TOPIC, 0)])[0].offset
            done = done or position >= end
    finally:
        consumer.close()
    return rows


def read_kafka_python(bootstrap: str, end: int) -> list[Row]:
    consumer = KafkaConsumer(
        bootstrap_servers=bootstrap,
        isolation_level="read_committed",
        enable_auto_commit=False,
        auto_offset_reset="earliest",
    )
    tp = KpTopicPartition(TOPIC, 0)
    rows: list[Row] = []
    try:
        consumer.assign([tp])
        consumer.seek(tp, 0)
        deadline = time.monotonic() + TIMEOUT_S
        while consumer.position(tp) < end:
            assert time.monotonic() < deadline, rows
            for records in consumer.poll(500).values():
                rows += [(r.offset, r.key, r.value) for r in records]
    finally:
        consumer.close()
    return rows


async def partition_offsets(coordinator: BatchCoordinator) -> tuple[int, int, int]:
    (offsets,) = await coordinator.partition_offsets([TP])
    assert offsets is not None
    return offsets.high_watermark, offsets.last_stable_offset, offsets.log_start_offset
