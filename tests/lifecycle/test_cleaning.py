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
import contextlib
import time
import warnings
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer, Producer
from confluent_kafka import TopicPartition as CkTopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from diskless import SystemClock
from diskless._object_keys import new_object_key, object_key_time_ms
from diskless._types import IsolationLevel, OffsetSpec, TopicPartition
from diskless.compaction import MAP_BYTES_MIN
from diskless.coordinator import BatchCoordinator, DeleteRecordsRequest, FindBatchesRequest
from diskless.kafka_server import KafkaCluster
from diskless.lifecycle import Cleaner, CleanerConfig, Consolidator, ConsolidatorConfig
from diskless.lifecycle._cleaner import cleaned_key, is_cleaned_key
from diskless.storage import LocalObjectStore, ObjectStore
from testkit.backends import open_coordinator
from testkit.cluster import local_cluster, server_config
from testkit.s3server import create_bucket, running_s3_server, s3_store

with warnings.catch_warnings():
    warnings.simplefilter("ignore", DeprecationWarning)
    from kafka import KafkaConsumer
    from kafka import TopicPartition as KpTopicPartition

TIMEOUT_S = 30
TOPIC = "table"
TP = TopicPartition(TOPIC, 0)
KINDS = [("memory", "local"), ("sqlite", "s3"), ("postgres", "local")]

Row = tuple[int, bytes, bytes | None]
"""A record read back: offset, key, value (None: a tombstone)."""


@pytest.fixture(scope="module")
def s3_endpoint() -> Iterator[str]:
    with running_s3_server() as endpoint_url:
        yield endpoint_url


