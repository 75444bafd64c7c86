"""Small builders shared by the coordinator suites."""

from __future__ import annotations

import itertools
from collections.abc import Sequence

from diskless._types import TopicPartition
from diskless.coordinator import (
    BatchCoordinator,
    CommitBatch,
    CommitBatchResult,
    CommitFileResult,
)

BASE_TS = 1_700_000_000_000
_keys = itertools.count()


def batch(
    tp: TopicPartition,
    *,
    pid: int = -1,
    epoch: int = -1,
    seq: int = -1,
    count: int = 1,
    ts: int = BASE_TS,
    size: int = 100,
    byte_offset: int = 0,
    txn: bool = False,
) -> CommitBatch:
    """A batch header as the broker would pass it after validation."""
    return CommitBatch(
        topic_partition=tp,
        byte_offset=byte_offset,
        size=size,
        record_count=count,
        base_timestamp=ts,
        max_timestamp=ts,
        producer_id=pid,
        producer_epoch=epoch,
        base_sequence=seq,
        is_transactional=txn,
    )


def new_key() -> str:
    return f"objects/{next(_keys):012d}"


class Committer:
    """Registers a broker once and commits objects under fresh keys."""

    def __init__(self, coordinator: BatchCoordinator, broker_id: int = 1) -> None:
        self.coordinator = coordinator
        self.broker_id = broker_id
        self.epoch: int | None = None

    async def attempt(
        self, batches: Sequence[CommitBatch], key: str | None = None
    ) -> CommitFileResult:
        """Commit one object; the outcome may be a refusal."""
        if self.epoch is None:
            self.epoch = await self.coordinator.register_broker(self.broker_id)
        size = sum(b.size for b in batches)
        return await self.coordinator.commit_file(
            key if key is not None else new_key(), self.broker_id, self.epoch, size, batches
        )

    async def commit(
        self, batches: Sequence[CommitBatch], key: str | None = None
    ) -> list[CommitBatchResult]:
        """Commit one object that must not be refused; the batches' results."""
        outcome = await self.attempt(batches, key)
        assert outcome.refused is None, outcome
        assert len(outcome.batches) == len(batches)
        return outcome.batches

    async def one(self, b: CommitBatch, key: str | None = None) -> CommitBatchResult:
        return (await self.commit([b], key))[0]
