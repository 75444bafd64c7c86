"""Integration: a `Mirror` between two in-process diskless clusters, with real clients.

The source gets idempotent and transactional producers (confluent-kafka), an aborted
transaction and a DeleteRecords; the destination then holds the same log: the same offsets, the
same bytes per record, the same read_committed view, the same log start. A client producing to
the mirrored topic gets INVALID_TOPIC_EXCEPTION until the mirror stops; then it writes.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

import pytest
from confluent_kafka import KafkaError, Producer
from confluent_kafka.admin import AdminClient, AlterConfigOpType, ConfigEntry, ConfigResource
from kafka import KafkaAdminClient

from diskless._types import TopicPartition
from diskless.coordinator import InMemoryBatchCoordinator, MirrorState
from diskless.mirror import Mirror, MirrorConfig, MirrorError, SourceCluster
from diskless.storage import MemoryObjectStore
from testkit.cluster import local_cluster
from tests.mirror._logs import (
    idempotent_produce,
    raw_batches,
    read_log,
    transactional_history,
    wait_for,
)

TOPIC = "orders"
PARTITIONS = 2


async def test_the_destination_log_equals_the_source_log_and_failover_makes_it_writable() -> None:
    destination = InMemoryBatchCoordinator()
    store = MemoryObjectStore()
    async with (
        local_cluster() as source_cluster,
        local_cluster(destination, store=store) as destination_cluster,
    ):
        await source_cluster.create_topic(TOPIC, PARTITIONS)
        source = source_cluster.bootstrap()
        await asyncio.to_thread(transactional_history, source, TOPIC, PARTITIONS)
        config = MirrorConfig(
            name="m", topics=(TOPIC,), fetch_max_bytes=4096, partition_max_bytes=2048
        )
        client = SourceCluster(source)
        mirror = Mirror(client, destination, store, config)
        await mirror.prepare()
        running = asyncio.create_task(mirror.run())
        try:
            await wait_for(
                lambda: all(lag.records == 0 and lag.source_end > 0 for lag in mirror.lag())
            )
            for level in ("read_uncommitted", "read_committed"):
                expected = await asyncio.to_thread(read_log, source, TOPIC, PARTITIONS, level)
                got = await asyncio.to_thread(
                    read_log, destination_cluster.bootstrap(), TOPIC, PARTITIONS, level
                )
                assert got == expected, level
            # Byte for byte, batch by batch (the leader epoch field aside: `_batches`).
            assert await raw_batches(
                destination_cluster.bootstrap(), TOPIC, PARTITIONS
            ) == await raw_batches(source, TOPIC, PARTITIONS)
            offsets = await destination.partition_offsets([TopicPartition(TOPIC, 0)])
            assert offsets[0] is not None and offsets[0].log_start_offset == 3
            refused = await asyncio.to_thread(_produce_one, destination_cluster.bootstrap())
            assert refused == KafkaError.TOPIC_EXCEPTION
            await mirror.stop()
            await asyncio.wait_for(running, 30)
        finally:
            mirror.close()
            await asyncio.gather(running, return_exceptions=True)
            await client.close()
        status = await destination.mirror_status(TOPIC)
        assert status is not None and status.state is MirrorState.STOPPED
        assert await asyncio.to_thread(_produce_one, destination_cluster.bootstrap()) is None
        # The topic's configs stay a client's to change; the mark stays the coordinator's.
        await asyncio.to_thread(_alter_retention, destination_cluster.bootstrap())
        (described,) = await destination.describe_topics([TOPIC])
        assert described.config.retention_ms == 60_000
        assert await destination.mirror_status(TOPIC) == status


def _alter_retention(bootstrap: str) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    entry = ConfigEntry("retention.ms", "60000", incremental_operation=AlterConfigOpType.SET)
    resource = ConfigResource(ConfigResource.Type.TOPIC, TOPIC, incremental_configs=[entry])
    for future in admin.incremental_alter_configs([resource]).values():
        future.result(30)


def _produce_one(bootstrap: str) -> Any:
    producer = Producer(
        {"bootstrap.servers": bootstrap, "enable.idempotence": True, "message.timeout.ms": 20_000}
    )
    errors: list[Any] = []
    producer.produce(TOPIC, b"after", partition=0, on_delivery=lambda e, m: errors.append(e))
    producer.flush(30)
    return errors[0].code() if errors and errors[0] is not None else None


async def test_the_destination_leader_epoch_never_falls_below_the_source_one() -> None:
    """KIP-1279's invariant: the source's leader epoch, raised twice above the destination's
    while the mirror runs, reaches the destination's Metadata, as a client reads both."""
    source_coordinator, destination = InMemoryBatchCoordinator(), InMemoryBatchCoordinator()
    store = MemoryObjectStore()
    async with (
        local_cluster(source_coordinator) as source_cluster,
        local_cluster(destination, store=store) as destination_cluster,
    ):
        await source_cluster.create_topic(TOPIC, PARTITIONS)
        source, target = source_cluster.bootstrap(), destination_cluster.bootstrap()
        config = MirrorConfig(name="m", topics=(TOPIC,), group_sync_interval_ms=200)
        client = SourceCluster(source)
        mirror = Mirror(client, destination, store, config)
        try:
            await mirror.prepare()
            running = asyncio.create_task(mirror.run())
            assert max((await _leader_epochs(target, 0)).values()) < 20
            for floor, count in ((20, 10), (40, 20)):
                await source_coordinator.raise_membership_version(floor)
                source_epochs = await _leader_epochs(source, floor)  # at the brokers' renewal
                await asyncio.to_thread(idempotent_produce, source, TOPIC, PARTITIONS, 10, "a")
                await wait_for(
                    lambda c=count: [lag.mirrored_end for lag in mirror.lag()] == [c // 2] * 2
                )
                got = await _leader_epochs(target, max(source_epochs.values()))
                assert all(got[p] >= source_epochs[p] for p in range(PARTITIONS)), (got, floor)
            mirror.close()
            await asyncio.wait_for(running, 30)
        finally:
            await client.close()


async def _leader_epochs(bootstrap: str, floor: int) -> dict[int, int]:
    """Each partition's leader epoch in the cluster's Metadata (kafka-python), once all are at
    least `floor` (brokers learn a raised version at their next registry read)."""
    return await asyncio.to_thread(_leader_epochs_blocking, bootstrap, floor)


def _leader_epochs_blocking(bootstrap: str, floor: int) -> dict[int, int]:
    admin = KafkaAdminClient(bootstrap_servers=bootstrap)
    try:
        deadline = time.monotonic() + 60
        while True:
            (topic,) = admin.describe_topics([TOPIC])
            epochs = {p["partition_index"]: p["leader_epoch"] for p in topic["partitions"]}
            if len(epochs) == PARTITIONS and min(epochs.values()) >= floor:
                return epochs
            assert time.monotonic() < deadline, (epochs, floor)
            time.sleep(0.2)
    finally:
        admin.close()


async def test_a_second_mirror_process_fences_the_first() -> None:
    destination = InMemoryBatchCoordinator()
    store = MemoryObjectStore()
    async with local_cluster() as source_cluster:
        await source_cluster.create_topic(TOPIC, PARTITIONS)
        source = source_cluster.bootstrap()
        await asyncio.to_thread(idempotent_produce, source, TOPIC, PARTITIONS, 10, "a")
        config = MirrorConfig(name="m", topics=(TOPIC,))
        first_client, second_client = SourceCluster(source), SourceCluster(source)
        first = Mirror(first_client, destination, store, config)
        second = Mirror(second_client, destination, store, config)
        try:
            await first.prepare()
            await second.prepare()  # a restart while the old process still runs
            await asyncio.to_thread(idempotent_produce, source, TOPIC, PARTITIONS, 10, "b")
            with pytest.raises(MirrorError, match="fenced"):
                await asyncio.wait_for(first.run(), 30)
            running = asyncio.create_task(second.run())
            await wait_for(lambda: [lag.mirrored_end for lag in second.lag()] == [10, 10])
            second.close()
            await asyncio.wait_for(running, 30)
        finally:
            await first_client.close()
            await second_client.close()


async def test_a_paused_mirror_appends_nothing_until_it_resumes() -> None:
    destination = InMemoryBatchCoordinator()
    async with local_cluster() as source_cluster:
        await source_cluster.create_topic(TOPIC, PARTITIONS)
        source = source_cluster.bootstrap()
        client = SourceCluster(source)
        mirror = Mirror(
            client, destination, MemoryObjectStore(), MirrorConfig(name="m", topics=(TOPIC,))
        )
        try:
            await mirror.prepare()
            running = asyncio.create_task(mirror.run())
            await asyncio.to_thread(idempotent_produce, source, TOPIC, PARTITIONS, 10, "a")
            await wait_for(lambda: [lag.mirrored_end for lag in mirror.lag()] == [5, 5])
            await mirror.pause()
            status = await destination.mirror_status(TOPIC)
            assert status is not None and status.state is MirrorState.PAUSED
            await asyncio.to_thread(idempotent_produce, source, TOPIC, PARTITIONS, 10, "b")
            await asyncio.sleep(1.0)
            assert [lag.mirrored_end for lag in mirror.lag()] == [5, 5]
            await mirror.resume()
            await wait_for(lambda: [lag.mirrored_end for lag in mirror.lag()] == [10, 10])
            mirror.close()
            await asyncio.wait_for(running, 30)
        finally:
            await client.close()


async def test_a_source_that_lost_the_mirrored_end_stops_the_mirror_in_preparing() -> None:
    """An unclean election on the source: the destination holds offsets the source no longer
    has. A diskless log is never truncated at its end, so PREPARING refuses to go on."""
    destination = InMemoryBatchCoordinator()
    store = MemoryObjectStore()
    config = MirrorConfig(name="m", topics=(TOPIC,))
    async with local_cluster() as first, local_cluster() as second:
        for cluster, count in ((first, 10), (second, 4)):
            await cluster.create_topic(TOPIC, PARTITIONS)
            await asyncio.to_thread(
                idempotent_produce, cluster.bootstrap(), TOPIC, PARTITIONS, count, "a"
            )
        client = SourceCluster(first.bootstrap())
        mirror = Mirror(client, destination, store, config)
        try:
            await mirror.prepare()
            running = asyncio.create_task(mirror.run())
            await wait_for(lambda: [lag.mirrored_end for lag in mirror.lag()] == [5, 5])
            mirror.close()
            await asyncio.wait_for(running, 30)
        finally:
            await client.close()
        client = SourceCluster(second.bootstrap())  # the "same" source, its end lost
        try:
            with pytest.raises(MirrorError, match="the source ends at 2"):
                await Mirror(client, destination, store, config).prepare()
        finally:
            await client.close()
