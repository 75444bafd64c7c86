"""Conformance: committed consumer-group offsets are stored by the batch coordinator, shared by
every process using it and durable on the durable backend (Kafka's __consumer_offsets)."""

from __future__ import annotations

from pathlib import Path

import pytest

from diskless import ErrorCode, ManualClock, TopicPartition
from diskless.coordinator import BatchCoordinator, CommittedOffset
from testkit.backends import BACKENDS, open_coordinator

TP0 = TopicPartition("t", 0)
TP1 = TopicPartition("t", 1)


async def test_commit_and_fetch(coordinator: BatchCoordinator) -> None:
    await coordinator.create_topic("t", 2)
    assert await coordinator.fetch_offsets("g") == {}
    unknown = TopicPartition("nope", 0)
    answers = await coordinator.commit_offsets(
        "g", {TP0: CommittedOffset(7, "m"), unknown: CommittedOffset(1, None)}
    )
    assert answers == {TP0: ErrorCode.NONE, unknown: ErrorCode.UNKNOWN_TOPIC_OR_PARTITION}
    await coordinator.commit_offsets(
        "g", {TP0: CommittedOffset(9, None), TP1: CommittedOffset(2, "x")}
    )
    await coordinator.commit_offsets("other", {TP0: CommittedOffset(1, None)})
    assert await coordinator.fetch_offsets("g") == {
        TP0: CommittedOffset(9, None),
        TP1: CommittedOffset(2, "x"),
    }
    assert await coordinator.fetch_offsets("other") == {TP0: CommittedOffset(1, None)}


async def test_offsets_of_a_deleted_topic_go_with_it(coordinator: BatchCoordinator) -> None:
    await coordinator.create_topic("t", 1)
    await coordinator.create_topic("u", 1)
    keep = TopicPartition("u", 0)
    await coordinator.commit_offsets(
        "g", {TP0: CommittedOffset(3, None), keep: CommittedOffset(4, None)}
    )
    await coordinator.delete_topics(["t"])
    await coordinator.create_topic("t", 1)  # a new topic of the same name starts without them
    assert await coordinator.fetch_offsets("g") == {keep: CommittedOffset(4, None)}


@pytest.mark.parametrize("backend", [b for b in BACKENDS if b != "memory"])
async def test_offsets_survive_a_restart_and_are_shared(backend: str, tmp_path: Path) -> None:
    first = open_coordinator(backend, tmp_path, ManualClock())
    second = open_coordinator(backend, tmp_path, ManualClock())  # another broker process
    try:
        await first.create_topic("t", 1)
        await first.commit_offsets("g", {TP0: CommittedOffset(11, "meta")})
        assert await second.fetch_offsets("g") == {TP0: CommittedOffset(11, "meta")}
    finally:
        await first.close()
        await second.close()
    reopened = open_coordinator(backend, tmp_path, ManualClock())
    try:
        assert await reopened.fetch_offsets("g") == {TP0: CommittedOffset(11, "meta")}
    finally:
        await reopened.close()
