"""Figures per group computed from the coordinator when a scrape asks, at a bounded cost: what
the consumer lag (`metrics_lag`) and the share groups' queues (`metrics_share`) share.

A refresh runs at most every `interval_s` (later scrapes reuse it), one at a time, and gives up
after `timeout_s`, keeping the previous figures: the coordinator is slow, failing or closing,
and its availability logs an outage once (a closing process needs no line at all). Each refresh
covers at most `groups_max` groups (those past it are counted as omitted) and `partitions_max`
series of their own.
"""

from __future__ import annotations

import abc
import asyncio
import logging
import time
from collections.abc import Callable, Iterable
from typing import Generic, TypeVar

from diskless import OffsetSpec, TopicPartition
from diskless.coordinator import BatchCoordinator, ListOffsetsRequest
from diskless.errors import DisklessError

_log = logging.getLogger(__name__)

F = TypeVar("F")


class ScrapedFigures(abc.ABC, Generic[F]):
    """The figures of the last refresh; `refresh` before a scrape, then read them."""

    def __init__(
        self,
        coordinator: BatchCoordinator,
        groups: Callable[[], Iterable[str]],
        *,
        groups_max: int,
        partitions_max: int,
        interval_s: float,
        timeout_s: float,
    ) -> None:
        """`groups`: those this process coordinates."""
        if groups_max < 0 or partitions_max < 0:
            raise ValueError("groups_max and partitions_max must be >= 0")
        self._coordinator = coordinator
        self.groups = groups
        self._groups_max = groups_max
        self._partitions_max = partitions_max
        self._interval_s = interval_s
        self._timeout_s = timeout_s
        self._refreshed_at = float("-inf")
        self._figures: dict[tuple[str, str, str], F] = {}
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
                    groups = sorted(set(self.groups()))
                    self._omitted = max(0, len(groups) - self._groups_max)
                    self._figures = await self._compute(groups[: self._groups_max])
            except (TimeoutError, DisklessError, RuntimeError) as error:
                self._failures += 1
                _log.debug("%s not refreshed: %r", type(self).__name__, error)
            self._refreshed_at = time.monotonic()
            self._refresh_s = self._refreshed_at - started

    @abc.abstractmethod
    async def _compute(self, groups: list[str]) -> dict[tuple[str, str, str], F]:
        """The figures of these groups, by (group, topic, partition)."""

    async def _high_watermarks(
        self, partitions: Iterable[TopicPartition]
    ) -> dict[TopicPartition, int]:
        """The partitions' high watermarks, in one `list_offsets` call (a partition that has
        none now, e.g. deleted, is left out)."""
        requests = [ListOffsetsRequest(tp, OffsetSpec.LATEST) for tp in sorted(set(partitions))]
        answers = await self._coordinator.list_offsets(requests) if requests else []
        return {
            r.topic_partition: a.offset
            for r, a in zip(requests, answers, strict=True)
            if a.offset >= 0
        }
