"""`DisklessBroker`: the produce, fetch and list-offsets surface a prototype broker calls.

A broker owns a WAL writer (the write path) and a fetch reader (the read path) over an object store
and a batch coordinator that it shares with every other broker; it owns neither of those and does
not close them.

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
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import Final, TypeAlias, TypeVar, cast

from diskless._availability import log_failure
from diskless._kafka_errors import list_offsets_error
from diskless._results import (
    BrokerStats,
    FetchResult,
    ListOffsetsResult,
    ProduceResult,
    ProduceStats,
)
from diskless._types import ErrorCode, IsolationLevel, TopicPartition, check_isolation_level
from diskless.broker._config import BrokerConfig, check_commit_bounds, txn_lease_budget_ms
from diskless.broker._produce_check import (
    TIMED_OUT,
    check_produce,
    errors_in,
    has_lease,
    has_transactional,
    owned_bytes,
    recompresses,
    size_of,
)
from diskless.broker._produce_check import Checked as _Checked
from diskless.broker._topic_cache import TopicCache
from diskless.broker._txn_leases import TransactionLeases
from diskless.clock import Clock, SystemClock
from diskless.coordinator import (
    BatchCoordinator,
    CommitBatchResult,
    DeleteRecordsRequest,
    DeleteRecordsResponse,
    ListOffsetsRequest,
    TopicConfig,
    TopicDescription,
)
from diskless.errors import BrokerClosedError, CoordinatorError
from diskless.metrics import NULL_METRICS, Metrics, report_fetch
from diskless.read import FetchPurgatory, FetchReader, ObjectCache, PartitionView, WaitingFetches
from diskless.storage import ObjectStore
from diskless.wal import PendingWrite, SegmentCache, WalEntry, WalWriter

_T = TypeVar("_T")
_Prepared: TypeAlias = tuple[
    dict[TopicPartition, ProduceResult], list[WalEntry], PendingWrite | None
]
"""A request handed to the WAL: the validation errors, the valid batches, their pending write."""
Rewrite: TypeAlias = Callable[
    [Mapping[TopicPartition, bytes | memoryview]],
    Awaitable[Mapping[TopicPartition, bytes | bytearray | memoryview]],
]
"""Replaces a produce request's batches in its turn, before validation (see `produce`)."""
_log = logging.getLogger(__name__)

ACKS_ALL: Final = -1
ACKS_NONE: Final = 0
ACKS_LEADER: Final = 1
_ACKS_VALID: Final = frozenset({ACKS_ALL, ACKS_NONE, ACKS_LEADER})


