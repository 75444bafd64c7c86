"""Unit: what a broker reports to the `diskless.metrics` interface it is given.

A recording `Metrics` (a fake, in addition to the Prometheus tests of the Kafka server) sees
every stage of the write path, each committed object's batches with their outcomes, each write
step of the coordinator, and each fetch's batches; batches are built and read back by
kafka-python's codec.
"""

from __future__ import annotations

import asyncio
import collections
from collections.abc import Sequence

from diskless import BrokerConfig, DisklessBroker, ErrorCode, TopicPartition
from diskless.coordinator import InMemoryBatchCoordinator
from diskless.metrics import (
    BatchOutcome,
    CommittedBatch,
    Metrics,
    ProduceStage,
    StepOutcome,
    record_counts,
)
from diskless.storage import MemoryObjectStore
from diskless.wal import WalConfig
from testkit.batches import build_batch


class Recording(Metrics):
    def __init__(self) -> None:
        self.stages: collections.Counter[ProduceStage] = collections.Counter()
        self.objects: list[tuple[int, list[tuple[str, int, int, ErrorCode]]]] = []
        self.steps: collections.Counter[tuple[str, StepOutcome]] = collections.Counter()
        self.fetched_bytes: collections.Counter[str] = collections.Counter()
        self.fetched_records: collections.Counter[str] = collections.Counter()

    def produce_stage(self, stage: ProduceStage, seconds: float) -> None:
        assert seconds >= 0
        self.stages[stage] += 1

    def wal_object_committed(
        self,
        object_bytes: int,
        put_requests: int,
        batches: Sequence[CommittedBatch],
        outcomes: Sequence[BatchOutcome],
    ) -> None:
        assert put_requests == 1
        self.objects.append(
            (
                object_bytes,
                [
                    (b.topic_partition.topic, b.size, b.record_count, o.error)
                    for b, o in zip(batches, outcomes, strict=True)
                ],
            )
        )

    def coordinator_step(self, operation: str, seconds: float, outcome: StepOutcome) -> None:
        self.steps[operation, outcome] += 1

    def fetched(self, topic: str, nbytes: int, records: int, batches: int) -> None:
        self.fetched_bytes[topic] += nbytes
        self.fetched_records[topic] += records


async def test_every_stage_object_step_and_fetch_is_reported() -> None:
    metrics = Recording()
    coordinator = InMemoryBatchCoordinator()
    coordinator.metrics = metrics
    for topic in ("a", "b"):
        await coordinator.create_topic(topic, 1)
    # A budget of two batches: the third concurrent request waits for admission.
    batch = build_batch([b"x" * 1000] * 3)
    wal = WalConfig(
        commit_interval_ms=5, buffer_max_bytes=2 * len(batch), inflight_bytes_max=2 * len(batch)
    )
    broker = DisklessBroker(
        1, MemoryObjectStore(), coordinator, BrokerConfig(wal=wal), metrics=metrics
    )
    async with broker:
        requests = [{TopicPartition("ab"[i % 2], 0): batch} for i in range(6)]
        answers = await asyncio.gather(*(broker.produce(r) for r in requests))
        assert all(r.error == ErrorCode.NONE for a in answers for r in a.values())
        fetched = await broker.fetch({TopicPartition("a", 0): 0, TopicPartition("b", 0): 0})
        lent = await broker.fetch({TopicPartition("a", 0): 0}, views=True)
    await coordinator.close()

    committed = [b for _, batches in metrics.objects for b in batches]
    assert sorted(committed) == sorted(
        [("a", len(batch), 3, ErrorCode.NONE)] * 3 + [("b", len(batch), 3, ErrorCode.NONE)] * 3
    )
    assert all(size > sum(b[1] for b in batches) for size, batches in metrics.objects)  # a footer
    objects = len(metrics.objects)
    assert metrics.stages[ProduceStage.SEGMENT_FILL] == objects
    assert metrics.stages[ProduceStage.UPLOAD] == objects
    assert metrics.stages[ProduceStage.COMMIT_WAIT] == objects
    commit_steps = metrics.steps["commit_files", StepOutcome.OK]
    assert 1 <= commit_steps == metrics.stages[ProduceStage.COMMIT] <= objects
    assert metrics.stages[ProduceStage.ADMISSION] >= 1
    assert metrics.steps["create_topic", StepOutcome.OK] == 2
    assert metrics.steps["register_broker", StepOutcome.OK] == 1
    for topic in "ab":
        records = fetched[TopicPartition(topic, 0)].records
        assert len(records) == 3 * len(batch)
        views = 1 if topic == "a" else 0  # a fetch of views is counted as a joined one
        assert metrics.fetched_bytes[topic] == (1 + views) * len(records)
        assert metrics.fetched_records[topic] == (1 + views) * 9
    assert lent[TopicPartition("a", 0)].records_size == 3 * len(batch)


def test_record_counts_reads_the_headers_kafka_python_wrote() -> None:
    batches = [build_batch([b"v"] * n) for n in (1, 5, 2)]
    joined = b"".join(batches)
    assert record_counts(joined) == (3, 8)
    assert record_counts(joined[:-1]) == (2, 6)  # a cut last batch is not counted
    assert record_counts(b"") == (0, 0)
