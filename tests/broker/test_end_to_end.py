"""End to end: three brokers, one store, one coordinator, many pipelined idempotent producers.

Producers live in racks; each sends a partition's batches to the broker that produce routing picks
for its rack, with up to five requests in flight per broker connection, as Kafka's idempotent
producer does. Everything is read back through `fetch` and decoded by kafka-python; the audit
checks that every acknowledged record is there exactly once at the offset its ack promised,
offsets are contiguous, each producer's order holds, and retries of acknowledged batches sent
through another broker are acknowledged with their original offsets and not stored again.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import random
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from diskless import BrokerConfig, DisklessBroker
from diskless._types import ErrorCode, OffsetSpec, TimestampType, TopicPartition
from diskless.coordinator import (
    BatchCoordinator,
    InMemoryBatchCoordinator,
    SqliteBatchCoordinator,
    TopicConfig,
)
from diskless.routing import BrokerNode, produce_broker
from diskless.storage import LocalObjectStore, MemoryObjectStore, ObjectStore, S3ObjectStore
from diskless.wal import WalConfig
from testkit.batches import build_batch, decode
from testkit.s3server import S3_CREDENTIALS, create_bucket, running_s3_server

NODES = [BrokerNode(1, "az-a"), BrokerNode(2, "az-a"), BrokerNode(3, "az-b")]
"""Two brokers share rack az-a (routing hashes between them); az-c has none (routing falls back
to every broker)."""
BROKER_IDS = tuple(node.broker_id for node in NODES)
RACKS = ("az-a", "az-b", "az-c")
PRODUCERS_PER_RACK = 3
ROUNDS = 12
PARTITIONS_PER_PRODUCER = 6
INFLIGHT_PER_CONNECTION_MAX = 5  # Kafka's max.in.flight.requests.per.connection for idempotence
TOPICS = {"orders": 8, "clicks": 4}
"""Topic -> partitions; "clicks" uses LogAppendTime."""
CONFIG = BrokerConfig(
    wal=WalConfig(commit_interval_ms=20, buffer_max_bytes=64 * 1024),
    fetch_partition_max_bytes=4096,  # several fetch rounds per partition
    fetch_max_bytes=16 * 1024,
)


@pytest.fixture(scope="module")
def s3_endpoint() -> Iterator[str]:
    with running_s3_server() as endpoint_url:
        yield endpoint_url


@contextlib.asynccontextmanager
async def _backends(
    kind: str, tmp_path: Path, request: pytest.FixtureRequest
) -> AsyncIterator[tuple[ObjectStore, BatchCoordinator]]:
    store: ObjectStore
    coordinator: BatchCoordinator
    if kind == "memory":
        store, coordinator = MemoryObjectStore(), InMemoryBatchCoordinator()
    elif kind == "local+sqlite":
        store = LocalObjectStore(tmp_path / "objects")
        coordinator = SqliteBatchCoordinator(tmp_path / "coordinator.db")
    else:
        endpoint: str = request.getfixturevalue("s3_endpoint")
        bucket = await create_bucket(endpoint)
        store = S3ObjectStore(bucket, endpoint_url=endpoint, **S3_CREDENTIALS)
        coordinator = InMemoryBatchCoordinator()
    try:
        yield store, coordinator
    finally:
        await coordinator.close()
        await store.close()


@dataclass
class Sent:
    """One batch a producer sent, and what its ack said."""

    producer_id: int
    topic_partition: TopicPartition
    base_sequence: int
    values: list[bytes]
    data: bytes
    base_offset: int | None = None
    log_append_time: int = -1


@dataclass
class Producer:
    producer_id: int
    rack: str
    partitions: list[TopicPartition]
    rng: random.Random
    next_sequence: dict[TopicPartition, int] = field(default_factory=dict)
    sent: list[Sent] = field(default_factory=list)

    def next_batch(self, tp: TopicPartition) -> Sent:
        sequence = self.next_sequence.get(tp, 0)
        values = [
            f"{self.producer_id}|{tp}|{sequence + i}".encode()
            for i in range(self.rng.randint(1, 4))
        ]
        self.next_sequence[tp] = sequence + len(values)
        data = build_batch(
            values,
            keys=[str(self.producer_id).encode()] * len(values),
            producer_id=self.producer_id,
            producer_epoch=0,
            base_sequence=sequence,
        )
        sent = Sent(self.producer_id, tp, sequence, values, data)
        self.sent.append(sent)
        return sent


async def _run_producer(
    producer: Producer, brokers: dict[int, DisklessBroker], nodes: list[BrokerNode]
) -> None:
    """Rounds of requests; each round's batches go, grouped per routed broker, as pipelined
    requests on that broker's connection (requests start in the order they were issued)."""
    slots = {b: asyncio.Semaphore(INFLIGHT_PER_CONNECTION_MAX) for b in brokers}
    inflight: list[asyncio.Task[None]] = []

    async def send(broker_id: int, batches: list[Sent]) -> None:
        try:
            results = await brokers[broker_id].produce(
                {s.topic_partition: s.data for s in batches}, acks=-1, timeout_ms=30_000
            )
        finally:
            slots[broker_id].release()
        for s in batches:
            result = results[s.topic_partition]
            assert result.error == ErrorCode.NONE, (s, result)
            s.base_offset = result.base_offset
            s.log_append_time = result.log_append_time

    for _ in range(ROUNDS):
        chosen = producer.rng.sample(producer.partitions, producer.rng.randint(1, 4))
        per_broker: dict[int, list[Sent]] = collections.defaultdict(list)
        for tp in chosen:
            per_broker[produce_broker(tp, producer.rack, nodes)].append(producer.next_batch(tp))
        for broker_id, batches in per_broker.items():
            await slots[broker_id].acquire()
            inflight.append(asyncio.create_task(send(broker_id, batches)))
        await asyncio.sleep(producer.rng.random() * 0.005)
    await asyncio.gather(*inflight)