class DisklessBroker:
    """One broker of a diskless cluster; use `async with` (or `start()` and `close()`).

    Starting registers the broker with the coordinator, which hands out its broker epoch (a commit
    from an older incarnation is fenced), and starts its WAL writer. Closing waits for
    acks=0 writes still under way and flushes everything buffered.
    """

    def __init__(
        self,
        broker_id: int,
        store: ObjectStore,
        coordinator: BatchCoordinator,
        config: BrokerConfig | None = None,
        *,
        rack: str | None = None,
        clock: Clock | None = None,
        metrics: Metrics = NULL_METRICS,
    ) -> None:
        """`metrics`: where it reports what its `stats()` cannot tell (`diskless.metrics`)."""
        self._broker_id = broker_id
        self._metrics = metrics
        self._rack = rack
        self._store = store
        self._coordinator = coordinator
        self._config = config if config is not None else BrokerConfig()
        check_commit_bounds(self._config, coordinator.commit_bounds)
        self._clock: Clock = clock if clock is not None else SystemClock()
        self._request_budget_s = self._config.request_timeout_ms / 1000
        self._wal_budget_s = txn_lease_budget_ms(self._config.wal) / 1000
        self._cache = SegmentCache(self._config.wal.segment_cache_bytes_max)
        self._reader = FetchReader(
            store,
            coordinator,
            cache=self._cache,
            object_cache=ObjectCache.sized(
                store, self._config.fetch_cache_block_bytes, self._config.fetch_cache_bytes_max
            ),
            gets_inflight_max=self._config.fetch_gets_inflight_max,
            coalesce_gap_bytes_max=self._config.fetch_coalesce_gap_bytes_max,
        )
        self._purgatory = FetchPurgatory(self._clock)
        self._view = PartitionView(
            coordinator, self._purgatory, reconcile_ms=self._config.fetch_view_reconcile_ms
        )
        self._waiting = WaitingFetches(self._reader, self._view, self._purgatory, self._clock)
        self._writer: WalWriter | None = None
        self._broker_epoch = -1
        self._closing = False
        self._closed = asyncio.Event()
        self._topics = TopicCache(
            coordinator, self._clock, self._config.topic_metadata_ttl_ms / 1000
        )
        self._admitted: asyncio.Future[None] | None = None
        """Resolved once the latest produce call handed its batches to the writer (its ticket)."""
        self._background: set[asyncio.Task[_Prepared]] = set()
        """Requests on their way to the WAL, whether or not their caller still waits."""
        self._guards: set[asyncio.Task[None]] = set()
        self._produce_stats: dict[str, int] = dict.fromkeys(ProduceStats.__struct_fields__, 0)
        self._leases = TransactionLeases(
            coordinator,
            broker_id,
            lambda: self._broker_epoch,
            self._config.txn_lease_ttl_ms,
            self._clock,
        )

    # --- identity and lifecycle ---------------------------------------------------------------
    @property
    def broker_id(self) -> int:
        return self._broker_id

    @property
    def rack(self) -> str | None:
        return self._rack

    @property
    def broker_epoch(self) -> int:
        """The epoch the coordinator handed out at start; -1 before."""
        return self._broker_epoch

    @property
    def clock(self) -> Clock:
        """The clock every timeout of this broker runs on (a simulation's virtual one, say)."""
        return self._clock

    @property
    def config(self) -> BrokerConfig:
        return self._config

    @property
    def started(self) -> bool:
        return self._writer is not None

    async def start(self, *, exclusive: bool = False) -> None:
        """Register with the coordinator and start the WAL writer. Idempotent.

        `exclusive`: refuse to start (`BrokerIdInUseError`) while another incarnation of this
        broker id holds a live registration (`BatchCoordinator.register_broker`)."""
        if self._closing:
            raise BrokerClosedError(f"broker {self._broker_id} is closed")
        if self._writer is not None:
            return
        epoch = await self._coordinator.register_broker(self._broker_id, exclusive=exclusive)
        if self._writer is not None or self._closing:  # re-validate after the await
            return
        writer = WalWriter(
            broker_id=self._broker_id,
            broker_epoch=epoch,
            store=self._store,
            coordinator=self._coordinator,
            config=self._config.wal,
            clock=self._clock,
            cache=self._cache,
            metrics=self._metrics,
        )
        await writer.start()
        self._view.start()
        self._broker_epoch = epoch
        self._writer = writer
        _log.info("broker %d (rack %s) started at epoch %d", self._broker_id, self._rack, epoch)

    async def close(self, *, flush: bool = True) -> None:
        """Stop taking requests, let those already started reach the WAL (acks=0 ones included),
        flush it. Idempotent; the store and the coordinator stay open (the caller owns them).

        `flush=False` is a crash stop: buffered and in-flight segments fail (their requests get
        errors, nothing unacknowledged is committed later), and uploaded-but-uncommitted objects
        are left for the file manager, as when a broker process dies.
        """
        if self._closing:
            await self._closed.wait()
            return
        self._closing = True
        try:
            if not flush and self._writer is not None:
                await self._writer.close(flush=False)
            while self._background or self._guards:
                await asyncio.gather(*self._background, *self._guards, return_exceptions=True)
            # Requests that started before close (e.g. waiting for topic metadata) still reach the
            # writer: the last ticket resolves once every earlier request has handed over.
            if self._admitted is not None:
                await self._admitted
            if self._writer is not None:
                await self._writer.close(flush=True)
            await self._leases.close()
        finally:
            self._purgatory.close()
            await self._view.close()
            self._closed.set()

    async def __aenter__(self) -> DisklessBroker:
        await self.start()
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.close()

    def _require_running(self) -> WalWriter:
        if self._closing:
            raise BrokerClosedError(f"broker {self._broker_id} is closed")
        if self._writer is None:
            raise RuntimeError("DisklessBroker.start() must be awaited first")
        return self._writer

    # --- produce ------------------------------------------------------------------------------
    async def produce(
        self,
        partitions: Mapping[TopicPartition, bytes | bytearray | memoryview],
        *,
        acks: int = ACKS_ALL,
        timeout_ms: int | None = None,
        allow_zstd: bool = True,
        rewrite: Rewrite | None = None,
    ) -> dict[TopicPartition, ProduceResult]:
        """Kafka Produce: one record batch per partition; a result per partition.

        Every partition is validated on its own and fails alone. acks=1 behaves as acks=-1 (an
        ack always means durable and sequenced); acks=0 returns {} at once while the write goes
        on in the background (awaited by `close`). Raises BrokerClosedError after `close`.
        `allow_zstd=False` (for a Produce request below v7) refuses zstd batches. `rewrite` is
        awaited in the request's turn, before validation, for the batches to write instead (the
        Kafka front end's transaction-version-1 bridge, which reads the coordinator): the request
        keeps its place in arrival order however long it takes, and its failure is the request's.

        As in Kafka, `timeout_ms` (even 0) bounds only the wait: partitions not answered in time
        get REQUEST_TIMED_OUT while their write goes on, to be committed or to fail within the
        broker's own budgets (`request_timeout_ms` for the coordinator calls before the WAL, the
        WAL's upload budget for admission).
        """
        writer = self._require_running()
        if acks not in _ACKS_VALID:
            self._count_produce(len(partitions), failed=len(partitions), accepted_bytes=0)
            message = f"acks must be -1, 0 or 1, not {acks}"
            return {
                tp: ProduceResult(ErrorCode.INVALID_REQUIRED_ACKS, error_message=message)
                for tp in partitions
            }
        timeout_s = (
            timeout_ms if timeout_ms is not None else self._config.request_timeout_ms
        ) / 1000
        now = self._clock.monotonic()
        deadline = now + timeout_s
        # The work before the WAL outlives a caller that stops waiting, within its own budget.
        budget_s = max(timeout_s, self._request_budget_s)
        admit_s = max(budget_s, self._wal_budget_s)
        owned = {tp: owned_bytes(data) for tp, data in partitions.items()}
        checked = self._check_now(owned, allow_zstd) if rewrite is None else None
        if checked is not None and not has_transactional(checked[1]):
            prepared = self._hand_over(writer, checked, admit_s, acks)
            if prepared is None:  # acks=0 whose hand-over failed (logged)
                return {}
            if acks == ACKS_NONE:
                self._count_unanswered(prepared)
                return {}
        else:
            prepare = self._prepare_later(writer, owned, checked, admit_s, allow_zstd, rewrite)
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
        failed = errors_in(results)  # found before the WAL
        if pending is not None:
            written = await writer.wait(pending, timeout_s=deadline - self._clock.monotonic())
            failed += self._answer(results, entries, written)
        self._count_produce(len(owned), failed=failed, accepted_bytes=size_of(entries))
        return {tp: results[tp] for tp in partitions}

    def _check_now(
        self, partitions: dict[TopicPartition, bytes | memoryview], allow_zstd: bool
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
        self, writer: WalWriter, checked: _Checked, admit_s: float, acks: int
    ) -> _Prepared | None:
        """Hand a validated request without transactional batches to the WAL in this very step:
        no task, no ticket, since nothing can come between it and its predecessors."""
        results, valid = checked
        entries = [WalEntry(tp, header) for tp, header in valid.items()]
        try:  # no leases: nothing to give back when a segment fails
            pending = writer.submit(entries, admit_s=admit_s) if entries else None
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
    ) -> asyncio.Task[_Prepared]:
        """Start the request's way to the WAL as a task of its own, holding the next ticket."""
        # Take the ticket now, synchronously, so that arrival order is write order.
        previous = self._admitted
        mine: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._admitted = mine
        prepare = asyncio.create_task(
            self._prepare(
                writer, partitions, checked, previous, mine, admit_s, allow_zstd, rewrite
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
        return results, entries, self._submit(writer, entries, admit_s)

    def _submit(
        self, writer: WalWriter, entries: list[WalEntry], admit_s: float
    ) -> PendingWrite | None:
        if not entries:
            return None
        pending = writer.submit(entries, admit_s=admit_s)
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
            results[entry.topic_partition] = ProduceResult(
                outcome.error,
                base_offset=outcome.base_offset,
                log_append_time=outcome.log_append_time,
                log_start_offset=outcome.log_start_offset,
                error_message=outcome.error_message,
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

    # --- fetch and list offsets ---------------------------------------------------------------
    async def fetch(
        self,
        offsets: Mapping[TopicPartition, int],
        *,
        max_bytes: int | None = None,
        partition_max_bytes: int | None = None,
        isolation_level: IsolationLevel = IsolationLevel.READ_UNCOMMITTED,
        min_bytes: int = 0,
        max_wait_ms: int = 0,
    ) -> dict[TopicPartition, FetchResult]:
        """Kafka Fetch: record batches from each partition's offset (see `FetchResult`).

        Kafka's long poll: when fewer than `min_bytes` arrive, the fetch waits up
        to `max_wait_ms` for more, woken by the partitions' changes (this process's commits at
        once, others' through the coordinator's change feed), never polling the coordinator.
        A fetch at the end of a partition is answered from the broker's view of the
        partitions, without asking the coordinator (`diskless.read._view`)."""
        self._require_running()
        results = await self._waiting.fetch(
            offsets,
            max_bytes=max_bytes if max_bytes is not None else self._config.fetch_max_bytes,
            partition_max_bytes=(
                partition_max_bytes
                if partition_max_bytes is not None
                else self._config.fetch_partition_max_bytes
            ),
            isolation_level=check_isolation_level(isolation_level),
            min_bytes=min_bytes,
            max_wait_s=max(0, max_wait_ms) / 1000,
        )
        report_fetch(self._metrics, results)
        return results

    async def list_offsets(
        self,
        timestamps: Mapping[TopicPartition, int],
        *,
        isolation_level: IsolationLevel = IsolationLevel.READ_UNCOMMITTED,
    ) -> dict[TopicPartition, ListOffsetsResult]:
        """Kafka ListOffsets: an `OffsetSpec` sentinel or a timestamp (ms) per partition.

        By time and MAX_TIMESTAMP the answer is a record, as in Kafka: the coordinator names the
        batch holding it and one read of that batch finds it (KAFKA_STORAGE_ERROR for that
        partition alone should the read fail)."""
        self._require_running()
        isolation_level = check_isolation_level(isolation_level)
        requests = [ListOffsetsRequest(tp, ts, isolation_level) for tp, ts in timestamps.items()]
        if not requests:
            return {}
        try:
            responses = await self._coordinator.list_offsets(requests)
        except CoordinatorError as e:
            error = list_offsets_error(e)
            return {r.topic_partition: ListOffsetsResult(error) for r in requests}
        assert len(responses) == len(requests), (len(responses), len(requests))
        responses = await self._reader.resolve_list_offsets(responses)
        return {
            request.topic_partition: ListOffsetsResult(
                response.error, offset=response.offset, timestamp=response.timestamp
            )
            for request, response in zip(requests, responses, strict=True)
        }

    # --- administration pass-throughs ---------------------------------------------------------
    async def create_topic(
        self, name: str, partitions: int, config: TopicConfig | None = None
    ) -> ErrorCode:
        """Create a topic in the coordinator: NONE, or TOPIC_ALREADY_EXISTS. Without `config`,
        `TopicConfig()`: no retention, records kept until deleted (the Kafka server passes its
        cluster defaults instead, Kafka's 7 days unless `log.retention.*` says otherwise)."""
        self._topics.forget([name])
        return await self._coordinator.create_topic(name, partitions, config)

    async def create_partitions(self, name: str, total_partitions: int) -> ErrorCode:
        """Grow a topic (Kafka's CreatePartitions errors)."""
        self._topics.forget([name])
        return await self._coordinator.create_partitions(name, total_partitions)

    async def delete_topics(self, names: Sequence[str]) -> list[ErrorCode]:
        """Delete topics: per name NONE, or UNKNOWN_TOPIC_OR_PARTITION."""
        self._topics.forget(names)
        return await self._coordinator.delete_topics(names)

    async def describe_topics(
        self, names: Sequence[str] | None = None, *, cut_off: bool = False
    ) -> list[TopicDescription]:
        """The topics `names` (None: all). Named topics this broker has described before are
        answered as it last saw them when the coordinator fails, or without asking it when the
        caller knows it `cut_off` (as a Kafka broker answers Metadata from its own copy, however
        old): a client told that a topic it writes has no partitions drops them and stalls, or
        gives up on its records. The coordinator's failure is raised when a name has no copy."""
        if names is not None and cut_off:
            known = self._topics.last_known(names)
            if len(known) == len(set(names)):
                return list(known.values())
        try:
            descriptions = await self._coordinator.describe_topics(names)
        except CoordinatorError:
            known = self._topics.last_known(names or ())
            if names is None or len(known) < len(set(names)):
                raise
            return list(known.values())
        if names is not None:
            self._topics.store(names, descriptions)
        return descriptions

    async def delete_records(
        self, offsets: Mapping[TopicPartition, int]
    ) -> dict[TopicPartition, DeleteRecordsResponse]:
        """Kafka DeleteRecords: advance each partition's log start offset (-1: high watermark)."""
        requests = [DeleteRecordsRequest(tp, offset) for tp, offset in offsets.items()]
        responses = await self._coordinator.delete_records(requests) if requests else []
        assert len(responses) == len(requests)
        return {r.topic_partition: s for r, s in zip(requests, responses, strict=True)}

    # --- observation --------------------------------------------------------------------------
    def stats(self) -> BrokerStats:
        """A snapshot of the broker's counters."""
        return BrokerStats(
            produce=ProduceStats(**self._produce_stats),
            fetch=self._reader.stats(),
            wal=self._writer.stats() if self._writer is not None else None,
        )
