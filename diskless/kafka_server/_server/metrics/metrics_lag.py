"""Consumer lag per group and partition, computed when a scrape asks, at a bounded cost.

A group's lag on a partition is the partition's high watermark minus the group's committed
offset (Kafka's `kafka-consumer-groups` figure), for the groups this process coordinates. A
refresh reads each group's offsets (one call per group) and the high watermarks of all their
partitions (one `list_offsets` call), so its cost is bounded by `groups_max` groups and
`partitions_max` series; it runs at most every `interval_s` (later scrapes reuse it) and gives up
after `timeout_s`, keeping the previous figures. Series past the bound are summed into one per
group with `topic="__other__", partition="__other__"`; groups past `groups_max` are counted in
`diskless_consumer_lag_groups_omitted`.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterable, Iterator

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric

from diskless.coordinator import BatchCoordinator
from diskless.kafka_server._server.metrics.metrics_events import OTHER, PREFIX
from diskless.kafka_server._server.metrics.metrics_scraped import ScrapedFigures


class LagTracker(ScrapedFigures[int]):
    """The lag figures of the last refresh; `refresh` before a scrape, `families` in it."""

    def __init__(
        self,
        coordinator: BatchCoordinator,
        groups: Callable[[], Iterable[str]],
        *,
        groups_max: int,
        partitions_max: int,
        interval_s: float = 1.0,
        timeout_s: float = 2.0,
    ) -> None:
        super().__init__(
            coordinator,
            groups,
            groups_max=groups_max,
            partitions_max=partitions_max,
            interval_s=interval_s,
            timeout_s=timeout_s,
        )

    async def _compute(self, groups: list[str]) -> dict[tuple[str, str, str], int]:
        committed = await asyncio.gather(*(self._coordinator.fetch_offsets(g) for g in groups))
        high = await self._high_watermarks(tp for offsets in committed for tp in offsets)
        lags: dict[tuple[str, str, str], int] = {}
        for group, offsets in zip(groups, committed, strict=True):
            for tp, (offset, *_) in sorted(offsets.items()):
                if offset < 0 or tp not in high:
                    continue
                lag = max(0, high[tp] - offset)
                key = (group, tp.topic, str(tp.partition))
                if len(lags) >= self._partitions_max:
                    key = (group, OTHER, OTHER)
                lags[key] = lags.get(key, 0) + lag
        return lags

    def families(self) -> Iterator[Metric]:
        lag = GaugeMetricFamily(
            PREFIX + "consumer_group_lag",
            "Records a consumer group has yet to consume: the partition's high watermark minus"
            " the group's committed offset (groups this process coordinates)",
            labels=("group", "topic", "partition"),
        )
        for key, value in self._figures.items():
            lag.add_metric(key, value)
        yield lag
        yield GaugeMetricFamily(
            PREFIX + "consumer_lag_groups_omitted",
            "Groups left out of the lag figures by the groups bound (metrics.lag.groups.max)",
            value=self._omitted,
        )
        failures = CounterMetricFamily(
            PREFIX + "consumer_lag_refresh_failures",
            "Lag refreshes that failed or timed out (the previous figures were kept)",
        )
        failures.add_metric((), self._failures)
        yield failures
        yield GaugeMetricFamily(
            PREFIX + "consumer_lag_refresh_seconds",
            "How long the last lag refresh took",
            value=self._refresh_s,
        )
