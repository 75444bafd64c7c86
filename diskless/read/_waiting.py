"""Kafka's long poll: a fetch that finds less than `min_bytes` waits for data, without polling.

Each pass answers what the broker-local view can (a partition at the end of what the fetch
may see: nothing yet, from memory), and asks the coordinator, in one `find_batches` for all of
them, about the others. Leaving the view's partitions out of that call changes nothing in its
answer: they would take no bytes of the response budget. When the pass found too little, the
fetch parks on its partitions until one of them changes or the wait runs out, then looks again.
The versions read before the pass tell whether a change came while it ran: then it looks again
at once, so no change between a look and the park is missed.
"""

from __future__ import annotations

from collections.abc import Mapping

from diskless._results import FetchResult
from diskless._types import ErrorCode, IsolationLevel, TopicPartition
from diskless.clock import Clock
from diskless.read._purgatory import FetchPurgatory
from diskless.read._reader import FetchReader
from diskless.read._view import READING, PartitionView


class WaitingFetches:
    """The long-polling fetches of one broker."""

    def __init__(
        self, reader: FetchReader, view: PartitionView, purgatory: FetchPurgatory, clock: Clock
    ) -> None:
        self._reader = reader
        self._view = view
        self._purgatory = purgatory
        self._clock = clock
        self.answered_by_view = 0
        """Passes answered from the view alone, with no coordinator call."""

    async def fetch(
        self,
        offsets: Mapping[TopicPartition, int],
        *,
        max_bytes: int,
        partition_max_bytes: int,
        isolation_level: IsolationLevel,
        min_bytes: int,
        max_wait_s: float,
        views: bool = False,
    ) -> dict[TopicPartition, FetchResult]:
        """Every partition's result, once `min_bytes` arrived, an error did, or `max_wait_s` ran
        out (answered with what the last pass found). `min_bytes` 0 is answered at once, as
        Kafka answers it."""
        deadline = self._clock.monotonic() + max_wait_s
        view = self._view
        purgatory = self._purgatory
        while True:
            versions = [view.version(tp) for tp in offsets]
            may_wait = min_bytes > 0 and self._clock.monotonic() < deadline
            looked = self._look(offsets, isolation_level, may_wait)
            results: dict[TopicPartition, FetchResult] | None = None
            if looked is not None:
                answered, asked = looked
                results = (
                    await self._read(
                        offsets,
                        answered,
                        asked,
                        max_bytes,
                        partition_max_bytes,
                        isolation_level,
                        views,
                    )
                    if asked
                    else answered
                )
                if not may_wait or not offsets or _enough(results, min_bytes):
                    return results
            if versions == [view.version(tp) for tp in offsets]:
                parked = purgatory.park(offsets.keys(), deadline)
                if parked is not None:
                    try:
                        await parked
                    finally:
                        purgatory.unpark(offsets.keys(), parked)
            if purgatory.closed:
                if results is None:  # the broker is closing: answer what the coordinator says
                    deadline = self._clock.monotonic()
                    continue
                return results

    def _look(
        self,
        offsets: Mapping[TopicPartition, int],
        isolation_level: IsolationLevel,
        may_wait: bool,
    ) -> tuple[dict[TopicPartition, FetchResult], dict[TopicPartition, int]] | None:
        """What the view answers, and the partitions the coordinator must; None when a
        partition's read is coming and the fetch may wait for it (one read for all the fetches
        that wait, rather than each asking the coordinator)."""
        answered: dict[TopicPartition, FetchResult] = {}
        asked: dict[TopicPartition, int] = {}
        for tp, offset in offsets.items():
            result = self._view.answer(tp, offset, isolation_level)
            if result.__class__ is FetchResult:
                answered[tp] = result
            elif result is READING and may_wait:
                return None
            else:
                asked[tp] = offset
        if not asked:
            self.answered_by_view += 1
        return answered, asked

    async def _read(
        self,
        offsets: Mapping[TopicPartition, int],
        answered: dict[TopicPartition, FetchResult],
        asked: dict[TopicPartition, int],
        max_bytes: int,
        partition_max_bytes: int,
        isolation_level: IsolationLevel,
        views: bool,
    ) -> dict[TopicPartition, FetchResult]:
        """The coordinator's and the store's answer for `asked`, beside the view's."""
        fetched = await self._reader.fetch(
            asked,
            max_bytes=max_bytes,
            partition_max_bytes=partition_max_bytes,
            isolation_level=isolation_level,
            views=views,
        )
        if not answered:
            return fetched
        return {tp: answered[tp] if tp in answered else fetched[tp] for tp in offsets}


def _enough(results: Mapping[TopicPartition, FetchResult], min_bytes: int) -> bool:
    """Whether a fetch has its answer: `min_bytes` of records, or an error to report."""
    total = 0
    for result in results.values():
        if result.error is not ErrorCode.NONE:
            return True
        total += result.records_size
    return total >= min_bytes
