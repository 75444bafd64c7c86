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


async def test_the_membership_version_moves_with_the_live_set_and_never_back(
    coordinator: BatchCoordinator, clock: ManualClock
) -> None:
    """Announcing, withdrawing and replacing an incarnation move the version in their own step;
    an expiry moves it in the next announcement of any broker; a renewal of a live registration
    does not; a renewal after a lapse does."""

    async def version() -> int:
        membership = await coordinator.membership()
        assert membership.brokers == await coordinator.live_brokers()
        return membership.version

    seen = [await version()]
    one = await coordinator.register_broker(1)
    two = await coordinator.register_broker(2)
    assert await version() == seen[-1]  # registering an epoch is not a membership change
    assert await coordinator.announce_broker(1, one, "h1", 9001, None, 9_000)
    seen.append(await version())
    assert await coordinator.announce_broker(2, two, "h2", 9002, None, 3_000)
    seen.append(await version())
    assert [b.broker_id for b in (await coordinator.membership()).brokers] == [1, 2]
    assert await coordinator.announce_broker(1, one, "h1", 9001, None, 9_000)  # a renewal
    seen.append(await version())
    await clock.advance(5.0)  # 2 expired; the next announcement of anyone moves the version
    assert [b.broker_id for b in (await coordinator.membership()).brokers] == [1]
    assert await coordinator.announce_broker(1, one, "h1", 9001, None, 9_000)
    seen.append(await version())
    assert await coordinator.announce_broker(2, two, "h2", 9002, None, 3_000)  # back after a lapse
    seen.append(await version())
    two_again = await coordinator.register_broker(2)
    assert await coordinator.announce_broker(2, two_again, "h2", 9003, None, 3_000)
    seen.append(await version())
    assert await coordinator.announce_broker(2, two_again, "h2", 9003, None, 0)  # withdrawn
    seen.append(await version())
    assert not await coordinator.announce_broker(2, two, "h2", 9002, None, 3_000)  # fenced
    seen.append(await version())
    assert seen[1] > seen[0]
    assert seen[2] > seen[1]
    assert seen[3] == seen[2]
    assert seen[4] > seen[3]
    assert seen[5] > seen[4]
    assert seen[6] > seen[5]
    assert seen[7] > seen[6]
    assert seen[8] == seen[7]


async def test_a_registration_that_lapsed_and_came_back_unseen_still_moves_the_version(
    coordinator: BatchCoordinator, clock: ManualClock
) -> None:
    """No step saw broker 1 gone, but a process may have read it gone meanwhile (a read drops
    an expired registration): its renewal moves the version."""
    one = await coordinator.register_broker(1)
    assert await coordinator.announce_broker(1, one, "h1", 9001, None, 3_000)
    before = (await coordinator.membership()).version
    await clock.advance(5.0)
    assert (await coordinator.membership()).brokers == []
    assert await coordinator.announce_broker(1, one, "h1", 9001, None, 3_000)
    after = await coordinator.membership()
    assert after.version > before and [b.broker_id for b in after.brokers] == [1]


async def test_the_membership_version_is_raised_to_a_floor_and_never_lowered(
    coordinator: BatchCoordinator,
) -> None:
    """A mirror raises the version to its source's leader epoch: at least the floor, never
    lower than it was, the same again when retried; the next change of the live set moves it
    by one from there, and a renewal does not."""
    one = await coordinator.register_broker(1)
    assert await coordinator.announce_broker(1, one, "h1", 9001, None, 9_000)
    start = (await coordinator.membership()).version
    assert await coordinator.raise_membership_version(start + 40) == start + 40
    assert (await coordinator.membership()).version == start + 40
    assert await coordinator.raise_membership_version(start + 40) == start + 40  # a retry
    assert await coordinator.raise_membership_version(3) == start + 40  # never lowered
    assert (await coordinator.membership()).version == start + 40
    assert await coordinator.announce_broker(1, one, "h1", 9001, None, 9_000)  # a renewal
    assert (await coordinator.membership()).version == start + 40
    two = await coordinator.register_broker(2)
    assert await coordinator.announce_broker(2, two, "h2", 9002, None, 9_000)
    assert (await coordinator.membership()).version == start + 41
    for refused in (-1, 2**31):
        with pytest.raises(ValueError):
            await coordinator.raise_membership_version(refused)
    assert (await coordinator.membership()).version == start + 41