async def _read_all(
    brokers: list[DisklessBroker], partitions: list[TopicPartition]
) -> dict[TopicPartition, list[tuple[int, int, int, bytes]]]:
    """(offset, timestamp, timestamp type, value) of every record, fetching round-robin across
    brokers until each partition reaches its high watermark."""
    records: dict[TopicPartition, list[tuple[int, int, int, bytes]]] = {tp: [] for tp in partitions}
    position = dict.fromkeys(partitions, 0)
    done: set[TopicPartition] = set()
    for round_number in range(1_000):
        pending = {tp: position[tp] for tp in partitions if tp not in done}
        if not pending:
            return records
        broker = brokers[round_number % len(brokers)]
        results = await broker.fetch(pending)
        before = sum(position.values())
        for tp, result in results.items():
            assert result.error == ErrorCode.NONE, (tp, result)
            assert result.last_stable_offset == result.high_watermark
            for batch in decode(result.records):
                assert batch.producer_id >= 0 and not batch.is_control
                for r in batch.records:
                    if r.offset >= position[tp]:  # a batch may start before the fetch offset
                        assert r.value is not None
                        records[tp].append((r.offset, r.timestamp, r.timestamp_type, r.value))
                        position[tp] = r.offset + 1
            if position[tp] >= result.high_watermark:
                done.add(tp)
        assert sum(position.values()) > before, f"fetch from {pending} made no progress"
    raise AssertionError("too many fetch rounds")


