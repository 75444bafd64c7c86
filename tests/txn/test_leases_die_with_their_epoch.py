"""Leases die with the broker incarnation that took them (integration, every backend).

A transaction's end waits for the leases of its batches (the commit barrier). A lease held by a
broker that was replaced by a newer incarnation, or whose registration expired, can never be
released by a commit, so the end does not wait out its TTL; the barrier is intact, since the
markers drop every lease of the transaction and a commit naming a dropped lease is refused.
"""

from __future__ import annotations

from diskless._types import ErrorCode, TopicPartition
from diskless.clock import ManualClock
from diskless.coordinator import BatchCoordinator, LeaseRequest
from testkit.commits import Committer, batch

from ._helpers import TTL_MS, end, leased

TP = TopicPartition("t", 0)
OK = ErrorCode.NONE
REGISTRATION_TTL_MS = 10_000


QUICK_MS = TTL_MS // 2
"""An end that waited less than this did not wait out the lease (nor the registrations, which
these tests make outlive it). The virtual clock also moves while a durable backend works, so
"at once" takes a few steps, more on a loaded machine: hence small steps and a wide bound."""
QUICK_STEP_S = 0.05


async def _leased_by_broker(
    coordinator: BatchCoordinator, *, announce: bool, ttl_ms: int = REGISTRATION_TTL_MS
) -> tuple[int, int]:
    """Broker 7 registers (announcing a registration for `ttl_ms` when asked) and leases a
    transactional batch of producer 1 on TP; returns (its epoch, the lease id)."""
    assert await coordinator.create_topic("t", 1) is ErrorCode.NONE
    assert await coordinator.add_partitions_to_txn(1, 0, [TP]) == [OK]
    epoch = await coordinator.register_broker(7)
    if announce:
        assert await coordinator.announce_broker(7, epoch, "h", 1, None, ttl_ms)
    (result,) = await coordinator.acquire_txn_leases(7, epoch, [LeaseRequest(TP, 1, 0)], TTL_MS)
    assert result.error == OK
    return epoch, result.lease_id


async def test_a_new_incarnation_releases_its_predecessors_leases_at_once(
    coordinator: BatchCoordinator, clock: ManualClock
) -> None:
    # The old incarnation's registration outlives the lease: only the new epoch releases it.
    old_epoch, lease_id = await _leased_by_broker(coordinator, announce=True, ttl_ms=2 * TTL_MS)
    assert await coordinator.register_broker(7) == old_epoch + 1
    started = clock.now_ms()
    assert await end(coordinator, clock, 1, 0, True, [TP], step_s=QUICK_STEP_S) == [OK]
    assert clock.now_ms() - started < QUICK_MS
    # The barrier holds: the old incarnation's batch can no longer land after the marker.
    late = await Committer(coordinator, broker_id=8).one(
        leased(batch(TP, pid=1, epoch=0, seq=0, txn=True), lease_id)
    )
    assert late.error != OK


async def test_an_expired_registration_releases_its_leases(
    coordinator: BatchCoordinator, clock: ManualClock
) -> None:
    await _leased_by_broker(coordinator, announce=True)
    started = clock.now_ms()
    assert await end(coordinator, clock, 1, 0, False, [TP], step_s=0.5) == [OK]
    waited = clock.now_ms() - started
    assert REGISTRATION_TTL_MS <= waited < TTL_MS


async def test_a_renewed_registration_keeps_its_leases_alive_until_their_ttl(
    coordinator: BatchCoordinator, clock: ManualClock
) -> None:
    epoch, _ = await _leased_by_broker(coordinator, announce=True)
    # Renewed for longer than the lease itself lives: only the lease's TTL ends the wait.
    assert await coordinator.announce_broker(7, epoch, "h", 1, None, 2 * TTL_MS)
    started = clock.now_ms()
    assert await end(coordinator, clock, 1, 0, False, [TP], step_s=0.5) == [OK]
    assert clock.now_ms() - started >= TTL_MS


async def test_a_broker_without_a_registration_keeps_its_leases_until_their_ttl(
    coordinator: BatchCoordinator, clock: ManualClock
) -> None:
    """A library user's broker announces nothing: its leases end by their TTL only."""
    await _leased_by_broker(coordinator, announce=False)
    started = clock.now_ms()
    assert await end(coordinator, clock, 1, 0, False, [TP], step_s=0.5) == [OK]
    assert clock.now_ms() - started >= TTL_MS


async def test_a_live_holder_releases_by_committing_its_batch(
    coordinator: BatchCoordinator, clock: ManualClock
) -> None:
    epoch, lease_id = await _leased_by_broker(coordinator, announce=True, ttl_ms=2 * TTL_MS)
    committer = Committer(coordinator, broker_id=7)
    committer.epoch = epoch
    landed = await committer.one(leased(batch(TP, pid=1, epoch=0, seq=0, txn=True), lease_id))
    assert landed.error == OK
    started = clock.now_ms()
    assert await end(coordinator, clock, 1, 0, True, [TP], step_s=QUICK_STEP_S) == [OK]
    assert clock.now_ms() - started < QUICK_MS


async def test_a_registration_renewed_after_it_lapsed_does_not_revive_its_leases(
    coordinator: BatchCoordinator, clock: ManualClock
) -> None:
    """A broker cut off from the coordinator past its registration renews it, at the same
    epoch, once the link is back: the leases it took before are dead from the lapse on (a
    commit naming one is refused), and an end that comes after the renewal does not wait for
    them."""
    epoch, lease_id = await _leased_by_broker(coordinator, announce=True)
    await clock.advance(REGISTRATION_TTL_MS / 1000)
    assert await coordinator.announce_broker(7, epoch, "h", 1, None, 2 * TTL_MS)
    committer = Committer(coordinator, broker_id=7)
    committer.epoch = epoch
    late = await committer.one(leased(batch(TP, pid=1, epoch=0, seq=0, txn=True), lease_id))
    assert late.error != OK
    started = clock.now_ms()
    assert await end(coordinator, clock, 1, 0, True, [TP], step_s=QUICK_STEP_S) == [OK]
    assert clock.now_ms() - started < QUICK_MS
