"""A broker that leaves cleanly is withdrawn from the coordinator's registry for good, even when
a renewal of its registration is still under way as it leaves; a cluster that closes withdraws
all of its brokers, so that new incarnations of their ids start at once."""

from __future__ import annotations

import asyncio

from diskless.coordinator import InMemoryBatchCoordinator
from diskless.errors import BrokerIdInUseError
from diskless.kafka_server._coordination.cluster_view import BrokerAddress, ClusterView
from testkit.cluster import local_cluster

ADDRESS = BrokerAddress(1, "127.0.0.1", 9092, None)


class HeldRenewals(InMemoryBatchCoordinator):
    """Holds the next registration (not a withdrawal) before it reaches the store, until
    released: a renewal in flight."""

    def __init__(self) -> None:
        super().__init__()
        self.holding = False
        self.held = asyncio.Event()
        self.released = asyncio.Event()

    async def announce_broker(
        self, broker_id: int, broker_epoch: int, host: str, port: int, rack: str | None,
        ttl_ms: int,
    ) -> bool:  # fmt: skip
        if self.holding and ttl_ms > 0:
            self.holding = False
            self.held.set()
            await self.released.wait()
        return await super().announce_broker(broker_id, broker_epoch, host, port, rack, ttl_ms)


async def test_a_renewal_under_way_when_the_broker_leaves_does_not_outlive_its_withdrawal() -> None:
    coordinator = HeldRenewals()
    view = ClusterView("c", coordinator)
    try:
        epoch = await coordinator.register_broker(ADDRESS.broker_id)
        view.join(ADDRESS, epoch)
        await view.start()
        assert [r.broker_id for r in await coordinator.live_brokers()] == [1]
        coordinator.holding = True
        renewal = asyncio.create_task(view.renew())
        await coordinator.held.wait()
        view.leave(ADDRESS.broker_id)  # a clean stop: leave, then withdraw
        withdrawal = asyncio.create_task(view.withdraw(ADDRESS, epoch))
        await asyncio.sleep(0.05)  # the withdrawal reaches the store first, unless it waits
        coordinator.released.set()
        await asyncio.gather(renewal, withdrawal)
        assert await coordinator.live_brokers() == []
        # A new incarnation of the id starts at once, as after any clean stop.
        assert await coordinator.register_broker(ADDRESS.broker_id, exclusive=True) == epoch + 1
    finally:
        await view.close()
        await coordinator.close()


async def test_a_broker_that_left_is_not_announced_again_by_a_later_renewal() -> None:
    coordinator = HeldRenewals()
    view = ClusterView("c", coordinator)
    try:
        epoch = await coordinator.register_broker(ADDRESS.broker_id)
        view.join(ADDRESS, epoch)
        await view.start()
        view.leave(ADDRESS.broker_id)
        await view.withdraw(ADDRESS, epoch)
        await view.renew()
        assert await coordinator.live_brokers() == []
    finally:
        await view.close()
        await coordinator.close()


async def test_a_withdrawal_leaves_a_newer_incarnation_registered() -> None:
    """Only the same incarnation's registration is withdrawn (by its epoch)."""
    coordinator = InMemoryBatchCoordinator()
    old_view, new_view = ClusterView("c", coordinator), ClusterView("c", coordinator)
    try:
        old = await coordinator.register_broker(ADDRESS.broker_id)
        new = await coordinator.register_broker(ADDRESS.broker_id)
        new_view.join(ADDRESS, new)
        await new_view.start()
        await old_view.withdraw(ADDRESS, old)
        assert [(r.broker_id, r.broker_epoch) for r in await coordinator.live_brokers()] == [
            (1, new)
        ]
        try:
            await coordinator.register_broker(ADDRESS.broker_id, exclusive=True)
            raise AssertionError("the newer incarnation's registration was withdrawn")
        except BrokerIdInUseError:
            pass
    finally:
        await new_view.close()
        await old_view.close()
        await coordinator.close()


async def test_a_cluster_leaving_its_context_is_unregistered_and_its_ids_start_at_once() -> None:
    coordinator = InMemoryBatchCoordinator()
    try:
        async with local_cluster(coordinator, brokers=2) as cluster:
            await cluster.view.renew()
            assert sorted(r.broker_id for r in await coordinator.live_brokers()) == [0, 1]
        assert await coordinator.live_brokers() == []
        for broker_id in (0, 1):  # exclusive: refused while an old registration is live
            assert await coordinator.register_broker(broker_id, exclusive=True) == 2
    finally:
        await coordinator.close()
