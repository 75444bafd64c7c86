"""Unit: the share groups' figures per group and partition (`metrics_share`) match the state a few
coordinator steps left, on every coordinator backend: records by state (available counting the
records past the share-partition's end up to the high watermark), a lock that ran out counted as
released, records delivered again, and the cardinality bounds of the lag applied to them."""

from __future__ import annotations

from pathlib import Path

import pytest
from prometheus_client import CollectorRegistry, Metric, generate_latest

from diskless import ManualClock, TopicPartition
from diskless.coordinator import (
    AcknowledgeBatch,
    AcknowledgeType,
    BatchCoordinator,
    ShareFetchPartition,
    ShareLimits,
)
from diskless.kafka_server._server.metrics.metrics_share import ShareTracker
from testkit.backends import BACKENDS, open_coordinator
from testkit.commits import Committer, batch
from testkit.metrics import promtool_check, value

GROUP = "queue"
TP0 = TopicPartition("t", 0)
TP1 = TopicPartition("t", 1)
LIMITS = ShareLimits(delivery_count_limit=3, lock_duration_ms=1_000, max_record_locks=100)
ACCEPT, RELEASE, REJECT = AcknowledgeType.ACCEPT, AcknowledgeType.RELEASE, AcknowledgeType.REJECT


class _Families:
    """A registry that serves what the tracker yields."""

    def __init__(self, tracker: ShareTracker) -> None:
        self.tracker = tracker

    def collect(self) -> list[Metric]:
        return list(self.tracker.families())


async def _scraped(tracker: ShareTracker) -> str:
    await tracker.refresh()
    registry = CollectorRegistry(auto_describe=False)
    registry.register(_Families(tracker))  # type: ignore[arg-type]
    text = generate_latest(registry).decode()
    promtool_check(text)
    return text


def _records(text: str, tp: TopicPartition, group: str = GROUP) -> dict[str, float | None]:
    labels = {"group": group, "topic": tp.topic, "partition": str(tp.partition)}
    out = {
        s: value(text, "diskless_share_records", state=s, **labels)
        for s in ("available", "acquired", "acknowledged", "archived")
    }
    out["redelivered"] = value(text, "diskless_share_records_redelivered", **labels)
    return out


def _fetch(tp: TopicPartition, n: int) -> ShareFetchPartition:
    return ShareFetchPartition(tp, n, 20, log_start=0, initial_start=0)


async def _steps(coordinator: BatchCoordinator) -> None:
    """20 records in each partition; a takes 0-4 and b 5-7 of partition 0, a accepts 0-1,
    releases 2, rejects 3 and keeps 4; c takes 0-1 of partition 1."""
    await coordinator.create_topic("t", 2)
    committer = Committer(coordinator)
    await committer.commit([batch(TP0, count=20), batch(TP1, count=20)])
    await coordinator.acquire_share_records(GROUP, "a", [_fetch(TP0, 5)], LIMITS)
    await coordinator.acquire_share_records(GROUP, "b", [_fetch(TP0, 3)], LIMITS)
    acks = [
        AcknowledgeBatch(0, 1, (ACCEPT,)),
        AcknowledgeBatch(2, 3, (RELEASE, REJECT)),
    ]
    answer = await coordinator.acknowledge_share_records(GROUP, "a", {TP0: acks}, LIMITS)
    assert answer == {TP0: 0}
    await coordinator.acquire_share_records(GROUP, "c", [_fetch(TP1, 2)], LIMITS)


@pytest.mark.parametrize("backend", BACKENDS)
async def test_share_figures_follow_the_coordinators_state(backend: str, tmp_path: Path) -> None:
    clock = ManualClock(1_700_000_000.0)
    coordinator = open_coordinator(backend, tmp_path, clock)
    try:
        await _steps(coordinator)
        tracker = ShareTracker(
            coordinator,
            lambda: [GROUP, "no-share-state"],
            groups_max=10,
            partitions_max=10,
            limits=LIMITS,
            clock=clock,
            interval_s=0.0,
        )
        text = await _scraped(tracker)
        # 0-1 accepted (the start passed them), 2 available again, 3 archived, 4-7 in flight,
        # 8-19 never delivered.
        assert _records(text, TP0) == {
            "available": 1 + 12,
            "acquired": 4,
            "acknowledged": 0,
            "archived": 1,
            "redelivered": 0,
        }
        assert _records(text, TP1)["available"] == 18
        assert _records(text, TP1)["acquired"] == 2
        assert value(text, "diskless_share_groups_omitted") == 0
        await clock.advance(1.0)  # every lock runs out, by the coordinator's clock
        await coordinator.acquire_share_records(GROUP, "d", [_fetch(TP0, 2)], LIMITS)
        text = await _scraped(tracker)
        assert _records(text, TP0) == {  # d holds 2 and 4 again; 5-7 available again
            "available": 3 + 12,
            "acquired": 2,
            "acknowledged": 0,
            "archived": 1,
            "redelivered": 2,
        }
        assert _records(text, TP1)["acquired"] == 0
        assert value(text, "diskless_share_refresh_failures_total") == 0
    finally:
        await coordinator.close()


async def test_share_figures_stay_within_the_bounds(tmp_path: Path) -> None:
    clock = ManualClock(1_700_000_000.0)
    coordinator = open_coordinator("memory", tmp_path, clock)
    try:
        await _steps(coordinator)
        await coordinator.acquire_share_records("other", "x", [_fetch(TP0, 1)], LIMITS)
        tracker = ShareTracker(
            coordinator,
            lambda: ["other", GROUP],
            groups_max=1,
            partitions_max=0,
            limits=LIMITS,
            clock=clock,
            interval_s=0.0,
        )
        text = await _scraped(tracker)
        assert value(text, "diskless_share_groups_omitted") == 1  # the second in name order
        assert _records(text, TP0, group="other")["acquired"] is None  # no series of its own...
        summed = {
            s: value(
                text,
                "diskless_share_records",
                group="other",
                topic="__other__",
                partition="__other__",
                state=s,
            )
            for s in ("available", "acquired")
        }
        assert summed == {"available": 19, "acquired": 1}  # ...summed instead
        assert _records(text, TP0)["available"] is None  # GROUP left out
    finally:
        await coordinator.close()
