"""Conformance: cluster membership from the batch coordinator. Every broker process announces
where it listens with a liveness deadline; Metadata lists every live broker of the cluster."""

from __future__ import annotations

import pytest

from diskless import ManualClock
from diskless.coordinator import BatchCoordinator
from diskless.errors import BrokerIdInUseError


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


async def test_an_exclusive_registration_is_refused_while_another_incarnation_lives(
    coordinator: BatchCoordinator, clock: ManualClock
) -> None:
    first = await coordinator.register_broker(1, exclusive=True)
    assert await coordinator.announce_broker(1, first, "h1", 9001, None, 10_000)
    with pytest.raises(BrokerIdInUseError) as refused:
        await coordinator.register_broker(1, exclusive=True)
    assert refused.value.holder_epoch == first and not refused.value.retriable
    assert "broker id 1" in str(refused.value)
    # Nothing changed: the live incarnation still renews and commits.
    assert await coordinator.announce_broker(1, first, "h1", 9001, None, 10_000)
    # Once it stops renewing and its registration expires, a new incarnation may take the id.
    await clock.advance(10.0)
    second = await coordinator.register_broker(1, exclusive=True)
    assert second == first + 1
    assert not await coordinator.announce_broker(1, first, "h1", 9001, None, 10_000)
    # A withdrawn registration frees the id at once.
    assert await coordinator.announce_broker(1, second, "h1", 9002, None, 10_000)
    assert await coordinator.announce_broker(1, second, "h1", 9002, None, 0)
    assert await coordinator.register_broker(1, exclusive=True) == second + 1
