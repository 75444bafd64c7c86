"""Compacted topics end to end: produced by real clients, cleaned by the lifecycle's cleaner
against a real object store (a local directory, or moto's S3 server), read back by real clients.

- A topic with updates, tombstones, a committed and an aborted transaction, cleaned: a read
  from offset 0 with kafka-python and with confluent-kafka (read_committed) finds exactly the
  latest record of each key, each at its original offset (gaps between them), tombstones
  within their horizon; the high watermark, the LSO and the log start offset do not move; the
  aborted transaction's entry is gone with its records. A second pass, after more updates and
  past `delete.retention.ms`, drops the tombstones.
- A changelog restore, as Kafka Streams does it: the table read from offset 0 is the table the
  producer built.
- A pass stops at the LSO: an open transaction's records wait until it commits.
- More keys than the map holds are cleaned over several passes to the same end.
- A swap refused because a consolidation moved the rows meanwhile changes nothing; the next
  pass cleans the consolidated extent.
- A swap refused because DeleteRecords moved the log start meanwhile leaves every record as it
  was and the uploaded object an orphan (the coordinator never heard of it).
"""

from __future__ import annotations

import asyncio
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Producer

from diskless import SystemClock
from diskless._object_keys import new_object_key, object_key_time_ms
from diskless._types import IsolationLevel, OffsetSpec
from diskless.compaction import MAP_BYTES_MIN
from diskless.coordinator import BatchCoordinator, DeleteRecordsRequest, FindBatchesRequest
from diskless.lifecycle import Cleaner, CleanerConfig, Consolidator, ConsolidatorConfig
from diskless.lifecycle._cleaner import cleaned_key, is_cleaned_key
from testkit.s3server import running_s3_server
from tests.lifecycle._cleaning import (
    TIMEOUT_S,
    TOPIC,
    TP,
    Row,
    create_compacted,
    latest_by_key,
    partition_offsets,
    produce_round,
    read_confluent,
    read_kafka_python,
    running_cluster,
)

with warnings.catch_warnings():
    warnings.simplefilter("ignore", DeprecationWarning)

KINDS = [("memory", "local"), ("sqlite", "s3"), ("postgres", "local")]


@pytest.fixture(scope="module")
def s3_endpoint() -> Iterator[str]:
    with running_s3_server() as endpoint_url:
        yield endpoint_url


def _restored(rows: list[Row]) -> dict[bytes, bytes]:
    """A changelog restored as Kafka Streams restores a store: put each value, delete on a
    tombstone."""
    table: dict[bytes, bytes] = {}
    for _, key, value in rows:
        if value is None:
            table.pop(key, None)
        else:
            table[key] = value
    return table


def _table(committed: list[Row]) -> dict[bytes, bytes]:
    return _restored(sorted(committed))


async def _aborted_first_offsets(coordinator: BatchCoordinator) -> list[int]:
    """The first offsets of the aborted transactions a read_committed fetch from 0 is told of."""
    request = FindBatchesRequest(TP, 0, 1 << 24, IsolationLevel.READ_COMMITTED)
    (found,) = await coordinator.find_batches([request], 1 << 24)
    return [first for _, first in found.aborted_transactions]


