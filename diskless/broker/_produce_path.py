"""`ProducePath`: a broker's produce requests on their way to the WAL, in the order they arrived.

    produce(partition -> batch bytes)
      1. validate every partition on its own (framing, CRC, counts, size, producer-id mapping)
      2. take a transaction lease for every transactional batch, in one coordinator call (shared
         with concurrent requests: see `_LeaseGroup`): only a batch whose (producer, epoch) is
         registered in an ongoing transaction may enter the WAL, and the transaction's end waits
         for the lease (the commit barrier)
      3. hand the valid batches to the WAL writer, in the order the requests arrived
      4. answer every partition: the coordinator's result, or the validation error

When nothing has to be waited for (no earlier request still on its way, every topic's description
cached, no transactional batch to lease), steps 1-3 run at once, in the caller's step: the request
is in the WAL before `produce` first yields. Otherwise they run in a task of their own, so that a
caller whose timeout passes is answered REQUEST_TIMED_OUT while its request still reaches the WAL
(Kafka's timeout bounds the wait, not the append).

Order matters: a producer pipelines up to five requests per connection and the coordinator
sequences them in the order they reach the WAL. So requests reach `WalWriter.write` in the order
`produce` started, even when an earlier one had to wait for topic metadata or for its caller's
`rewrite`: each request takes a ticket synchronously when its coroutine starts running (at once
when the caller awaits it) and hands its batches to the writer only after its predecessor has. A
request handed over at once needs no ticket: its predecessors are all in already, and nothing runs
between its check and its hand-over.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Hashable, Mapping, Sequence
from typing import Final, TypeAlias, TypeVar, cast

from diskless._availability import log_failure
from diskless._results import ProduceResult, ProduceStats
from diskless._types import ErrorCode, TopicPartition
from diskless.broker._config import BrokerConfig, txn_lease_budget_ms
from diskless.broker._produce_check import (
    TIMED_OUT,
    check_produce,
    errors_in,
    has_lease,
    has_transactional,
    owned_bytes,
    owned_partitions,
    recompresses,
    size_of,
)
from diskless.broker._produce_check import Checked as _Checked
from diskless.broker._topic_cache import TopicCache
from diskless.broker._txn_leases import TransactionLeases
from diskless.clock import Clock
from diskless.coordinator import BatchCoordinator, CommitBatchResult
from diskless.wal import PendingWrite, WalEntry, WalWriter

_T = TypeVar("_T")
_Prepared: TypeAlias = tuple[
    dict[TopicPartition, ProduceResult], list[WalEntry], PendingWrite | None
]
"""A request handed to the WAL: the validation errors, the valid batches, their pending write."""
Rewrite: TypeAlias = Callable[
    [Mapping[TopicPartition, bytes | memoryview]],
    Awaitable[Mapping[TopicPartition, bytes | bytearray | memoryview]],
]
"""Replaces a produce request's batches in its turn, before validation (see
`DisklessBroker.produce`)."""
_log = logging.getLogger(__name__)

ACKS_ALL: Final = -1
ACKS_NONE: Final = 0
ACKS_LEADER: Final = 1
_ACKS_VALID: Final = frozenset({ACKS_ALL, ACKS_NONE, ACKS_LEADER})


def _in_order(
    results: dict[TopicPartition, ProduceResult], partitions: Mapping[TopicPartition, object]
) -> dict[TopicPartition, ProduceResult]:
    """`results` in the order of `partitions`. (A function of its own: a comprehension in
    `ProducePath.produce` would turn its locals into cells, one more object per request.)"""
    return {tp: results[tp] for tp in partitions}


class ProducePath:
    """The produce requests of one broker, from their checks to their answers: the tickets that
    keep write order, the hand-over to the WAL writer, the guards that bound the work of a
    request whose caller stopped waiting, the transaction leases, and the produce counters.

    The broker owns the WAL writer and hands it to each request (it exists once the broker has
    started). Closing is in two steps around the writer's own close: `drain`, then `close`.
    """

    def __init__(
        self,
        broker_id: int,
        coordinator: BatchCoordinator,
        config: BrokerConfig,
        clock: Clock,
        topics: TopicCache,
        broker_epoch: Callable[[], int],
    ) -> None:
        """`topics`: the broker's cache, which its topic administration keeps fresh;
        `broker_epoch`: the epoch the broker's leases are taken under, once it has started."""
        self._broker_id = broker_id
        self._config = config
        self._clock = clock
        self._topics = topics
        self._request_budget_s = config.request_timeout_ms / 1000
        self._wal_budget_s = txn_lease_budget_ms(config.wal) / 1000
        self._admitted: asyncio.Future[None] | None = None
        """Resolved once the latest produce call handed its batches to the writer (its ticket)."""
        self._background: set[asyncio.Task[_Prepared]] = set()
        """Requests on their way to the WAL, whether or not their caller still waits."""
        self._guards: set[asyncio.Task[None]] = set()
        self._produce_stats: dict[str, int] = dict.fromkeys(ProduceStats.__struct_fields__, 0)
        self._leases = TransactionLeases(
            coordinator, broker_id, broker_epoch, config.txn_lease_ttl_ms, clock
        )

    async def drain(self) -> None:
        """Let every request already started reach the writer, acks=0 ones and those whose caller
        stopped waiting included: the broker closes its writer after this."""
        while self._background or self._guards:
            await asyncio.gather(*self._background, *self._guards, return_exceptions=True)
        # Requests that started before close (e.g. waiting for topic metadata) still reach the
        # writer: the last ticket resolves once every earlier request has handed over.
        if self._admitted is not None:
            await self._admitted

    async def close(self) -> None:
        """Once the writer has closed (its last segments failed or committed): wait for the
        leases of failed batches being given back."""
        await self._leases.close()

    def stats(self) -> ProduceStats:
        return ProduceStats(**self._produce_stats)

    async def produce(
        self,
        writer: WalWriter,
        partitions: Mapping[TopicPartition, bytes | bytearray | memoryview],
        *,
        acks: int,
        timeout_ms: int | None,
        allow_zstd: bool,
        rewrite: Rewrite | None,
        sender: Hashable | None = None,
    ) -> dict[TopicPartition, ProduceResult]:
        """`DisklessBroker.produce`, through the broker's running `writer`."""
        if acks not in _ACKS_VALID:
            self._count_produce(len(partitions), failed=len(partitions), accepted_bytes=0)
            message = f"acks must be -1, 0 or 1, not {acks}"
            invalid = ProduceResult(ErrorCode.INVALID_REQUIRED_ACKS, error_message=message)
            return dict.fromkeys(partitions, invalid)
        timeout_s = (
            timeout_ms if timeout_ms is not None else self._config.request_timeout_ms
        ) / 1000
        now = self._clock.monotonic()
        deadline = now + timeout_s
        # The work before the WAL outlives a caller that stops waiting, within its own budget.
        budget_s = max(timeout_s, self._request_budget_s)
        admit_s = max(budget_s, self._wal_budget_s)
        owned = owned_partitions(partitions)
        checked = self._check_now(owned, allow_zstd) if rewrite is None else None
        if checked is not None and not has_transactional(checked[1]):
            prepared = self._hand_over(writer, checked, admit_s, acks, sender)
            if prepared is None:  # acks=0 whose hand-over failed (logged)
                return {}
            if acks == ACKS_NONE:
                self._count_unanswered(prepared)
                return {}
        else:  # a mapping of its own: the caller may change `partitions` once this returns
            owned = dict(owned)
            prepare = self._prepare_later(
                writer, owned, checked, admit_s, allow_zstd, rewrite, sender
            )
            await asyncio.sleep(0)  # its first step: all of it unless it waits
            if not prepare.done():  # waiting for the coordinator or for the request before it
                self._bound(prepare, now + budget_s)
            if acks == ACKS_NONE:
                prepare.add_done_callback(self._count_unanswered_task)
                return {}
            if not await self._wait_until(prepare, deadline) or prepare.cancelled():
                self._count_produce(len(owned), failed=len(owned), accepted_bytes=0)
                return dict.fromkeys(partitions, TIMED_OUT)
            prepared = prepare.result()
        results, entries, pending = prepared
        # Kept while it waits, every object of a request is walked by each garbage collection
        # (under load, the largest cost of a small request): only what the wait needs stays.
        del checked, prepared, owned
        failed = errors_in(results)  # found before the WAL
        if pending is not None:
            written = await writer.wait(pending, timeout_s=deadline - self._clock.monotonic())
            failed += self._answer(results, entries, written)
        self._count_produce(len(partitions), failed=failed, accepted_bytes=size_of(entries))
        if len(partitions) == 1:  # already in the caller's order
            return results
        return _in_order(results, partitions)

    def _check_now(
        self, partitions: Mapping[TopicPartition, bytes | memoryview], allow_zstd: bool
    ) -> _Checked | None:
        """Validate at once when nothing has to be waited for: no earlier request is still on its
        way to the WAL, the topic cache answers for every partition, and no topic recompresses
        (that check runs in a worker thread, `recompresses`). None otherwise."""
        previous = self._admitted
        if previous is not None and not previous.done():
            return None
        topics = self._topics.cached(partitions)
        if topics is None or recompresses(topics):
            return None
        return check_produce(partitions, topics, {}, self._clock.now_ms(), allow_zstd=allow_zstd)

    def _hand_over(
        self,
        writer: WalWriter,
        checked: _Checked,
        admit_s: float,
        acks: int,
        sender: Hashable | None,
    ) -> _Prepared | None:
        """Hand a validated request without transactional batches to the WAL in this very step:
        no task, no ticket, since nothing can come between it and its predecessors."""
        results, valid = checked
        entries = [WalEntry(tp, header) for tp, header in valid.items()]
        try:  # no leases: nothing to give back when a segment fails
            pending = writer.submit(entries, admit_s=admit_s, sender=sender) if entries else None
        except Exception as error:
            if acks != ACKS_NONE:
                raise
            log_failure(_log, error, "produce on broker %d failed", self._broker_id)
            return None
        return results, entries, pending

    def _prepare_later(
        self,
        writer: WalWriter,
        partitions: dict[TopicPartition, bytes | memoryview],
        checked: _Checked | None,
        admit_s: float,
        allow_zstd: bool,
        rewrite: Rewrite | None,
        sender: Hashable | None,
    ) -> asyncio.Task[_Prepared]:
        """Start the request's way to the WAL as a task of its own, holding the next ticket."""
        # Take the ticket now, synchronously, so that arrival order is write order.
        previous = self._admitted
        mine: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._admitted = mine
        prepare = asyncio.create_task(
            self._prepare(
                writer, partitions, checked, previous, mine, admit_s, allow_zstd, rewrite, sender
            ),
            name=f"produce-b{self._broker_id}",
        )
        self._background.add(prepare)
        prepare.add_done_callback(self._background_done)
        return prepare

    def _count_unanswered(self, prepared: _Prepared) -> None:
        """Count an acks=0 request once it reached the WAL: failures known before it count."""
        results, entries, _ = prepared
        self._count_produce(
            len(results) + len(entries),
            failed=errors_in(results),
            accepted_bytes=size_of(entries),
        )

    def _count_unanswered_task(self, prepare: asyncio.Task[_Prepared]) -> None:
        if prepare.cancelled() or prepare.exception() is not None:
            return  # logged by `_background_done`
        self._count_unanswered(prepare.result())

    def _background_done(self, task: asyncio.Task[_Prepared]) -> None:
        self._background.discard(task)
        if not task.cancelled() and (error := task.exception()) is not None:
            log_failure(_log, error, "produce on broker %d failed", self._broker_id)

    async def _prepare(
        self,
        writer: WalWriter,
        partitions: dict[TopicPartition, bytes | memoryview],
        checked: _Checked | None,
        previous: asyncio.Future[None] | None,
        mine: asyncio.Future[None],
        admit_s: float,
        allow_zstd: bool,
        rewrite: Rewrite | None,
        sender: Hashable | None,
    ) -> _Prepared:
        """Rewrite (if asked to), validate (unless `checked` already is), take leases, wait for
        the request before this one, hand the valid batches to the WAL.

        Runs as a task of its own, so that a caller giving up does not stop the write (Kafka
        appends whatever the produce timeout; the timeout bounds the wait for acknowledgement).
        """
        try:
            if rewrite is not None:
                rewritten = await rewrite(partitions)
                assert rewritten.keys() == partitions.keys(), "a rewrite keeps the partitions"
                partitions = {tp: owned_bytes(data) for tp, data in rewritten.items()}
            if checked is None:  # against the topics' descriptions, refreshed if need be
                topics, unavailable = await self._topics.describe(
                    {tp.topic for tp in partitions}, partitions
                )
                now_ms = self._clock.now_ms()
                if recompresses(topics):  # compressing is slow: off the event loop
                    checked = await asyncio.to_thread(
                        check_produce,
                        partitions,
                        topics,
                        unavailable,
                        now_ms,
                        allow_zstd=allow_zstd,
                    )
                else:
                    checked = check_produce(
                        partitions, topics, unavailable, now_ms, allow_zstd=allow_zstd
                    )
            results, entries = await self._lease(checked)
            if previous is not None:
                # Shielded: giving up on our deadline must not cancel the predecessor's ticket.
                await asyncio.shield(previous)  # never fails: tickets only resolve with None
        finally:
            if not mine.done():
                mine.set_result(None)
        # No await between resolving the ticket and entering the writer: `submit` appends its
        # entries to the active segment at once (or queues FIFO for admission).
        return results, entries, self._submit(writer, entries, admit_s, sender)

    def _submit(
        self,
        writer: WalWriter,
        entries: list[WalEntry],
        admit_s: float,
        sender: Hashable | None,
    ) -> PendingWrite | None:
        if not entries:
            return None
        pending = writer.submit(entries, admit_s=admit_s, sender=sender)
        if has_lease(entries):
            pending.future.add_done_callback(lambda _: self._settle(entries, pending))
        return pending

    def _settle(self, entries: list[WalEntry], pending: PendingWrite) -> None:
        """Once every batch is answered (not on a caller's timeout), free failed leases."""
        if pending.pending == 0 and None not in pending.results:
            self._leases.release_failed(entries, cast("list[CommitBatchResult]", pending.results))

    def _answer(
        self,
        results: dict[TopicPartition, ProduceResult],
        entries: Sequence[WalEntry],
        written: Sequence[CommitBatchResult],
    ) -> int:
        """Fill in the WAL's outcome of every entry; how many of them failed."""
        assert len(written) == len(entries), (len(written), len(entries))
        failed = 0
        for entry, outcome in zip(entries, written, strict=True):
            if outcome.error != ErrorCode.NONE:
                failed += 1
            results[entry.topic_partition] = ProduceResult(  # positional: once per batch
                outcome.error,
                outcome.base_offset,
                outcome.log_append_time,
                outcome.log_start_offset,
                outcome.error_message,
            )
        return failed

    def _bound(self, prepare: asyncio.Task[_Prepared], deadline: float) -> None:
        """Cancel `prepare` if it has not reached the WAL by `deadline` (a hung coordinator)."""
        guard = asyncio.create_task(self._cancel_at(prepare, deadline), name="produce-budget")
        self._guards.add(guard)
        guard.add_done_callback(self._guards.discard)

    async def _cancel_at(self, prepare: asyncio.Task[_Prepared], deadline: float) -> None:
        if not await self._wait_until(prepare, deadline):
            prepare.cancel()
            # Per request, and the coordinator's availability logs an outage: DEBUG.
            _log.debug(
                "produce on broker %d: the coordinator did not answer in time; "
                "the request's batches were not written",
                self._broker_id,
            )

    async def _wait_until(self, future: asyncio.Future[_T], deadline: float) -> bool:
        """True once `future` is done, False if `deadline` passes first; never cancels it."""
        delay = deadline - self._clock.monotonic()
        if future.done() or delay <= 0:
            return future.done()
        alarm = asyncio.ensure_future(self._clock.sleep(delay))
        try:
            await asyncio.wait((future, alarm), return_when=asyncio.FIRST_COMPLETED)
        finally:
            alarm.cancel()
        return future.done()

    async def _lease(
        self, checked: _Checked
    ) -> tuple[dict[TopicPartition, ProduceResult], list[WalEntry]]:
        """Leases for the transactional batches; the batches to write."""
        results, valid = checked
        leases = await self._leases.acquire(valid, results)
        return results, [WalEntry(tp, header, leases.get(tp)) for tp, header in valid.items()]

    def _count_produce(self, partitions: int, *, failed: int, accepted_bytes: int) -> None:
        self._produce_stats["requests"] += 1
        self._produce_stats["partitions"] += partitions
        self._produce_stats["partitions_failed"] += failed
        self._produce_stats["bytes_accepted"] += accepted_bytes
