"""Conformance: what the coordinator holds of each consumer group (ListGroups and DescribeGroups
read it), and the deletions of DeleteGroups (a group's offsets, generation and stored state; it
keeps its coordinator) and OffsetDelete, each one step fenced by the group's owner (every
backend)."""

from __future__ import annotations

from pathlib import Path

import pytest

from diskless import ManualClock
from diskless._types import CommittedOffset, ErrorCode, GroupOwnership, GroupRecord, TopicPartition
from diskless.coordinator import BatchCoordinator
from testkit.backends import BACKENDS, open_coordinator

TTL_MS = 10_000
TP0 = TopicPartition("t", 0)
TP1 = TopicPartition("t", 1)
OTHER = TopicPartition("u", 0)
OK = ErrorCode.NONE


async def _live(coordinator: BatchCoordinator, broker_id: int, ttl_ms: int = TTL_MS) -> int:
    epoch = await coordinator.register_broker(broker_id)
    assert await coordinator.announce_broker(broker_id, epoch, "h", 9000 + broker_id, None, ttl_ms)
    return epoch


async def _owned(coordinator: BatchCoordinator, group_id: str, broker_id: int) -> GroupOwnership:
    epoch = await _live(coordinator, broker_id)
    owner = await coordinator.claim_group(group_id, broker_id, epoch)
    assert owner is not None and owner.broker_id == broker_id
    return owner


async def test_records_name_every_group_with_an_owner_or_offsets(
    coordinator: BatchCoordinator,
) -> None:
    await coordinator.create_topic("t", 2)
    assert await coordinator.group_records() == {}
    owner = await _owned(coordinator, "claimed", 1)
    await coordinator.commit_offsets("standalone", {TP0: CommittedOffset(5, None)})
    await coordinator.commit_offsets("both", {TP1: CommittedOffset(1, None)})
    both = await coordinator.claim_group("both", 1, owner.broker_epoch)
    assert both is not None
    expected = {
        "both": GroupRecord(both, has_offsets=True),
        "claimed": GroupRecord(owner, has_offsets=False),
        "standalone": GroupRecord(None, has_offsets=True),
    }
    assert await coordinator.group_records() == expected
    assert list(await coordinator.group_records()) == sorted(expected)
    assert await coordinator.group_records(["standalone", "nope", "claimed"]) == {
        "claimed": expected["claimed"],
        "standalone": expected["standalone"],
    }
    assert await coordinator.group_records([]) == {}
    # A group whose only offsets went with their topic has none left.
    await coordinator.delete_topics(["t"])
    assert await coordinator.group_records() == {"claimed": expected["claimed"]} | {
        "both": GroupRecord(both, has_offsets=False)
    }


async def test_deleting_a_group_takes_its_offsets_and_generation_in_one_fenced_step(
    coordinator: BatchCoordinator,
) -> None:
    await coordinator.create_topic("t", 2)
    owner = await _owned(coordinator, "g", 1)
    assert await coordinator.store_group_generation("g", owner._replace(generation=4)) == OK
    fence = owner._replace(generation=4)
    offsets = {TP0: CommittedOffset(3, None), TP1: CommittedOffset(8, "m")}
    assert set((await coordinator.commit_offsets("g", offsets, fence)).values()) == {OK}
    await coordinator.commit_offsets("kept", {TP0: CommittedOffset(1, None)})
    # Another incarnation, or another broker, is refused and deletes nothing.
    stale = GroupOwnership(1, owner.broker_epoch - 1, -1)
    assert await coordinator.delete_group("g", stale) == ErrorCode.NOT_COORDINATOR
    assert await coordinator.delete_group("g", GroupOwnership(2, 1, -1)) == (
        ErrorCode.NOT_COORDINATOR
    )
    assert await coordinator.fetch_offsets("g") == offsets
    assert await coordinator.delete_group("g", fence) == OK
    assert await coordinator.fetch_offsets("g") == {}
    # The group keeps its coordinator, and starts afresh.
    restarted = owner._replace(generation=0)
    assert await coordinator.group_ownership("g") == restarted
    assert await coordinator.group_records() == {
        "g": GroupRecord(restarted, has_offsets=False),
        "kept": GroupRecord(None, has_offsets=True),
    }
    two = await _live(coordinator, 2)
    assert await coordinator.claim_group("g", 2, two) == restarted
    # A commit fenced by the group's old generation is refused.
    assert set((await coordinator.commit_offsets("g", offsets, fence)).values()) == {
        ErrorCode.ILLEGAL_GENERATION
    }


