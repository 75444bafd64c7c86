"""What stays exact across cleaning, beyond the records: producer state and idempotence, and
retention of a `compact,delete` topic.

- An idempotent producer's state (its epoch, last sequence, the batches kept for duplicate
  detection) is the same after a pass as before it, and the producer goes on producing in
  sequence after it; a read from offset 0 is the latest record of each key.
- A `compact,delete` topic is cleaned, and then retention (by time) removes the cleaned extent
  with everything else older than `retention.ms`: the log start moves to the high watermark,
  ListOffsets EARLIEST says so, and what is produced next is read back whole.
- A pass allocates its map, its cache, a window and its object, never the range it reads.
"""

from __future__ import annotations

import asyncio
import random
import tracemalloc
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Producer

from diskless import BrokerConfig, DisklessBroker, ErrorCode
from diskless._types import OffsetSpec
from diskless.coordinator import InMemoryBatchCoordinator, TopicConfig
from diskless.lifecycle import Cleaner, CleanerConfig, RetentionScheduler
from diskless.storage import LocalObjectStore
from testkit.batches import batch_builder, json_text
from tests.lifecycle._cleaning import (
    TIMEOUT_S,
    TOPIC,
    TP,
    Row,
    create_compacted,
    latest_by_key,
    partition_offsets,
    read_kafka_python,
    running_cluster,
)

RETENTION_MS = 3_000


def _idempotent(bootstrap: str, producer: Any | None, start: int) -> tuple[Any, list[Row]]:
    """Three rounds of updates of twenty keys from one idempotent producer (made when None)."""
    committed: list[Row] = []

    def report(error: Any, message: Any) -> None:
        assert error is None, error
        committed.append((message.offset(), message.key(), message.value()))

    if producer is None:
        config = {"bootstrap.servers": bootstrap, "enable.idempotence": True, "linger.ms": 5}
        producer = Producer(config)
    for update in range(start, start + 3):
        for k in range(20):
            value = b"u%d-k%d" % (update, k)
            producer.produce(TOPIC, key=b"k%d" % k, value=value, partition=0, on_delivery=report)
        assert producer.flush(TIMEOUT_S) == 0
    return producer, committed


async def test_producer_state_and_idempotence_stay_across_cleaning(
    tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    async with running_cluster(("sqlite", "local"), tmp_path, request) as (
        cluster,
        store,
        coordinator,
    ):
        bootstrap = cluster.bootstrap()
        await asyncio.to_thread(create_compacted, bootstrap, **{"min.cleanable.dirty.ratio": "0"})
        producer, committed = await asyncio.to_thread(_idempotent, bootstrap, None, 0)
        before = await coordinator.describe_producers(TP)
        assert len(before) == 1 and before[0].last_sequence == len(committed) - 1, before
        cleaner = Cleaner(store, coordinator, CleanerConfig(age_ms=0))
        assert (await cleaner.run_once()).cleaned == 1
        assert await coordinator.describe_producers(TP) == before
        # The producer goes on in sequence: nothing it produces is refused or duplicated.
        _, more = await asyncio.to_thread(_idempotent, bootstrap, producer, 3)
        committed += more
        after = await coordinator.describe_producers(TP)
        assert [(p.producer_id, p.producer_epoch) for p in after] == [
            (p.producer_id, p.producer_epoch) for p in before
        ]
        assert after[0].last_sequence == len(committed) - 1, after
        assert (await cleaner.run_once()).cleaned == 1
        assert await coordinator.describe_producers(TP) == after
        end = (await partition_offsets(coordinator))[0]
        assert end == len(committed)  # every record once: no duplicate was appended
        rows = await asyncio.to_thread(read_kafka_python, bootstrap, end)
        assert rows == sorted(latest_by_key(committed).values())


async def test_retention_of_a_compact_delete_topic_removes_cleaned_records_by_time(
    tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    async with running_cluster(("postgres", "local"), tmp_path, request) as (
        cluster,
        store,
        coordinator,
    ):
        bootstrap = cluster.bootstrap()
        configs = {"cleanup.policy": "compact,delete", "retention.ms": str(RETENTION_MS)}
        await asyncio.to_thread(create_compacted, bootstrap, **configs)
        _, committed = await asyncio.to_thread(_idempotent, bootstrap, None, 0)
        end = (await partition_offsets(coordinator))[0]
        assert (await Cleaner(store, coordinator, CleanerConfig(age_ms=0)).run_once()).cleaned
        rows = await asyncio.to_thread(read_kafka_python, bootstrap, end)
        assert rows == sorted(latest_by_key(committed).values())
        assert await partition_offsets(coordinator) == (end, end, 0)

        await asyncio.sleep(RETENTION_MS / 1000 + 0.5)  # every record older than retention.ms
        run = await RetentionScheduler(coordinator).run_once()
        assert run.batches_deleted >= 1, run
        assert await partition_offsets(coordinator) == (end, end, end)
        broker = cluster.live[0].broker
        assert (await broker.list_offsets({TP: OffsetSpec.EARLIEST}))[TP].offset == end

        _, newer = await asyncio.to_thread(_idempotent, bootstrap, None, 10)
        rows = await asyncio.to_thread(read_kafka_python, bootstrap, end + len(newer))
        assert rows == sorted(newer)


async def test_a_pass_holds_its_map_cache_and_object_never_the_range(tmp_path: Path) -> None:
    """Kafka's cleaner holds its dedupe buffer and a segment at a time: a pass over 3 MB of
    rows (10% distinct keys, lz4) allocates at its peak the map, its cache, a window and the
    object it uploads, well below the rows it reads."""
    store = LocalObjectStore(tmp_path / "objects")
    coordinator = InMemoryBatchCoordinator()
    rng = random.Random(5)
    config = TopicConfig(inapplicable_configs=(("cleanup.policy", "compact"),))
    size = 0
    async with DisklessBroker(1, store, coordinator, BrokerConfig()) as broker:
        assert await broker.create_topic(TOPIC, 1, config) == ErrorCode.NONE
        while size < 3_000_000:
            builder = batch_builder(compression=3)
            for delta in range(100):
                key = b"key-%d" % rng.randrange(2_000)
                assert builder.append(delta, 1_000 + delta, key, json_text(rng, 300), [])
            batch = builder.build()
            size += len(batch)
            assert (await broker.produce({TP: batch}))[TP].error == ErrorCode.NONE
    cleaner_config = CleanerConfig(
        age_ms=0, map_bytes=64 * 1024, cache_block_bytes=64 * 1024, cache_bytes_max=256 * 1024
    )
    cleaner = Cleaner(store, coordinator, cleaner_config)
    tracemalloc.start()
    try:
        run = await cleaner.run_once()
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert (run.cleaned, run.failures) == (1, 0), run
    assert run.bytes_read > 2_900_000 and run.bytes_written < run.bytes_read / 4, run
    bound = (
        cleaner_config.map_bytes
        + cleaner_config.cache_bytes_max
        + 2 * cleaner_config.cache_block_bytes  # a window, and its batches as served
        + 2 * run.bytes_written  # the object, and its bytes as encoded
        + 256 * 1024  # the rest: rows, headers, the coordinator's answer
    )
    print(f"read {run.bytes_read} B, wrote {run.bytes_written} B, peak {peak} B, bound {bound} B")
    assert peak < bound < run.bytes_read / 2
    await coordinator.close()
    await store.close()
