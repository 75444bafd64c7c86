"""Share groups' queues (KIP-932) per group and partition, computed when a scrape asks, at a
bounded cost, as the consumer lag is (`metrics_lag`).

A share-partition's state is one value in the batch coordinator (`_rules.share`), held by no
broker; the process that coordinates a share group reports it, so each share-partition has one
series in a cluster. A refresh reads each group's share-partition states (one read per group) and
the high watermarks of their partitions (one `list_offsets` call); it runs at most every
`interval_s` (later scrapes reuse it), gives up after `timeout_s` keeping the previous figures,
and stays within the lag's bounds: `groups_max` groups, `partitions_max` share-partitions with
series of their own (the rest of a group's summed under `topic="__other__",
partition="__other__"`). The records are counted by their state as the coordinator's clock has
it (a lock that ran out is counted as released, `_rules.share.counts`): available (including the
records past the share-partition's end up to the high watermark, not yet delivered), acquired
(in flight), acknowledged and archived (those the start has not passed yet), and those delivered
more than once that are not finished.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterable, Iterator
from typing import Final, NamedTuple

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric

from diskless.clock import Clock, SystemClock
from diskless.coordinator import (
    BatchCoordinator,
    ShareLimits,
    SharePartitionState,
    counts,
)
from diskless.kafka_server._server.metrics.metrics_events import OTHER, PREFIX
from diskless.kafka_server._server.metrics.metrics_scraped import ScrapedFigures

STATES: Final = ("available", "acquired", "acknowledged", "archived")
"""The `state` label's values."""
DEFAULT_LIMITS: Final = ShareLimits()


class ShareFigures(NamedTuple):
    """One share-partition's figures (or a sum of some)."""

    available: int = 0
    acquired: int = 0
    acknowledged: int = 0
    archived: int = 0
    redelivered: int = 0

    def plus(self, other: ShareFigures) -> ShareFigures:
        return ShareFigures(*(a + b for a, b in zip(self, other, strict=True)))


def figures(
    state: SharePartitionState, high_watermark: int | None, now_ms: int, limits: ShareLimits
) -> ShareFigures:
    """A share-partition's figures at `now_ms` (`high_watermark` None: unknown, so nothing past
    the share-partition's end is counted)."""
    if not state.initialized:
        return ShareFigures()
    tally = counts(state, now_ms, limits)
    pending = 0 if high_watermark is None else max(0, high_watermark - state.end)
    return ShareFigures(
        tally.available + pending,
        tally.acquired,
        tally.acknowledged,
        tally.archived,
        tally.redelivered,
    )


class ShareTracker(ScrapedFigures[ShareFigures]):
    """The share figures of the last refresh; `refresh` before a scrape, `families` in it."""

    def __init__(
        self,
        coordinator: BatchCoordinator,
        groups: Callable[[], Iterable[str]],
        *,
        groups_max: int,
        partitions_max: int,
        limits: ShareLimits = DEFAULT_LIMITS,
        clock: Clock | None = None,
        interval_s: float = 1.0,
        timeout_s: float = 2.0,
    ) -> None:
        """`groups`: those this process coordinates (the share groups among them have states);
        `limits`: the delivery count limit a lock that ran out is judged by."""
        super().__init__(
            coordinator,
            groups,
            groups_max=groups_max,
            partitions_max=partitions_max,
            interval_s=interval_s,
            timeout_s=timeout_s,
        )
        self._limits = limits
        self._clock = clock if clock is not None else SystemClock()

    async def _compute(self, groups: list[str]) -> dict[tuple[str, str, str], ShareFigures]:
        states = await asyncio.gather(
            *(self._coordinator.share_partition_states(g) for g in groups)
        )
        high = await self._high_watermarks(tp for of_group in states for tp in of_group)
        now = self._clock.now_ms()
        out: dict[tuple[str, str, str], ShareFigures] = {}
        series = 0
        for group, of_group in zip(groups, states, strict=True):
            for tp, state in sorted(of_group.items()):
                if not state.initialized:
                    continue
                key = (group, tp.topic, str(tp.partition))
                if series >= self._partitions_max:
                    key = (group, OTHER, OTHER)
                elif key not in out:
                    series += 1
                got = figures(state, high.get(tp), now, self._limits)
                out[key] = out.get(key, ShareFigures()).plus(got)
        return out

    def families(self) -> Iterator[Metric]:
        labels = ("group", "topic", "partition")
        records = GaugeMetricFamily(
            PREFIX + "share_records",
            "Records of a share-partition by state: available (to be delivered, the records past"
            " its end up to the high watermark included), acquired (in flight, locked by a"
            " member), acknowledged and archived (those its start has not passed yet)",
            labels=(*labels, "state"),
        )
        redelivered = GaugeMetricFamily(
            PREFIX + "share_records_redelivered",
            "Records of a share-partition delivered more than once and not finished (available"
            " again or acquired)",
            labels=labels,
        )
        for key, f in self._figures.items():
            for state, value in zip(STATES, f[:4], strict=True):
                records.add_metric((*key, state), value)
            redelivered.add_metric(key, f.redelivered)
        yield records
        yield redelivered
        yield GaugeMetricFamily(
            PREFIX + "share_groups_omitted",
            "Groups left out of the share figures by the groups bound (metrics.lag.groups.max)",
            value=self._omitted,
        )
        failures = CounterMetricFamily(
            PREFIX + "share_refresh_failures",
            "Share figure refreshes that failed or timed out (the previous figures were kept)",
        )
        failures.add_metric((), self._failures)
        yield failures
