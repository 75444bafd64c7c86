"""Conformance: one coordinator per consumer group, recorded in the batch coordinator.

A group is owned by a broker incarnation. Ownership moves only once the owner's registration is
no longer live, and the generation carries over to the next owner; offset commits are fenced by
the owner and the generation in the step that stores them (every backend).
"""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from diskless import ManualClock
from diskless._types import CommittedOffset, ErrorCode, GroupOwnership, TopicPartition
from diskless.coordinator import BatchCoordinator
from diskless.coordinator._engine.consumer_groups import GROUP_STATE_BYTES_MAX
from diskless.txn import PendingOffset
from testkit.backends import BACKENDS, open_coordinator

TTL_MS = 10_000
TP = TopicPartition("t", 0)
OK = ErrorCode.NONE


async def _live(coordinator: BatchCoordinator, broker_id: int, ttl_ms: int = TTL_MS) -> int:
    epoch = await coordinator.register_broker(broker_id)
    assert await coordinator.announce_broker(broker_id, epoch, "h", 9000 + broker_id, None, ttl_ms)
    return epoch


async def test_the_first_claim_takes_the_group_and_later_ones_find_its_owner(
    coordinator: BatchCoordinator,
) -> None:
    one, two = await _live(coordinator, 1), await _live(coordinator, 2)
    assert await coordinator.group_ownership("g") is None
    assert await coordinator.claim_group("g", 1, one) == GroupOwnership(1, one, 0)
    # A broker joining the cluster does not take the group from a live owner.
    assert await coordinator.claim_group("g", 2, two) == GroupOwnership(1, one, 0)
    assert await coordinator.group_ownership("g") == GroupOwnership(1, one, 0)


async def test_ownership_moves_only_once_the_owner_is_gone_and_keeps_the_generation(
    coordinator: BatchCoordinator, clock: ManualClock
) -> None:
    one = await _live(coordinator, 1)
    two = await _live(coordinator, 2, ttl_ms=10 * TTL_MS)
    owner = await coordinator.claim_group("g", 1, one)
    assert owner is not None
    assert await coordinator.store_group_generation("g", owner._replace(generation=3)) == OK
    await clock.advance(TTL_MS / 1000)  # broker 1 stopped renewing: its registration expired
    assert await coordinator.claim_group("g", 2, two) == GroupOwnership(2, two, 3)
    # The old owner learns it from the coordinator: its next generation is refused.
    assert await coordinator.store_group_generation("g", GroupOwnership(1, one, 4)) == (
        ErrorCode.NOT_COORDINATOR
    )
    # A new incarnation of an owner is a new owner too.
    await clock.advance(TTL_MS / 1000)
    three = await _live(coordinator, 1)
    assert await coordinator.claim_group("g", 1, three) == GroupOwnership(2, two, 3)
    newer = await _live(coordinator, 2)  # broker 2 restarted: its old epoch's ownership died
    assert await coordinator.claim_group("g", 1, three) == GroupOwnership(1, three, 3)
    assert await coordinator.claim_group("g", 2, newer) == GroupOwnership(1, three, 3)


@pytest.mark.parametrize("backend", [b for b in BACKENDS if b != "memory"])
async def test_first_claims_racing_from_two_processes_agree_on_one_owner(
    backend: str, tmp_path: Path
) -> None:
    """Two processes claim new groups for different brokers at once: each group gets one
    owner, and both claimants are told the same one (no claim overwrites another)."""
    clock = ManualClock()
    first = open_coordinator(backend, tmp_path, clock)
    second = open_coordinator(backend, tmp_path, clock)  # another broker process
    try:
        one, two = await _live(first, 1), await _live(first, 2)
        groups = [f"g{i}" for i in range(40)]
        claims = await asyncio.gather(
            *(
                claim
                for group in groups
                for claim in (first.claim_group(group, 1, one), second.claim_group(group, 2, two))
            )
        )
        for i, group in enumerate(groups):
            stored = await second.group_ownership(group)
            assert claims[2 * i] == claims[2 * i + 1] == stored, group
    finally:
        await first.close()
        await second.close()


async def test_no_owner_when_no_claimant_is_live(
    coordinator: BatchCoordinator, clock: ManualClock
) -> None:
    one = await _live(coordinator, 1)
    await clock.advance(TTL_MS / 1000)
    assert await coordinator.claim_group("g", 1, one) is None
    assert await coordinator.group_ownership("g") is None


async def test_generations_only_grow(coordinator: BatchCoordinator) -> None:
    one = await _live(coordinator, 1)
    owner = await coordinator.claim_group("g", 1, one)
    assert owner is not None
    assert await coordinator.store_group_generation("g", owner._replace(generation=2)) == OK
    assert await coordinator.store_group_generation("g", owner._replace(generation=2)) == (
        ErrorCode.ILLEGAL_GENERATION
    )
    assert await coordinator.group_ownership("g") == GroupOwnership(1, one, 2)


