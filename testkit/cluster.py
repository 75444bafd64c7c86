"""The suite's Kafka clusters: in-process brokers on ephemeral 127.0.0.1 ports, with a short WAL
rotation so that acks come quickly (the write path is the same as with 250 ms).

`local_cluster` is the one way a test starts a cluster in its own process (over an in-memory
coordinator and object store unless it brings its own); brokers in processes of their own are
`testkit.processes`. Client libraries are blocking (librdkafka's Python binding, kafka-python),
so tests run them in worker threads (`asyncio.to_thread`) while the event loop serves the
brokers.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from typing import Any, Final

from diskless import BrokerConfig, OffsetSpec, TopicPartition
from diskless.coordinator import BatchCoordinator, InMemoryBatchCoordinator
from diskless.kafka_server import KafkaCluster, ServerConfig
from diskless.storage import MemoryObjectStore, ObjectStore
from diskless.wal import WalConfig

COMMIT_INTERVAL_MS: Final = 20
"""Short WAL rotation so that acks come quickly; the write path is the same as with 250 ms."""
FETCH_WAIT_MS_MAX: Final = 500


def broker_config() -> BrokerConfig:
    return BrokerConfig(wal=WalConfig(commit_interval_ms=COMMIT_INTERVAL_MS))


def server_config() -> ServerConfig:
    return ServerConfig(fetch_wait_ms_max=FETCH_WAIT_MS_MAX)


@contextlib.asynccontextmanager
async def local_cluster(
    coordinator: BatchCoordinator | None = None,
    *,
    store: ObjectStore | None = None,
    **options: Any,
) -> AsyncIterator[KafkaCluster]:
    """A started `KafkaCluster(store, coordinator, **options)`, the store and the coordinator in
    memory when not given, with the suite's `broker_config()` unless `options` names another. A
    coordinator made here is closed here; one given stays the caller's."""
    owned = coordinator is None
    used = InMemoryBatchCoordinator() if coordinator is None else coordinator
    options.setdefault("broker_config", broker_config())
    try:
        async with KafkaCluster(
            MemoryObjectStore() if store is None else store,
            used,
            **options,
        ) as running:
            yield running
    finally:
        if owned:
            await used.close()


async def end_offsets(cluster: KafkaCluster, topic: str, partitions: int) -> dict[int, int]:
    broker = cluster.live[0].broker
    results = await broker.list_offsets(
        {TopicPartition(topic, p): OffsetSpec.LATEST for p in range(partitions)}
    )
    return {tp.partition: r.offset for tp, r in results.items()}