@contextlib.asynccontextmanager
async def _running(
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


def _create(bootstrap: str, **configs: str) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    config = {"cleanup.policy": "compact", **configs}
    (future,) = admin.create_topics([NewTopic(TOPIC, 1, config=config)]).values()
    future.result(TIMEOUT_S)


def _produce(bootstrap: str, round_: int) -> tuple[list[Row], list[Row]]:
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
    txn.begin_transaction()
    for k in (1, 2, 11):
        txn.produce(
            TOPIC,
            key=b"k%d" % k,
            value=b"r%d-txn-k%d" % (round_, k),
            partition=0,
            on_delivery=keep(committed),
        )
    txn.commit_transaction(TIMEOUT_S)
    txn.begin_transaction()
    for k in (3, 4, 12):
        txn.produce(
            TOPIC,
            key=b"k%d" % k,
            value=b"r%d-aborted-k%d" % (round_, k),
            partition=0,
            on_delivery=keep(aborted),
        )
    assert txn.flush(TIMEOUT_S) == 0
    txn.abort_transaction(TIMEOUT_S)
    return committed, aborted


def _latest(committed: list[Row]) -> dict[bytes, Row]:
    latest: dict[bytes, Row] = {}
    for row in sorted(committed):
        latest[row[1]] = row
    return latest


def _confluent_read(bootstrap: str, end: int) -> list[Row]:
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


def _kafka_python_read(bootstrap: str, end: int) -> list[Row]:
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


async def _offsets(coordinator: BatchCoordinator) -> tuple[int, int, int]:
    (offsets,) = await coordinator.partition_offsets([TP])
    assert offsets is not None
    return offsets.high_watermark, offsets.last_stable_offset, offsets.log_start_offset


async def _aborted_first_offsets(coordinator: BatchCoordinator) -> list[int]:
    """The first offsets of the aborted transactions a read_committed fetch from 0 is told of."""
    request = FindBatchesRequest(TP, 0, 1 << 24, IsolationLevel.READ_COMMITTED)
    (found,) = await coordinator.find_batches([request], 1 << 24)
    return [first for _, first in found.aborted_transactions]


@pytest.mark.parametrize("kind", KINDS, ids=["-".join(k) for k in KINDS])
async def test_a_compacted_topic_reads_back_as_its_latest_values_at_their_offsets(
    kind: tuple[str, str], tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    async with _running(kind, tmp_path, request) as (cluster, store, coordinator):
        bootstrap = cluster.bootstrap()
        await asyncio.to_thread(_create, bootstrap, **{"delete.retention.ms": "0"})
        committed, aborted = await asyncio.to_thread(_produce, bootstrap, 0)
        before = await _offsets(coordinator)
        dirty = await asyncio.to_thread(_kafka_python_read, bootstrap, before[0])
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
        assert await _offsets(coordinator) == before  # offsets, HWM, LSO, log start stay
        latest = sorted(_latest(committed).values())
        for read in (_kafka_python_read, _confluent_read):
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
        more, aborted = await asyncio.to_thread(_produce, bootstrap, 1)
        committed += more
        end = (await _offsets(coordinator))[0]
        run = await cleaner.run_once()
        assert (run.cleaned, run.failures) == (1, 0), run
        table = _table(committed)
        assert await _aborted_first_offsets(coordinator) == [min(row[0] for row in aborted)]
        for read in (_kafka_python_read, _confluent_read):
            rows = await asyncio.to_thread(read, bootstrap, end)
            assert _restored(rows) == table, read.__name__
            old_tombstones = [r for r in rows if r[2] is None and r[0] < before[0]]
            assert not old_tombstones, old_tombstones
            assert {r[0]: r for r in rows}.keys() <= {r[0] for r in committed}


@pytest.mark.parametrize("kind", KINDS, ids=["-".join(k) for k in KINDS])
async def test_a_swap_refused_after_delete_records_leaves_the_data_and_an_orphan(
    kind: tuple[str, str], tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    async with _running(kind, tmp_path, request) as (cluster, store, coordinator):
        bootstrap = cluster.bootstrap()
        await asyncio.to_thread(_create, bootstrap)
        committed, _ = await asyncio.to_thread(_produce, bootstrap, 0)
        end = (await _offsets(coordinator))[0]
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
        assert await _offsets(coordinator) == (end, end, 3)
        expected = sorted(row for row in committed if row[0] >= 3)
        for read in (_kafka_python_read, _confluent_read):
            assert await asyncio.to_thread(read, bootstrap, end) == expected, read.__name__


async def test_more_keys_than_the_map_holds_are_cleaned_over_several_passes(
    tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    """A map of Kafka's smallest size (64 entries) and 300 keys: each pass ends where the map
    filled, the next goes on from there, and the log ends up as its latest values. The passes
    read 512 bytes at a time: batches cross the windows of the extents they read."""
    async with _running(("memory", "local"), tmp_path, request) as (cluster, store, coordinator):
        bootstrap = cluster.bootstrap()
        await asyncio.to_thread(_create, bootstrap, **{"min.cleanable.dirty.ratio": "0"})
        committed = await asyncio.to_thread(_keyed, bootstrap, 300)
        end = (await _offsets(coordinator))[0]
        config = CleanerConfig(
            age_ms=0, map_bytes=MAP_BYTES_MIN, cache_block_bytes=512, cache_bytes_max=1024
        )
        cleaner = Cleaner(store, coordinator, config)
        passes = 0
        while (await cleaner.run_once()).cleaned:
            passes += 1
            assert passes < 50
        assert passes >= 5, passes
        assert await _offsets(coordinator) == (end, end, 0)
        rows = await asyncio.to_thread(_kafka_python_read, bootstrap, end)
        assert rows == sorted(_latest(committed).values())


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
    async with _running(("sqlite", "local"), tmp_path, request) as (cluster, store, coordinator):
        bootstrap = cluster.bootstrap()
        await asyncio.to_thread(_create, bootstrap, **{"min.cleanable.dirty.ratio": "0"})
        committed, _ = await asyncio.to_thread(_produce, bootstrap, 0)
        writer, pending = await asyncio.to_thread(_open_transaction, bootstrap)
        hwm, lso, start = await _offsets(coordinator)
        assert lso == min(row[0] for row in pending) < hwm
        cleaner = Cleaner(store, coordinator, CleanerConfig(age_ms=0))
        assert (await cleaner.run_once()).cleaned == 1
        assert await _offsets(coordinator) == (hwm, lso, start)
        rows = await asyncio.to_thread(_kafka_python_read, bootstrap, lso)
        assert rows == sorted(_latest(committed).values())
        await asyncio.to_thread(writer.commit_transaction, TIMEOUT_S)
        end = (await _offsets(coordinator))[0]
        assert (await cleaner.run_once()).cleaned == 1
        rows = await asyncio.to_thread(_kafka_python_read, bootstrap, end)
        assert rows == sorted(_latest(committed + pending).values())


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
    async with _running(kind, tmp_path, request) as (cluster, store, coordinator):
        bootstrap = cluster.bootstrap()
        await asyncio.to_thread(_create, bootstrap)
        committed, _ = await asyncio.to_thread(_produce, bootstrap, 0)
        before = await _offsets(coordinator)
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
        rows = await asyncio.to_thread(_kafka_python_read, bootstrap, before[0])
        assert rows == sorted(committed)  # consolidated, not cleaned
        run = await cleaner.run_once()  # over the consolidated extent
        assert (run.cleaned, run.swaps_refused, run.failures) == (1, 0, 0), run
        assert await _offsets(coordinator) == before
        for read in (_kafka_python_read, _confluent_read):
            rows = await asyncio.to_thread(read, bootstrap, before[0])
            assert rows == sorted(_latest(committed).values()), read.__name__


async def test_a_restarted_cleaner_finds_where_cleaning_reached_in_the_coordinator(
    tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    """Kafka's cleaner checkpoint: a new cleaner (a restarted process) computes the dirty
    ratio over what was produced since the last swap, not over the whole log, so a small
    dirty part is not due; once it holds the ratio, the pass cleans."""
    async with _running(("sqlite", "local"), tmp_path, request) as (cluster, store, coordinator):
        bootstrap = cluster.bootstrap()
        await asyncio.to_thread(_create, bootstrap)  # min.cleanable.dirty.ratio 0.5
        committed = await asyncio.to_thread(_keyed, bootstrap, 200)
        assert (await Cleaner(store, coordinator, CleanerConfig(age_ms=0)).run_once()).cleaned
        committed += await asyncio.to_thread(_updates, bootstrap, 3)
        restarted = Cleaner(store, coordinator, CleanerConfig(age_ms=0))
        run = await restarted.run_once()
        assert (run.cleaned, run.failures, run.bytes_read) == (0, 0, 0), run  # not due
        committed += await asyncio.to_thread(_updates, bootstrap, 400)
        run = await Cleaner(store, coordinator, CleanerConfig(age_ms=0)).run_once()
        assert (run.cleaned, run.failures) == (1, 0), run
        end = (await _offsets(coordinator))[0]
        rows = await asyncio.to_thread(_kafka_python_read, bootstrap, end)
        assert rows == sorted(_latest(committed).values())


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
