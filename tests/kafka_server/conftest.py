"""A local diskless cluster on ephemeral 127.0.0.1 ports, started in-process for each test.

Client libraries are blocking (librdkafka's Python binding, kafka-python), so tests run them in
worker threads (`asyncio.to_thread`) while the event loop serves the brokers.
"""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from diskless import BrokerConfig
from diskless.coordinator import InMemoryBatchCoordinator
from diskless.kafka_server import KafkaCluster, ServerConfig
from diskless.storage import MemoryObjectStore
from diskless.wal import WalConfig

COMMIT_INTERVAL_MS = 20
"""Short WAL rotation so that acks come quickly; the write path is the same as with 250 ms."""


def broker_config() -> BrokerConfig:
    return BrokerConfig(wal=WalConfig(commit_interval_ms=COMMIT_INTERVAL_MS))


def server_config() -> ServerConfig:
    return ServerConfig(fetch_wait_ms_max=500)


@pytest.fixture
async def cluster() -> AsyncIterator[KafkaCluster]:
    coordinator = InMemoryBatchCoordinator()
    async with KafkaCluster(
        MemoryObjectStore(),
        coordinator,
        brokers=3,
        racks=3,
        broker_config=broker_config(),
        server_config=server_config(),
    ) as running:
        yield running
    await coordinator.close()
