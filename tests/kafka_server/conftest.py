"""A local diskless cluster on ephemeral 127.0.0.1 ports, started in-process for each test
(`testkit.cluster`)."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from diskless.kafka_server import KafkaCluster
from testkit.cluster import local_cluster, server_config


@pytest.fixture
async def cluster() -> AsyncIterator[KafkaCluster]:
    async with local_cluster(brokers=3, racks=3, server_config=server_config()) as running:
        yield running
