"""A coordinator wrapper that injects faults, for simulations and failure tests.

Faults are drawn from a seeded `random.Random`, so a run replays exactly from its seed.
"""

from __future__ import annotations

import random
from collections.abc import Mapping, Sequence

from diskless._availability import Availability
from diskless._limits import CommitBounds
from diskless._types import ErrorCode, GroupOwnership, TopicPartition
from diskless.clock import Clock, SystemClock
from diskless.coordinator._api import BatchCoordinator
from diskless.coordinator._values import (
    BrokerRegistration,
    CommitBatch,
    CommitFileResult,
    ConsolidationCandidate,
    DeleteRecordsRequest,
    DeleteRecordsResponse,
    ExtentSwap,
    ExtentSwapResult,
    FileInfo,
    FileStats,
    FindBatchesRequest,
    FindBatchesResponse,
    LeaseRequest,
    LeaseResult,
    ListOffsetsRequest,
    ListOffsetsResponse,
    MetadataStats,
    ProducerSnapshot,
    RegisteredTxn,
    RetentionResult,
    TopicConfig,
    TopicDescription,
)
from diskless.errors import CommitOutcomeUnknownError, CoordinatorUnavailableError
from diskless.txn import PendingOffset, TxnRecord, TxnStep


class FaultyBatchCoordinator(BatchCoordinator):
    """Delegates to `inner`, failing commits at the given rates.

    - `commit_failure_rate`: the commit raises before anything is applied;
    - `commit_unknown_rate`: the commit is applied, then its answer is lost
      (CommitOutcomeUnknownError) — the case that makes retries need idempotence;
    - `commit_latency_s`: every commit takes this long on the injected clock.
    Set `enabled = False` to stop injecting (e.g. for the verification phase of a test).
    A group commit (`commit_files`) goes object by object through `commit_file` (the contract's
    default), so each object draws its own fault, and subclasses intercept every object there.
    """

    def __init__(
        self,
        inner: BatchCoordinator,
        rng: random.Random,
        *,
        commit_failure_rate: float = 0.0,
        commit_unknown_rate: float = 0.0,
        commit_latency_s: float = 0.0,
        clock: Clock | None = None,
    ) -> None:
        self.inner = inner
        self._rng = rng
        self.commit_failure_rate = commit_failure_rate
        self.commit_unknown_rate = commit_unknown_rate
        self.commit_latency_s = commit_latency_s
        self._clock = clock or SystemClock()
        self.enabled = True
        self.failed_commits = 0
        self.unknown_commits = 0

    async def commit_file(
        self,
        object_key: str,
        broker_id: int,
        broker_epoch: int,
        file_size: int,
        batches: Sequence[CommitBatch],
    ) -> CommitFileResult:
        if self.commit_latency_s > 0:
            await self._clock.sleep(self.commit_latency_s)
        draw = self._rng.random()
        if self.enabled and draw < self.commit_failure_rate:
            self.failed_commits += 1
            raise CoordinatorUnavailableError(f"injected commit failure for {object_key}")
        results = await self.inner.commit_file(
            object_key, broker_id, broker_epoch, file_size, batches
        )
        if self.enabled and draw < self.commit_failure_rate + self.commit_unknown_rate:
            self.unknown_commits += 1
            raise CommitOutcomeUnknownError(f"injected lost answer for {object_key}")
        return results

    # Everything else passes straight through.
    async def create_topic(
        self, name: str, partitions: int, config: TopicConfig | None = None
    ) -> ErrorCode:
        return await self.inner.create_topic(name, partitions, config)

    async def create_partitions(self, name: str, total_partitions: int) -> ErrorCode:
        return await self.inner.create_partitions(name, total_partitions)

    async def describe_topics(self, names: Sequence[str] | None = None) -> list[TopicDescription]:
        return await self.inner.describe_topics(names)

    async def delete_topics(self, names: Sequence[str]) -> list[ErrorCode]:
        return await self.inner.delete_topics(names)

    async def register_broker(self, broker_id: int, *, exclusive: bool = False) -> int:
        return await self.inner.register_broker(broker_id, exclusive=exclusive)

    async def find_batches(
        self, requests: Sequence[FindBatchesRequest], fetch_max_bytes: int
    ) -> list[FindBatchesResponse]:
        return await self.inner.find_batches(requests, fetch_max_bytes)

    async def allocate_producer_ids(self, count: int) -> int:
        return await self.inner.allocate_producer_ids(count)

    async def add_partitions_to_txn(
        self, producer_id: int, producer_epoch: int, partitions: Sequence[TopicPartition]
    ) -> list[ErrorCode]:
        return await self.inner.add_partitions_to_txn(producer_id, producer_epoch, partitions)

    async def acquire_txn_leases(
        self,
        broker_id: int,
        broker_epoch: int,
        requests: Sequence[LeaseRequest],
        ttl_ms: int,
    ) -> list[LeaseResult]:
        return await self.inner.acquire_txn_leases(broker_id, broker_epoch, requests, ttl_ms)

    async def release_txn_leases(self, lease_ids: Sequence[int]) -> None:
        await self.inner.release_txn_leases(lease_ids)

    async def write_txn_markers(
        self,
        producer_id: int,
        producer_epoch: int,
        marker_epoch: int,
        commit: bool,
        coordinator_epoch: int,
        partitions: Sequence[TopicPartition],
    ) -> list[ErrorCode]:
        return await self.inner.write_txn_markers(
            producer_id, producer_epoch, marker_epoch, commit, coordinator_epoch, partitions
        )

    async def txn_init(self, transactional_id: str, timeout_ms: int) -> TxnStep:
        return await self.inner.txn_init(transactional_id, timeout_ms)

    async def txn_add_partitions(
        self,
        transactional_id: str,
        producer_id: int,
        producer_epoch: int,
        partitions: Sequence[TopicPartition],
    ) -> list[ErrorCode]:
        return await self.inner.txn_add_partitions(
            transactional_id, producer_id, producer_epoch, partitions
        )

    async def txn_end(
        self, transactional_id: str, producer_id: int, producer_epoch: int, commit: bool
    ) -> TxnStep:
        return await self.inner.txn_end(transactional_id, producer_id, producer_epoch, commit)

    async def txn_expire(self, transactional_id: str) -> TxnStep:
        return await self.inner.txn_expire(transactional_id)

    async def txn_complete(self, prepared: TxnRecord, coordinator_epoch: int) -> TxnStep:
        return await self.inner.txn_complete(prepared, coordinator_epoch)

    async def describe_txns(self, transactional_ids: Sequence[str]) -> list[TxnRecord | None]:
        return await self.inner.describe_txns(transactional_ids)

    async def describe_txn_registrations(
        self, keys: Sequence[tuple[TopicPartition, int]]
    ) -> list[RegisteredTxn | None]:
        return await self.inner.describe_txn_registrations(keys)

    async def txns_due(self) -> list[TxnRecord]:
        return await self.inner.txns_due()

    async def announce_broker(
        self,
        broker_id: int,
        broker_epoch: int,
        host: str,
        port: int,
        rack: str | None,
        ttl_ms: int,
    ) -> bool:
        return await self.inner.announce_broker(broker_id, broker_epoch, host, port, rack, ttl_ms)

    async def live_brokers(self) -> list[BrokerRegistration]:
        return await self.inner.live_brokers()

    async def txn_add_offsets(
        self, transactional_id: str, producer_id: int, producer_epoch: int, group_id: str
    ) -> ErrorCode:
        return await self.inner.txn_add_offsets(
            transactional_id, producer_id, producer_epoch, group_id
        )

    async def txn_commit_offsets(
        self,
        transactional_id: str,
        producer_id: int,
        producer_epoch: int,
        group_id: str,
        offsets: Sequence[PendingOffset],
        fence: GroupOwnership | None = None,
    ) -> ErrorCode:
        return await self.inner.txn_commit_offsets(
            transactional_id, producer_id, producer_epoch, group_id, offsets, fence
        )

    async def claim_group(
        self, group_id: str, broker_id: int, broker_epoch: int
    ) -> GroupOwnership | None:
        return await self.inner.claim_group(group_id, broker_id, broker_epoch)

    async def group_ownership(self, group_id: str) -> GroupOwnership | None:
        return await self.inner.group_ownership(group_id)

    async def store_group_generation(self, group_id: str, owner: GroupOwnership) -> ErrorCode:
        return await self.inner.store_group_generation(group_id, owner)

    async def commit_offsets(
        self,
        group_id: str,
        offsets: Mapping[TopicPartition, tuple[int, str | None]],
        fence: GroupOwnership | None = None,
    ) -> dict[TopicPartition, ErrorCode]:
        return await self.inner.commit_offsets(group_id, offsets, fence)

    async def fetch_offsets(self, group_id: str) -> dict[TopicPartition, tuple[int, str | None]]:
        return await self.inner.fetch_offsets(group_id)

    async def list_offsets(
        self, requests: Sequence[ListOffsetsRequest]
    ) -> list[ListOffsetsResponse]:
        return await self.inner.list_offsets(requests)

    async def delete_records(
        self, requests: Sequence[DeleteRecordsRequest]
    ) -> list[DeleteRecordsResponse]:
        return await self.inner.delete_records(requests)

    async def enforce_retention(self, max_batches: int = 10_000) -> RetentionResult:
        return await self.inner.enforce_retention(max_batches)

    async def condemn_objects(self, keys: Sequence[str]) -> list[str]:
        return await self.inner.condemn_objects(keys)

    async def consolidation_candidates(
        self, committed_before_ms: int, bytes_max: int, limit: int
    ) -> list[ConsolidationCandidate]:
        return await self.inner.consolidation_candidates(committed_before_ms, bytes_max, limit)

    async def commit_extent(self, swap: ExtentSwap) -> ExtentSwapResult:
        return await self.inner.commit_extent(swap)

    async def metadata_stats(self) -> MetadataStats:
        return await self.inner.metadata_stats()

    async def files_to_delete(self, older_than_ms: int, limit: int = 1000) -> list[FileInfo]:
        return await self.inner.files_to_delete(older_than_ms, limit)

    async def forget_files(self, keys: Sequence[str]) -> None:
        await self.inner.forget_files(keys)

    async def file_info(self, keys: Sequence[str]) -> list[FileInfo | None]:
        return await self.inner.file_info(keys)

    async def file_stats(self) -> FileStats:
        return await self.inner.file_stats()

    async def describe_producers(self, topic_partition: TopicPartition) -> list[ProducerSnapshot]:
        return await self.inner.describe_producers(topic_partition)

    @property
    def commit_bounds(self) -> CommitBounds:
        return self.inner.commit_bounds

    @property
    def availability(self) -> Availability:
        """The inner coordinator's: injected faults are not its store failing."""
        return self.inner.availability

    async def close(self) -> None:
        await self.inner.close()
