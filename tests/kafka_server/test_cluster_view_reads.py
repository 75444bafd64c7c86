"""A process learns of a broker that another process started, or stopped, within about a second
(`MEMBERSHIP_READ_MS`), not at its own next renewal: until then the two would answer Metadata
with different brokers and leader epochs.

The registration TTL here is a minute, so a renewal is 20 s away: only the reads in between can
show the change within the tests' 10 s. On each backend (the two views are two processes' over
one coordinator)."""

from __future__ import annotations

import asyncio
from collections.abc import Callable

from diskless.coordinator import BatchCoordinator
from diskless.kafka_server._coordination.cluster_view import (
    MEMBERSHIP_READ_MS,
    BrokerAddress,
    ClusterView,
)

TTL_MS = 60_000
WAIT_S = 10.0
assert MEMBERSHIP_READ_MS / 1000 < WAIT_S < TTL_MS / 3000


async def _until(condition: Callable[[], bool]) -> None:
    async with asyncio.timeout(WAIT_S):
        while not condition():
            await asyncio.sleep(0.02)


async def test_a_broker_started_by_another_process_is_seen_before_the_next_renewal(
    coordinator: BatchCoordinator,
) -> None:
    first, second = ClusterView("c", coordinator, ttl_ms=TTL_MS), None
    try:
        one = BrokerAddress(1, "127.0.0.1", 9092, None)
        first.join(one, await coordinator.register_broker(1))
        await first.start()
        generation = first.generation
        second = ClusterView("c", coordinator, ttl_ms=TTL_MS)
        two = BrokerAddress(2, "127.0.0.1", 9093, None)
        second.join(two, await coordinator.register_broker(2))
        await second.start()

        await _until(lambda: first.get(2) is not None)
        assert [b.broker_id for b in first.brokers()] == [1, 2]
        assert first.generation == second.generation > generation
        generation = first.generation

        await second.close()  # a clean stop withdraws broker 2
        await _until(lambda: first.get(2) is None)
        assert [b.broker_id for b in first.brokers()] == [1]
        assert first.generation > generation
    finally:
        await first.close()
        if second is not None:
            await second.close()
