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
import logging
import time
from collections.abc import Callable, Iterable, Iterator

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric

from diskless import OffsetSpec, TopicPartition
from diskless.coordinator import BatchCoordinator, ListOffsetsRequest
from diskless.errors import DisklessError
from diskless.kafka_server._server.metrics.metrics_events import OTHER, PREFIX

_log = logging.getLogger(__name__)


class LagTracker:
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
        if groups_max < 0 or partitions_max < 0:
            raise ValueError("groups_max and partitions_max must be >= 0")
        self._coordinator = coordinator
        self._groups = groups
        self._groups_max = groups_max
        self._partitions_max = partitions_max
        self._interval_s = interval_s
        self._timeout_s = timeout_s
        self._refreshed_at = float("-inf")
        self._lags: dict[tuple[str, str, str], int] = {}
        self._omitted = 0
        self._failures = 0
        self._refresh_s = 0.0
        self._lock = asyncio.Lock()

    async def refresh(self) -> None:
        """Recompute unless the figures are younger than `interval_s` (one refresh at a time)."""
        async with self._lock:
            if time.monotonic() - self._refreshed_at < self._interval_s:
                return
            started = time.monotonic()
            try:
                async with asyncio.timeout(self._timeout_s):
                    self._lags = await self._compute()
            except (TimeoutError, DisklessError, RuntimeError) as error:
                # The coordinator is slow, failing or closing: keep the last figures (its
                # availability logs an outage once; a closing process needs no line at all).
                self._failures += 1
                _log.debug("consumer lag not refreshed: %r", error)
            self._refreshed_at = time.monotonic()
            self._refresh_s = self._refreshed_at - started

    async def _compute(self) -> dict[tuple[str, str, str], int]:
        groups = sorted(set(self._groups()))
        self._omitted = max(0, len(groups) - self._groups_max)
        groups = groups[: self._groups_max]
        committed = await asyncio.gather(*(self._coordinator.fetch_offsets(g) for g in groups))
        partitions = sorted({tp for offsets in committed for tp in offsets})
        requests = [ListOffsetsRequest(tp, OffsetSpec.LATEST) for tp in partitions]
        answers = await self._coordinator.list_offsets(requests) if requests else []
        high: dict[TopicPartition, int] = {
            r.topic_partition: a.offset
            for r, a in zip(requests, answers, strict=True)
            if a.offset >= 0
        }
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
        for key, value in self._lags.items():
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
