"""Transaction leases of a broker's produce requests: the commit barrier's broker side.

A transactional batch takes a lease before it enters a WAL segment; the transaction's end waits
for the lease to be released by the batch's commit or to expire. Concurrent requests share one
coordinator call (group commit), and the leases of batches whose segment failed are given back at
once, so that an end need not wait for them to expire. Giving them back fails when the segment
failed because the coordinator is out of reach; it is then retried, until it succeeds, the
leases have expired anyway, or the broker closes (its leases die with its registration).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Sequence
from typing import Final

from diskless._availability import log_failure
from diskless._kafka_errors import produce_error
from diskless._limits import backoff_ms
from diskless._results import ProduceResult
from diskless._types import ErrorCode, TopicPartition
from diskless.clock import Clock, sleep_unless
from diskless.coordinator import BatchCoordinator, CommitBatchResult, LeaseRequest, LeaseResult
from diskless.errors import CoordinatorError
from diskless.records import BatchHeader
from diskless.wal import WalEntry

_log = logging.getLogger(__name__)

SEGMENT_FAILED: Final = frozenset({ErrorCode.KAFKA_STORAGE_ERROR, ErrorCode.NOT_LEADER_OR_FOLLOWER})
"""WAL writer outcomes after which a batch's segment is resolved without its commit."""
RELEASE_BACKOFF_MS: Final = 200
"""The wait before the first retry of a failed release; it doubles up to RELEASE_BACKOFF_MS_MAX."""
RELEASE_BACKOFF_MS_MAX: Final = 5_000
"""The longest wait between two attempts at giving back leases: how late after the coordinator
is back, at most, a transaction's end stops waiting for them."""


class _LeaseGroup:
    """Joins the lease requests of concurrent produce calls into one coordinator call at a time.

    While a call is in flight, new requests queue; when it returns, everything queued goes in the
    next call (group commit), so a loaded broker makes far fewer calls than it has requests.
    `results[i]` answers `requests[i]` for each caller; a failure of the call fails its callers.
    """

    def __init__(self, acquire: Callable[[list[LeaseRequest]], Awaitable[list[LeaseResult]]]):
        self._acquire = acquire
        self._queued: list[tuple[list[LeaseRequest], asyncio.Future[list[LeaseResult]]]] = []
        self._task: asyncio.Task[None] | None = None

    async def acquire(self, requests: list[LeaseRequest]) -> list[LeaseResult]:
        future: asyncio.Future[list[LeaseResult]] = asyncio.get_running_loop().create_future()
        self._queued.append((requests, future))
        if self._task is None:
            self._task = asyncio.create_task(self._drain(), name="txn-lease-group")
        return await future

    async def _drain(self) -> None:
        try:
            while self._queued:
                group, self._queued = self._queued, []
                flat = [request for requests, _ in group for request in requests]
                try:
                    results = await self._acquire(flat)
                except Exception as error:  # every caller of this call sees the failure
                    for _, future in group:
                        if not future.done():
                            future.set_exception(error)
                    continue
                except BaseException:
                    for _, future in group:
                        future.cancel()
                    raise
                assert len(results) == len(flat), (len(results), len(flat))
                start = 0
                for requests, future in group:
                    end = start + len(requests)
                    if not future.done():
                        future.set_result(results[start:end])
                    start = end
        finally:
            self._task = None
            for _, future in self._queued:  # only left here when this task was cancelled
                future.cancel()
            self._queued = []


class TransactionLeases:
    """Takes and gives back the leases of one broker (its id, and its epoch once started)."""

    def __init__(
        self,
        coordinator: BatchCoordinator,
        broker_id: int,
        broker_epoch: Callable[[], int],
        ttl_ms: int,
        clock: Clock,
    ) -> None:
        self._coordinator = coordinator
        self._broker_id = broker_id
        self._broker_epoch = broker_epoch
        self._ttl_ms = ttl_ms
        self._clock = clock
        self._group = _LeaseGroup(self._acquire_group)
        self._releases: set[asyncio.Task[None]] = set()
        self._closing = asyncio.Event()

    async def close(self) -> None:
        """Wait for the releases under way, each after its current attempt."""
        self._closing.set()
        while self._releases:
            await asyncio.gather(*self._releases, return_exceptions=True)

    async def acquire(
        self, valid: dict[TopicPartition, BatchHeader], results: dict[TopicPartition, ProduceResult]
    ) -> dict[TopicPartition, int]:
        """Leases for the transactional batches in `valid`; those refused move to `results`."""
        requests = [
            LeaseRequest(tp, header.producer_id, header.producer_epoch)
            for tp, header in valid.items()
            if header.is_transactional
        ]
        if not requests:
            return {}
        try:
            granted = await self._group.acquire(requests)
        except CoordinatorError as e:
            refusal = ProduceResult(
                produce_error(e), error_message=f"transaction lease unavailable: {e}"
            )
            for request in requests:
                results[request.topic_partition] = refusal
                del valid[request.topic_partition]
            return {}
        assert len(granted) == len(requests), (len(granted), len(requests))
        leases: dict[TopicPartition, int] = {}
        for request, lease in zip(requests, granted, strict=True):
            tp = request.topic_partition
            if lease.error is ErrorCode.NONE:
                leases[tp] = lease.lease_id
            elif lease.error is ErrorCode.STALE_BROKER_EPOCH:
                # As for a fenced commit: the client goes to another broker.
                results[tp] = ProduceResult(
                    ErrorCode.NOT_LEADER_OR_FOLLOWER,
                    error_message=f"broker {self._broker_id} was fenced by a newer incarnation",
                )
                del valid[tp]
            else:
                results[tp] = ProduceResult(
                    lease.error,
                    error_message=f"producer {request.producer_id} epoch "
                    f"{request.producer_epoch} may not write transactionally here",
                )
                del valid[tp]
        return leases

    def release_failed(
        self, entries: Sequence[WalEntry], written: Sequence[CommitBatchResult]
    ) -> None:
        """Give back the leases of batches whose segment failed (upload, commit, fencing,
        shutdown), in the background: an end of their transaction then need not wait for the
        leases to expire. A timed-out request keeps them: its batch may still be committed."""
        failed = [
            entry.lease_id
            for entry, outcome in zip(entries, written, strict=True)
            if entry.lease_id is not None and outcome.error in SEGMENT_FAILED
        ]
        if not failed:
            return
        task = asyncio.create_task(self._release(failed), name="txn-lease-release")
        self._releases.add(task)
        task.add_done_callback(self._releases.discard)

    async def _release(self, lease_ids: list[int]) -> None:
        """Give the leases back, retrying while it may still spare an end a wait: not past
        their TTL (counted from now, which is after they were granted)."""
        expired = self._clock.monotonic() + self._ttl_ms / 1000
        retry = 0
        while True:
            try:
                await self._coordinator.release_txn_leases(lease_ids)
                return
            except CoordinatorError as error:
                log_failure(_log, error, "releasing %d transaction leases failed", len(lease_ids))
            delay_s = min(backoff_ms(RELEASE_BACKOFF_MS, retry), RELEASE_BACKOFF_MS_MAX) / 1000
            if self._closing.is_set() or self._clock.monotonic() + delay_s >= expired:
                return  # they expire anyway, or die with the closing broker's registration
            retry += 1
            await sleep_unless(self._clock, delay_s, self._closing)

    async def _acquire_group(self, requests: list[LeaseRequest]) -> list[LeaseResult]:
        return await self._coordinator.acquire_txn_leases(
            self._broker_id, self._broker_epoch(), requests, self._ttl_ms
        )