async def test_deleting_a_consumer_protocol_group_takes_its_stored_state_with_its_offsets(
    coordinator: BatchCoordinator,
) -> None:
    await coordinator.create_topic("t", 1)
    owner = await _owned(coordinator, "g", 1)
    other = await _owned(coordinator, "other", 1)
    assert await coordinator.store_group_state("g", owner, b"state of g") == OK
    assert await coordinator.store_group_state("other", other, b"state of other") == OK
    await coordinator.commit_offsets("g", {TP0: CommittedOffset(3, None)}, owner)
    stale = GroupOwnership(1, owner.broker_epoch - 1, -1)
    assert await coordinator.delete_group("g", stale) == ErrorCode.NOT_COORDINATOR
    assert await coordinator.group_state("g") == b"state of g"
    assert await coordinator.delete_group("g", owner) == OK
    assert await coordinator.group_state("g") is None
    assert await coordinator.fetch_offsets("g") == {}
    assert await coordinator.group_state("other") == b"state of other"
    # A group stored anew after its deletion starts from what it stores then.
    assert await coordinator.store_group_state("g", owner, b"anew") == OK
    assert await coordinator.group_state("g") == b"anew"


async def test_deleting_offsets_takes_only_the_named_partitions(
    coordinator: BatchCoordinator,
) -> None:
    await coordinator.create_topic("t", 2)
    await coordinator.create_topic("u", 1)
    owner = await _owned(coordinator, "g", 1)
    offsets = {
        TP0: CommittedOffset(3, None),
        TP1: CommittedOffset(8, None),
        OTHER: CommittedOffset(2, None),
    }
    await coordinator.commit_offsets("g", offsets, owner._replace(generation=-1))
    await coordinator.commit_offsets("h", {TP0: CommittedOffset(9, None)})
    other_owner = GroupOwnership(2, 1, -1)
    assert await coordinator.delete_offsets("g", [TP0], other_owner) == ErrorCode.NOT_COORDINATOR
    assert await coordinator.fetch_offsets("g") == offsets
    # A partition without an offset is no error; each named partition's offset goes.
    missing = TopicPartition("t", 7)
    assert await coordinator.delete_offsets("g", [TP0, OTHER, missing, TP0], owner) == OK
    assert await coordinator.fetch_offsets("g") == {TP1: CommittedOffset(8, None)}
    assert await coordinator.fetch_offsets("h") == {TP0: CommittedOffset(9, None)}
    assert await coordinator.delete_offsets("g", [], owner) == OK
    assert await coordinator.delete_offsets("g", [TP1], owner) == OK
    assert await coordinator.group_records(["g"]) == {"g": GroupRecord(owner, has_offsets=False)}


@pytest.mark.parametrize("backend", [b for b in BACKENDS if b != "memory"])
async def test_a_deletion_is_seen_by_every_process(backend: str, tmp_path: Path) -> None:
    clock = ManualClock()
    first = open_coordinator(backend, tmp_path, clock)
    second = open_coordinator(backend, tmp_path, clock)  # another broker process
    try:
        await first.create_topic("t", 1)
        owner = await _owned(first, "g", 1)
        await first.commit_offsets("g", {TP0: CommittedOffset(4, None)}, owner)
        assert await second.group_records() == {"g": GroupRecord(owner, has_offsets=True)}
        assert await second.delete_group("g", owner) == OK
        assert await first.group_records() == {"g": GroupRecord(owner, has_offsets=False)}
        assert await first.fetch_offsets("g") == {}
        assert await second.store_group_state("g", owner, b"state") == OK
        assert await first.group_state("g") == b"state"
        assert await first.delete_group("g", owner) == OK
        assert await second.group_state("g") is None
    finally:
        await first.close()
        await second.close()