@pytest.mark.parametrize("kind", ["memory", "local+sqlite", "s3"])
async def test_pipelined_idempotent_producers_through_three_brokers(
    kind: str, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    rng = random.Random(f"e2e-{kind}")
    nodes = NODES
    partitions = [TopicPartition(t, p) for t, count in TOPICS.items() for p in range(count)]
    async with _backends(kind, tmp_path, request) as (store, coordinator):
        await coordinator.create_topic("orders", TOPICS["orders"])
        await coordinator.create_topic(
            "clicks", TOPICS["clicks"], TopicConfig(timestamp_type=TimestampType.LOG_APPEND_TIME)
        )
        async with contextlib.AsyncExitStack() as stack:
            brokers = {
                node.broker_id: await stack.enter_async_context(
                    DisklessBroker(node.broker_id, store, coordinator, CONFIG, rack=node.rack)
                )
                for node in nodes
            }
            producers = [
                Producer(
                    producer_id=1000 + i,
                    rack=RACKS[i % len(RACKS)],
                    partitions=rng.sample(partitions, PARTITIONS_PER_PRODUCER),
                    rng=random.Random(rng.random()),
                )
                for i in range(PRODUCERS_PER_RACK * len(RACKS))
            ]
            await asyncio.gather(*(_run_producer(p, brokers, nodes) for p in producers))
            sent = [s for p in producers for s in p.sent]
            assert sent and all(s.base_offset is not None for s in sent)

            # Retries of acknowledged batches (the last, and one a few back within the five a
            # producer's state retains), through a broker other than the one that took them.
            retried = 0
            for producer in producers:
                by_partition: dict[TopicPartition, list[Sent]] = collections.defaultdict(list)
                for s in producer.sent:
                    by_partition[s.topic_partition].append(s)
                for tp, batches in by_partition.items():
                    for s in {id(b): b for b in (batches[-1], batches[-3:][0])}.values():
                        original = produce_broker(tp, producer.rack, nodes)
                        other = brokers[BROKER_IDS[(BROKER_IDS.index(original) + 1) % 3]]
                        again = await other.produce({tp: s.data})
                        assert again[tp].error == ErrorCode.NONE, again[tp]
                        assert again[tp].base_offset == s.base_offset
                        retried += 1
            assert retried >= len(producers)

            read = await _read_all(list(brokers.values()), partitions)
            latest = await brokers[1].list_offsets(dict.fromkeys(partitions, OffsetSpec.LATEST))
            stats = [b.stats() for b in brokers.values()]

        # --- audit ----------------------------------------------------------------------------
        expected_count: collections.Counter[TopicPartition] = collections.Counter()
        for s in sent:
            expected_count[s.topic_partition] += len(s.values)
        where: dict[bytes, int] = {}
        for tp in partitions:
            offsets = [offset for offset, _, _, _ in read[tp]]
            assert offsets == list(range(len(offsets))), f"{tp}: offsets not contiguous"
            assert len(offsets) == expected_count[tp] == latest[tp].offset, tp
            values = [value for _, _, _, value in read[tp]]
            assert len(set(values)) == len(values), f"{tp}: a record stored twice"
            where.update({value: offset for offset, _, _, value in read[tp]})
        for s in sent:
            assert s.base_offset is not None
            for i, value in enumerate(s.values):
                assert where[value] == s.base_offset + i, (s, value)
        # Each producer's records appear on each partition in the order it sent them.
        for tp in partitions:
            per_producer: dict[bytes, list[int]] = collections.defaultdict(list)
            for _, _, _, value in read[tp]:
                producer_id, _, sequence = value.split(b"|")
                per_producer[producer_id].append(int(sequence))
            for sequences in per_producer.values():
                assert sequences == list(range(len(sequences)))
        # LogAppendTime topics carry the acknowledged append time; the others the producer's.
        append_time = {value: s.log_append_time for s in sent for value in s.values}
        for tp in partitions:
            for _, timestamp, timestamp_type, value in read[tp]:
                if tp.topic == "clicks":
                    assert timestamp_type == 1 and timestamp == append_time[value] > 0
                else:
                    assert timestamp_type == 0 and append_time[value] == -1
        # Every broker took produce traffic: routing spreads rack az-a over brokers 1 and 2, and
        # rack az-c (no broker of its own) over all three.
        for broker_stats, broker_id in zip(stats, BROKER_IDS, strict=True):
            assert broker_stats.produce.requests > 0, broker_id
        assert sum(st.fetch.batches_read for st in stats) > 0
