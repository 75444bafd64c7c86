"""The engine's reads: Fetch, ListOffsets and the partitions' offsets, each a plan of the read
rules (`_rules.fetch`, `_rules.list_offsets`) decided over the store's read view
(`_store.decide`); beside them the change feed and the producers' state.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from diskless._types import TopicPartition
from diskless.coordinator._api import ChangeListener
from diskless.coordinator._engine.base import EngineBase
from diskless.coordinator._rules.fetch import find_batches_plan, partition_offsets_plan
from diskless.coordinator._rules.list_offsets import list_offsets_plan
from diskless.coordinator._rules.snapshots import producer_snapshot
from diskless.coordinator._store import ReadView, decide
from diskless.coordinator._values import (
    FindBatchesRequest,
    FindBatchesResponse,
    ListOffsetsRequest,
    ListOffsetsResponse,
    PartitionOffsets,
    ProducerSnapshot,
)


class ReadOperations(EngineBase):
    async def find_batches(
        self, requests: Sequence[FindBatchesRequest], fetch_max_bytes: int
    ) -> list[FindBatchesResponse]:
        return await self._read(
            lambda view: decide(find_batches_plan(requests, fetch_max_bytes), view)
        )

    async def partition_offsets(
        self, partitions: Sequence[TopicPartition]
    ) -> list[PartitionOffsets | None]:
        return await self._read(lambda view: decide(partition_offsets_plan(partitions), view))

    def watch_changes(self, listener: ChangeListener) -> Callable[[], None]:
        if self._closed:
            raise RuntimeError("the coordinator is closed")
        return self._store.watch_changes(listener)

    async def list_offsets(
        self, requests: Sequence[ListOffsetsRequest]
    ) -> list[ListOffsetsResponse]:
        return await self._read(lambda view: decide(list_offsets_plan(requests), view))

    async def describe_producers(self, topic_partition: TopicPartition) -> list[ProducerSnapshot]:
        async def describe(view: ReadView) -> list[ProducerSnapshot]:
            state = await view.partition(topic_partition)
            if state is None:
                return []
            entries = await view.producers_of(state.key)
            now = self._clock.now_ms()
            return [producer_snapshot(e) for e in entries if self._live(e, now) is not None]

        return await self._read(describe)
