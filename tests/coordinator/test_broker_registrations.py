"""Conformance: cluster membership from the batch coordinator. Every broker process announces
where it listens with a liveness deadline; Metadata lists every live broker of the cluster."""

from __future__ import annotations

from diskless import ManualClock
from diskless.coordinator import BatchCoordinator


async def test_live_brokers_expire_unless_renewed_and_a_stale_epoch_cannot_announce(
    coordinator: BatchCoordinator, clock: ManualClock
) -> None:
    first = await coordinator.register_broker(1)
    two = await coordinator.register_broker(2)
    assert await coordinator.announce_broker(1, first, "h1", 9001, "rack-a", 10_000)
    assert await coordinator.announce_broker(2, two, "h2", 9002, None, 3_000)
    assert [(b.broker_id, b.host, b.port, b.rack) for b in await coordinator.live_brokers()] == [
        (1, "h1", 9001, "rack-a"),
        (2, "h2", 9002, None),
    ]
    await clock.advance(5.0)
    assert [b.broker_id for b in await coordinator.live_brokers()] == [1]
    # A restarted broker 1 fences its old incarnation, which can no longer announce itself.
    second = await coordinator.register_broker(1)
    assert not await coordinator.announce_broker(1, first, "old", 1, None, 10_000)
    assert await coordinator.announce_broker(1, second, "h1b", 9003, "rack-a", 10_000)
    (live,) = await coordinator.live_brokers()
    assert (live.broker_epoch, live.host) == (second, "h1b")
    # A clean shutdown withdraws at once.
    assert await coordinator.announce_broker(1, second, "h1b", 9003, "rack-a", 0)
    assert await coordinator.live_brokers() == []
