"""Conformance: a topic's config replaced after its creation (`alter_topic_config`), on every
backend.

The new config is what every later read and rule sees: `describe_topics`, retention (which
deletes what the new `retention.ms` no longer keeps), and the timestamps of reads; the change
feed names the topic, and the config version grows, so that brokers drop what they cached of
it. With `expected`, a change
decided on a config that another change has replaced since changes nothing and answers the
config in force.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

import msgspec
import pytest

from diskless._types import ErrorCode, TimestampType, TopicPartition
from diskless.clock import ManualClock
from diskless.coordinator import (
    BatchCoordinator,
    ConfigResourceType,
    ListOffsetsRequest,
    PartitionChanges,
    TopicConfig,
)
from testkit.backends import open_coordinator
from testkit.commits import Committer, batch

TP = TopicPartition("configured", 0)
KEPT = TopicConfig(retention_ms=-1, inapplicable_configs=(("segment.bytes", "1000"),))


async def test_a_replaced_config_is_described_and_kept_whole(
    coordinator: BatchCoordinator,
) -> None:
    await coordinator.create_topic("configured", 2, KEPT)
    changed = msgspec.structs.replace(
        KEPT,
        retention_ms=60_000,
        retention_bytes=1 << 20,
        max_message_bytes=1000,
        timestamp_type=TimestampType.LOG_APPEND_TIME,
        inapplicable_configs=(("min.insync.replicas", "2"),),
    )
    assert await coordinator.alter_topic_config("configured", changed) == changed
    (described,) = await coordinator.describe_topics(["configured"])
    assert described.config == changed and described.partitions == 2
    assert await coordinator.config_version() == 1
    # Unchanged: answered as in force, nothing changed, the version kept.
    assert await coordinator.alter_topic_config("configured", changed) == changed
    assert await coordinator.config_version() == 1


async def test_an_unknown_topic_has_no_config_to_replace(coordinator: BatchCoordinator) -> None:
    assert await coordinator.alter_topic_config("nowhere", KEPT) is None
    assert await coordinator.describe_topics(["nowhere"]) == []


async def test_a_change_decided_on_a_replaced_config_changes_nothing(
    coordinator: BatchCoordinator,
) -> None:
    await coordinator.create_topic("configured", 1, KEPT)
    first = msgspec.structs.replace(KEPT, retention_ms=1000)
    second = msgspec.structs.replace(KEPT, retention_bytes=2000)
    assert await coordinator.alter_topic_config("configured", first, expected=KEPT) == first
    # Decided on KEPT, which `first` replaced: refused, `first` answered.
    assert await coordinator.alter_topic_config("configured", second, expected=KEPT) == first
    (described,) = await coordinator.describe_topics(["configured"])
    assert described.config == first


async def test_retention_follows_the_new_config(
    coordinator: BatchCoordinator, clock: ManualClock
) -> None:
    await coordinator.create_topic("configured", 1, KEPT)
    committer = Committer(coordinator)
    now = clock.now_ms()
    await committer.commit([batch(TP, ts=now - 10_000, count=5), batch(TP, ts=now, count=5)])
    assert (await coordinator.enforce_retention()).batches_deleted == 0  # kept forever
    shorter = msgspec.structs.replace(KEPT, retention_ms=5_000)
    assert await coordinator.alter_topic_config("configured", shorter) == shorter
    assert (await coordinator.enforce_retention()).batches_deleted == 1
    (start,) = await coordinator.list_offsets([ListOffsetsRequest(TP, -2)])
    assert start.error is ErrorCode.NONE and start.offset == 5


async def test_the_feed_names_the_reconfigured_topic(coordinator: BatchCoordinator) -> None:
    await coordinator.create_topic("configured", 1, KEPT)
    heard: list[PartitionChanges] = []
    stop = coordinator.watch_changes(heard.append)
    await coordinator.alter_topic_config(
        "configured", msgspec.structs.replace(KEPT, retention_ms=1)
    )
    stop()
    assert PartitionChanges(topics=frozenset({"configured"})) in heard


@pytest.mark.parametrize("backend", ["sqlite", "postgres"])
async def test_another_coordinator_reads_the_new_config(backend: str, tmp_path: Path) -> None:
    clock = ManualClock()
    writer = open_coordinator(backend, tmp_path, clock)
    reader = open_coordinator(backend, tmp_path, clock)
    try:
        await writer.create_topic("configured", 1, KEPT)
        await reader.describe_topics(["configured"])
        changed = msgspec.structs.replace(KEPT, retention_ms=42)
        await writer.alter_topic_config("configured", changed)
        (described,) = await reader.describe_topics(["configured"])
        assert described.config == changed
    finally:
        await reader.close()
        await writer.close()


# --- dynamic configs of brokers and groups ------------------------------------------------------
BROKER = ConfigResourceType.BROKER
GROUP = ConfigResourceType.GROUP


async def test_a_resources_configs_are_replaced_whole_and_versioned(
    coordinator: BatchCoordinator,
) -> None:
    assert await coordinator.config_version() == 0
    assert await coordinator.describe_resource_configs(GROUP) == {}
    first = {"consumer.session.timeout.ms": "50000"}
    assert await coordinator.alter_resource_configs(GROUP, "g", first) == first
    assert await coordinator.config_version() == 1
    # The same resource name of another type is another resource.
    assert await coordinator.alter_resource_configs(BROKER, "", {"log.retention.ms": "1"}) == {
        "log.retention.ms": "1"
    }
    second = {"consumer.heartbeat.interval.ms": "6000"}
    assert await coordinator.alter_resource_configs(GROUP, "g", second) == second
    assert await coordinator.describe_resource_configs(GROUP) == {"g": second}
    assert await coordinator.describe_resource_configs(GROUP, ["g", "h"]) == {"g": second}
    assert await coordinator.describe_resource_configs(BROKER) == {"": {"log.retention.ms": "1"}}
    version = await coordinator.config_version()
    assert version == 3
    # Unchanged: no step, no new version.
    assert await coordinator.alter_resource_configs(GROUP, "g", second) == second
    assert await coordinator.config_version() == version
    # Empty: the resource has none left.
    assert await coordinator.alter_resource_configs(GROUP, "g", {}) == {}
    assert await coordinator.describe_resource_configs(GROUP) == {}
    assert await coordinator.config_version() == version + 1


async def test_a_resource_change_decided_on_replaced_configs_changes_nothing(
    coordinator: BatchCoordinator,
) -> None:
    await coordinator.alter_resource_configs(BROKER, "1", {"a": "1"})
    assert await coordinator.alter_resource_configs(BROKER, "1", {"a": "2"}, {"a": "1"}) == {
        "a": "2"
    }
    assert await coordinator.alter_resource_configs(BROKER, "1", {"a": "3"}, {"a": "1"}) == {
        "a": "2"
    }
    assert await coordinator.describe_resource_configs(BROKER, ["1"]) == {"1": {"a": "2"}}
    # Decided on "none yet", when there were some.
    assert await coordinator.alter_resource_configs(BROKER, "1", {"b": "1"}, {}) == {"a": "2"}


@pytest.mark.parametrize("backend", ["sqlite", "postgres"])
async def test_another_coordinator_reads_a_resources_configs(backend: str, tmp_path: Path) -> None:
    clock = ManualClock()
    writer = open_coordinator(backend, tmp_path, clock)
    reader = open_coordinator(backend, tmp_path, clock)
    try:
        await writer.alter_resource_configs(GROUP, "g", {"share.auto.offset.reset": "earliest"})
        assert await reader.config_version() == 1
        assert await reader.describe_resource_configs(GROUP, ["g"]) == {
            "g": {"share.auto.offset.reset": "earliest"}
        }
    finally:
        await reader.close()
        await writer.close()


async def test_another_postgresql_coordinator_hears_the_reconfigured_topic(tmp_path: Path) -> None:
    clock = ManualClock()
    writer = open_coordinator("postgres", tmp_path, clock)
    watcher = open_coordinator("postgres", tmp_path, clock)
    try:
        await writer.create_topic("configured", 1, KEPT)
        await watcher.describe_topics(["configured"])
        heard: list[PartitionChanges] = []
        arrived = asyncio.Event()

        def hear(changes: PartitionChanges) -> None:
            heard.append(changes)
            arrived.set()

        watcher.watch_changes(hear)
        await asyncio.wait_for(arrived.wait(), 20)  # connecting tells "everything"
        arrived.clear()
        await writer.alter_topic_config("configured", msgspec.structs.replace(KEPT, retention_ms=7))
        await asyncio.wait_for(arrived.wait(), 20)
        assert PartitionChanges(topics=frozenset({"configured"})) in heard
    finally:
        await watcher.close()
        await writer.close()
