"""Integration: a `Mirror` between two in-process diskless clusters, with real clients.

The source gets idempotent and transactional producers (confluent-kafka), an aborted
transaction and a DeleteRecords; the destination then holds the same log: the same offsets, the
same bytes per record, the same read_committed view, the same log start. A client producing to
the mirrored topic gets INVALID_TOPIC_EXCEPTION until the mirror stops; then it writes.
"""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from confluent_kafka import KafkaError, Producer
from confluent_kafka.admin import AdminClient, AlterConfigOpType, ConfigEntry, ConfigResource

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