@pytest.mark.parametrize("kind", KINDS, ids=["-".join(k) for k in KINDS])
async def test_a_compacted_topic_reads_back_as_its_latest_values_at_their_offsets(
    kind: tuple[str, str], tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    async with running_cluster(kind, tmp_path, request) as (cluster, store, coordinator):
        bootstrap = cluster.bootstrap()
        await asyncio.to_thread(create_compacted, bootstrap, **{"delete.retention.ms": "0"})
        committed, aborted = await asyncio.to_thread(produce_round, bootstrap, 0)
        before = await partition_offsets(coordinator)
        dirty = await asyncio.to_thread(read_kafka_python, bootstrap, before[0])
        assert len(dirty) == len(committed)  # everything, read_committed
        clock = SystemClock()
        cleaner = Cleaner(store, coordinator, CleanerConfig(age_ms=0), clock)
        run = await cleaner.run_once()
        assert (run.cleaned, run.swaps_refused, run.failures) == (1, 0, 0), run
        assert run.records_kept < run.records_read
        stats = cleaner.stats()  # Kafka's LogCleaner gauges of the run, and the totals
        assert (stats.runs, stats.cleaned, stats.bytes_read) == (1, 1, run.bytes_read), stats
        assert stats.max_dirty_percent == 100  # a first pass: all of it dirty
        assert stats.recopy_percent == pytest.approx(100 * run.bytes_written / run.bytes_read)
        assert 0 < stats.recopy_percent < 100
        assert 0 < stats.max_buffer_utilization_percent < 100
        assert stats.max_clean_time_s > 0
        assert await partition_offsets(coordinator) == before  # offsets, HWM, LSO, log start stay
        latest = sorted(latest_by_key(committed).values())
        for read in (read_kafka_python, read_confluent):
            rows = await asyncio.to_thread(read, bootstrap, before[0])
            assert rows == latest, read.__name__  # one per key, at its own offset, tombstones too
            assert _restored(rows) == _table(committed)
        offsets = [row[0] for row in latest]
        assert offsets != list(range(offsets[0], offsets[0] + len(offsets)))  # gaps
        assert not {row[0] for row in aborted} & set(offsets)
        broker = cluster.live[0].broker
        found = await broker.list_offsets({TP: 0})  # by time: the first record left
        assert found[TP].offset == latest[0][0]
        found = await broker.list_offsets({TP: OffsetSpec.EARLIEST})
        assert found[TP].offset == 0
        assert (await cleaner.run_once()).cleaned == 0  # nothing dirty: not due
        stats = cleaner.stats()
        assert (stats.runs, stats.cleaned, stats.max_dirty_percent) == (2, 1, 0), stats
        assert stats.max_clean_time_s == stats.recopy_percent == 0, stats
        # Its records are gone; its marker and index entry stay until a pass finds it alone.
        assert await _aborted_first_offsets(coordinator) == [min(row[0] for row in aborted)]

        # More updates; past delete.retention.ms (0) the tombstones of the first pass go.
        more, aborted = await asyncio.to_thread(produce_round, bootstrap, 1)
        committed += more
        end = (await partition_offsets(coordinator))[0]
        run = await cleaner.run_once()
        assert (run.cleaned, run.failures) == (1, 0), run
        table = _table(committed)
        assert await _aborted_first_offsets(coordinator) == [min(row[0] for row in aborted)]
        for read in (read_kafka_python, read_confluent):
            rows = await asyncio.to_thread(read, bootstrap, end)
            assert _restored(rows) == table, read.__name__
            old_tombstones = [r for r in rows if r[2] is None and r[0] < before[0]]
            assert not old_tombstones, old_tombstones
            assert {r[0]: r for r in rows}.keys() <= {r[0] for r in committed}


@pytest.mark.parametrize("kind", KINDS, ids=["-".join(k) for k in KINDS])
async def test_a_swap_refused_after_delete_records_leaves_the_data_and_an_orphan(
    kind: tuple[str, str], tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    async with running_cluster(kind, tmp_path, request) as (cluster, store, coordinator):
        bootstrap = cluster.bootstrap()
        await asyncio.to_thread(create_compacted, bootstrap)
        committed, _ = await asyncio.to_thread(produce_round, bootstrap, 0)
        end = (await partition_offsets(coordinator))[0]
        cleaner = Cleaner(store, coordinator, CleanerConfig(age_ms=0))
        real = coordinator.cleaning_range

        async def read_then_trimmed(*args: Any) -> Any:
            found = await real(*args)
            (trimmed,) = await coordinator.delete_records([DeleteRecordsRequest(TP, 3)])
            assert trimmed.low_watermark == 3, trimmed
            return found

        coordinator.cleaning_range = read_then_trimmed  # type: ignore[method-assign]
        objects_before = {info.key async for info in store.list_all("")}
        run = await cleaner.run_once()
        assert (run.cleaned, run.swaps_refused) == (0, 1), run
        new = {info.key async for info in store.list_all("")} - objects_before
        assert len(new) == 1
        assert await coordinator.file_info(sorted(new)) == [None]  # an orphan
        assert await partition_offsets(coordinator) == (end, end, 3)
        expected = sorted(row for row in committed if row[0] >= 3)
        for read in (read_kafka_python, read_confluent):
            assert await asyncio.to_thread(read, bootstrap, end) == expected, read.__name__


async def test_more_keys_than_the_map_holds_are_cleaned_over_several_passes(
    tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    """A map of Kafka's smallest size (64 entries) and 300 keys: each pass ends where the map
    filled, the next goes on from there, and the log ends up as its latest values. The passes
    read 512 bytes at a time: batches cross the windows of the extents they read."""
    async with running_cluster(("memory", "local"), tmp_path, request) as (
        cluster,
        store,
        coordinator,
    ):
        bootstrap = cluster.bootstrap()
        await asyncio.to_thread(create_compacted, bootstrap, **{"min.cleanable.dirty.ratio": "0"})
        committed = await asyncio.to_thread(_keyed, bootstrap, 300)
        end = (await partition_offsets(coordinator))[0]
        config = CleanerConfig(
            age_ms=0, map_bytes=MAP_BYTES_MIN, cache_block_bytes=512, cache_bytes_max=1024
        )
        cleaner = Cleaner(store, coordinator, config)
        passes = 0
        while (await cleaner.run_once()).cleaned:
            passes += 1
            assert passes < 50
        assert passes >= 5, passes
        assert await partition_offsets(coordinator) == (end, end, 0)
        rows = await asyncio.to_thread(read_kafka_python, bootstrap, end)
        assert rows == sorted(latest_by_key(committed).values())


def _keyed(bootstrap: str, keys: int) -> list[Row]:
    committed: list[Row] = []

    def report(error: Any, message: Any) -> None:
        assert error is None, error
        committed.append((message.offset(), message.key(), message.value()))

    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5, "batch.num.messages": 10})
    for update in range(2):
        for k in range(keys):
            key = b"k%d" % k
            producer.produce(TOPIC, key=key, value=b"u%d" % update, partition=0, on_delivery=report)
            if k % 20 == 0:
                producer.poll(0)
        assert producer.flush(TIMEOUT_S) == 0
    return committed


async def test_a_pass_stops_at_the_first_open_transaction(
    tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    """The cleanable range ends at the LSO: an open transaction's records, and everything
    after its first, wait until it ends."""
    async with running_cluster(("sqlite", "local"), tmp_path, request) as (
        cluster,
        store,
        coordinator,
    ):
        bootstrap = cluster.bootstrap()
        await asyncio.to_thread(create_compacted, bootstrap, **{"min.cleanable.dirty.ratio": "0"})
        committed, _ = await asyncio.to_thread(produce_round, bootstrap, 0)
        writer, pending = await asyncio.to_thread(_open_transaction, bootstrap)
        hwm, lso, start = await partition_offsets(coordinator)
        assert lso == min(row[0] for row in pending) < hwm
        cleaner = Cleaner(store, coordinator, CleanerConfig(age_ms=0))
        assert (await cleaner.run_once()).cleaned == 1
        assert await partition_offsets(coordinator) == (hwm, lso, start)
        rows = await asyncio.to_thread(read_kafka_python, bootstrap, lso)
        assert rows == sorted(latest_by_key(committed).values())
        await asyncio.to_thread(writer.commit_transaction, TIMEOUT_S)
        end = (await partition_offsets(coordinator))[0]
        assert (await cleaner.run_once()).cleaned == 1
        rows = await asyncio.to_thread(read_kafka_python, bootstrap, end)
        assert rows == sorted(latest_by_key(committed + pending).values())


def _open_transaction(bootstrap: str) -> tuple[Any, list[Row]]:
    """A transactional producer whose transaction, over keys already written, stays open."""
    pending: list[Row] = []

    def report(error: Any, message: Any) -> None:
        assert error is None, error
        pending.append((message.offset(), message.key(), message.value()))

    writer = Producer({"bootstrap.servers": bootstrap, "transactional.id": "open"})
    writer.init_transactions(TIMEOUT_S)
    writer.begin_transaction()
    for k in (0, 5, 6):
        writer.produce(
            TOPIC, key=b"k%d" % k, value=b"open-k%d" % k, partition=0, on_delivery=report
        )
    assert writer.flush(TIMEOUT_S) == 0
    return writer, pending


@pytest.mark.parametrize("kind", KINDS, ids=["-".join(k) for k in KINDS])
async def test_a_consolidation_in_between_refuses_the_swap_and_the_next_pass_cleans_its_extent(
    kind: tuple[str, str], tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    async with running_cluster(kind, tmp_path, request) as (cluster, store, coordinator):
        bootstrap = cluster.bootstrap()
        await asyncio.to_thread(create_compacted, bootstrap)
        committed, _ = await asyncio.to_thread(produce_round, bootstrap, 0)
        before = await partition_offsets(coordinator)
        cleaner = Cleaner(store, coordinator, CleanerConfig(age_ms=0))
        consolidator = Consolidator(store, coordinator, ConsolidatorConfig(age_ms=0))
        real = coordinator.cleaning_range

        async def read_then_consolidated(*args: Any) -> Any:
            found = await real(*args)
            assert (await consolidator.run_once()).extents_committed == 1
            return found

        coordinator.cleaning_range = read_then_consolidated  # type: ignore[method-assign]
        run = await cleaner.run_once()
        assert (run.cleaned, run.swaps_refused) == (0, 1), run
        coordinator.cleaning_range = real  # type: ignore[method-assign]
        rows = await asyncio.to_thread(read_kafka_python, bootstrap, before[0])
        assert rows == sorted(committed)  # consolidated, not cleaned
        run = await cleaner.run_once()  # over the consolidated extent
        assert (run.cleaned, run.swaps_refused, run.failures) == (1, 0, 0), run
        assert await partition_offsets(coordinator) == before
        for read in (read_kafka_python, read_confluent):
            rows = await asyncio.to_thread(read, bootstrap, before[0])
            assert rows == sorted(latest_by_key(committed).values()), read.__name__


async def test_a_restarted_cleaner_finds_where_cleaning_reached_in_the_coordinator(
    tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    """Kafka's cleaner checkpoint: a new cleaner (a restarted process) computes the dirty
    ratio over what was produced since the last swap, not over the whole log, so a small
    dirty part is not due; once it holds the ratio, the pass cleans."""
    async with running_cluster(("sqlite", "local"), tmp_path, request) as (
        cluster,
        store,
        coordinator,
    ):
        bootstrap = cluster.bootstrap()
        await asyncio.to_thread(create_compacted, bootstrap)  # min.cleanable.dirty.ratio 0.5
        committed = await asyncio.to_thread(_keyed, bootstrap, 200)
        assert (await Cleaner(store, coordinator, CleanerConfig(age_ms=0)).run_once()).cleaned
        committed += await asyncio.to_thread(_updates, bootstrap, 3)
        restarted = Cleaner(store, coordinator, CleanerConfig(age_ms=0))
        run = await restarted.run_once()
        assert (run.cleaned, run.failures, run.bytes_read) == (0, 0, 0), run  # not due
        committed += await asyncio.to_thread(_updates, bootstrap, 400)
        run = await Cleaner(store, coordinator, CleanerConfig(age_ms=0)).run_once()
        assert (run.cleaned, run.failures) == (1, 0), run
        end = (await partition_offsets(coordinator))[0]
        rows = await asyncio.to_thread(read_kafka_python, bootstrap, end)
        assert rows == sorted(latest_by_key(committed).values())


def _updates(bootstrap: str, count: int) -> list[Row]:
    """`count` updates of key k0, one batch each."""
    committed: list[Row] = []

    def report(error: Any, message: Any) -> None:
        assert error is None, error
        committed.append((message.offset(), message.key(), message.value()))

    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 0})
    for n in range(count):
        producer.produce(TOPIC, key=b"k0", value=b"x%d" % n, partition=0, on_delivery=report)
        if n % 50 == 0:
            producer.poll(0)
    assert producer.flush(TIMEOUT_S) == 0
    return committed


def test_only_a_cleaned_object_is_named_as_one() -> None:
    now = SystemClock().now_ms()
    assert is_cleaned_key(cleaned_key("wal/", now, 3))
    assert object_key_time_ms(cleaned_key("wal/", now, 3), "wal/") == now  # a WAL-like name
    assert not any(is_cleaned_key(new_object_key("wal/", now, 3)) for _ in range(1000))
