"""One leader epoch for the whole cluster: every process advertises the coordinator's
membership version, whenever it joined, and the epoch never goes back.

- Unit (`ClusterView`s over one coordinator, as processes are): views that joined at
  different times, after a view of brokers that came and went, advertise the same epoch once
  each read the registry; a view whose broker joined, left (unannounced) or lapsed is one
  ahead until the registry records the change, and then equal again.
- Integration (`test_leader_epochs_processes`): real broker processes.
"""

from __future__ import annotations

from diskless import ManualClock
from diskless.coordinator import InMemoryBatchCoordinator
from diskless.kafka_server._coordination.cluster_view import BrokerAddress, ClusterView

TTL_MS = 9_000


def _address(broker_id: int) -> BrokerAddress:
    return BrokerAddress(broker_id, "127.0.0.1", 9000 + broker_id, None)


async def _join(view: ClusterView, coordinator: InMemoryBatchCoordinator, broker_id: int) -> None:
    view.join(_address(broker_id), await coordinator.register_broker(broker_id))
    await view.renew()


async def _renewing(clock: ManualClock, view: ClusterView, seconds: float) -> None:
    """`seconds` pass while `view`'s process renews as it does (every third of the TTL)."""
    for _ in range(int(seconds * 1000 // (TTL_MS // 3))):
        await clock.advance(TTL_MS / 3000)
        await view.renew()


async def test_views_that_joined_at_different_times_advertise_one_epoch() -> None:
    clock = ManualClock()
    coordinator = InMemoryBatchCoordinator(clock=clock)
    first, second, third = (ClusterView("c", coordinator, ttl_ms=TTL_MS) for _ in range(3))
    try:
        await _join(first, coordinator, 0)
        # Brokers come and go in `first`'s process: each change moves its epoch.
        seen = [first.generation]
        await _join(first, coordinator, 1)
        seen.append(first.generation)
        first.leave(1)
        seen.append(first.generation)  # ahead of the registry, which still lists 1
        await first.withdraw(_address(1), 1)
        await first.renew()
        seen.append(first.generation)
        assert seen == sorted(seen) and seen[1] > seen[0] and seen[2] > seen[1]
        assert seen[3] == seen[2], "the registry recorded the change the view was ahead by"

        await _renewing(clock, first, 30.0)  # a process that starts later
        await _join(second, coordinator, 2)
        await first.renew()
        assert first.generation == second.generation > seen[-1]

        # A third process that only reads (its broker not yet announced) agrees too.
        await third.renew()
        assert third.generation == first.generation

        # `second`'s process dies: once its registration expires and a renewal of `first`
        # records that, both remaining views advertise the same, higher epoch.
        before = first.generation
        await _renewing(clock, first, TTL_MS / 1000 + 3)
        await third.renew()
        assert [b.broker_id for b in first.brokers()] == [0]
        assert first.generation == third.generation > before
    finally:
        for view in (first, second, third):
            await view.close()
        await coordinator.close()


async def test_a_view_behind_catches_up_when_asked() -> None:
    coordinator = InMemoryBatchCoordinator()
    early, late = ClusterView("c", coordinator), ClusterView("c", coordinator)
    try:
        await _join(early, coordinator, 0)
        await _join(late, coordinator, 1)
        assert late.generation > early.generation
        early.catch_up()  # as a client showing `late`'s epoch to `early` does
        early.catch_up()  # (one read at a time)
        await early.close()  # waits for the read under way
        assert early.generation == late.generation
    finally:
        await early.close()
        await late.close()
        await coordinator.close()