async def test_offset_commits_are_fenced_by_owner_and_generation(
    coordinator: BatchCoordinator, clock: ManualClock
) -> None:
    assert await coordinator.create_topic("t", 1) is ErrorCode.NONE
    one = await _live(coordinator, 1)
    two = await _live(coordinator, 2, ttl_ms=10 * TTL_MS)
    owner = await coordinator.claim_group("g", 1, one)
    assert owner is not None
    assert await coordinator.store_group_generation("g", owner._replace(generation=1)) == OK
    current = GroupOwnership(1, one, 1)
    assert await coordinator.commit_offsets("g", {TP: CommittedOffset(5, None)}, current) == {
        TP: OK
    }
    stale = GroupOwnership(1, one, 0)
    assert await coordinator.commit_offsets("g", {TP: CommittedOffset(3, None)}, stale) == {
        TP: ErrorCode.ILLEGAL_GENERATION
    }
    # An admin tool's commit names no generation; it still has to come through the owner.
    assert await coordinator.commit_offsets(
        "g", {TP: CommittedOffset(6, None)}, GroupOwnership(1, one, -1)
    ) == {TP: OK}
    await clock.advance(TTL_MS / 1000)
    assert await coordinator.claim_group("g", 2, two) == GroupOwnership(2, two, 1)
    # The old owner's commit of the generation it still believes in is refused: no offset
    # moves backwards through a process that lost the group.
    assert await coordinator.commit_offsets("g", {TP: CommittedOffset(2, None)}, current) == {
        TP: ErrorCode.NOT_COORDINATOR
    }
    assert await coordinator.fetch_offsets("g") == {TP: CommittedOffset(6, None)}


async def test_transactional_offset_commits_are_fenced_too(
    coordinator: BatchCoordinator, clock: ManualClock
) -> None:
    assert await coordinator.create_topic("t", 1) is ErrorCode.NONE
    one = await _live(coordinator, 1)
    owner = await coordinator.claim_group("g", 1, one)
    assert owner is not None
    assert await coordinator.store_group_generation("g", owner._replace(generation=1)) == OK
    step = await coordinator.txn_init("tx", 60_000)
    assert step.error == OK and step.record is not None
    pid, epoch = step.record.producer_id, step.record.producer_epoch
    assert await coordinator.txn_add_offsets("tx", pid, epoch, "g") == OK
    offsets = [PendingOffset("g", TP, 7, None)]
    fenced = await coordinator.txn_commit_offsets(
        "tx", pid, epoch, "g", offsets, GroupOwnership(1, one, 0)
    )
    assert fenced == ErrorCode.ILLEGAL_GENERATION
    assert (
        await coordinator.txn_commit_offsets(
            "tx", pid, epoch, "g", offsets, GroupOwnership(1, one + 1, 1)
        )
        == ErrorCode.NOT_COORDINATOR
    )
    record = (await coordinator.describe_txns(["tx"]))[0]
    assert record is not None and not record.pending_offsets
    current = GroupOwnership(1, one, 1)
    assert await coordinator.txn_commit_offsets("tx", pid, epoch, "g", offsets, current) == OK


async def test_a_groups_state_is_stored_by_its_owner_only_and_survives_it(
    coordinator: BatchCoordinator, clock: ManualClock
) -> None:
    """A consumer-protocol group's state is stored under its owner's fence, replaced whole, and
    found by the owner that takes the group over once the first is gone."""
    one = await _live(coordinator, 1)
    two = await _live(coordinator, 2, ttl_ms=10 * TTL_MS)
    owner = await coordinator.claim_group("g", 1, one)
    assert owner is not None and await coordinator.group_state("g") is None
    assert await coordinator.store_group_state("g", owner, b"\x00first") == OK
    assert await coordinator.store_group_state("g", owner, b"second") == OK
    assert await coordinator.group_state("g") == b"second"
    assert await coordinator.store_group_state("g", GroupOwnership(2, two, 0), b"x") == (
        ErrorCode.NOT_COORDINATOR
    ), "only the owner stores it"
    huge = b"x" * (GROUP_STATE_BYTES_MAX + 1)
    assert await coordinator.store_group_state("g", owner, huge) == ErrorCode.MESSAGE_TOO_LARGE
    await clock.advance(TTL_MS / 1000)  # broker 1 is gone
    assert await coordinator.claim_group("g", 2, two) == GroupOwnership(2, two, 0)
    assert await coordinator.group_state("g") == b"second"
    assert await coordinator.store_group_state("g", owner, b"late") == ErrorCode.NOT_COORDINATOR
    assert await coordinator.store_group_state("g", GroupOwnership(2, two, 0), b"third") == OK
    assert await coordinator.group_state("g") == b"third"
    assert await coordinator.group_state("other") is None
