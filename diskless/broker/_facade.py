"""`DisklessBroker`: the produce, fetch and list-offsets surface a prototype broker calls.

A broker owns a WAL writer (the write path) and a fetch reader (the read path) over an object store
and a batch coordinator that it shares with every other broker; it owns neither of those and does
not close them. Its produce requests take its `ProducePath` (`_produce_path`), which keeps them in
the order they arrived on their way to the WAL; its fetches wait in the read path's
`WaitingFetches` (Kafka's long poll). Its cache of topic descriptions serves produce's checks, and
Metadata's last copy of a topic when the coordinator fails; its own topic administration drops
the entries it changes.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Hashable, Mapping, Sequence

from diskless._kafka_errors import list_offsets_error
from diskless._results import BrokerStats, FetchResult, ListOffsetsResult, ProduceResult
from diskless._types import ErrorCode, IsolationLevel, TopicPartition, check_isolation_level
from diskless.broker._config import BrokerConfig, check_commit_bounds
from diskless.broker._produce_path import ACKS_ALL, ProducePath, Rewrite
from diskless.broker._topic_cache import TopicCache
from diskless.clock import Clock, SystemClock
from diskless.coordinator import (
    BatchCoordinator,
    ConfigResourceType,
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
from diskless.wal import SegmentCache, WalWriter

_log = logging.getLogger(__name__)


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
        self._unwatch_topics: Callable[[], None] = _nothing
        self._produce_path = ProducePath(
            broker_id,
            coordinator,
            self._config,
            self._clock,
            self._topics,
            lambda: self._broker_epoch,
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
        self._unwatch_topics = self._coordinator.watch_changes(self._topics.changed)
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
            await self._produce_path.drain()
            if self._writer is not None:
                await self._writer.close(flush=True)
            await self._produce_path.close()
        finally:
            self._purgatory.close()
            self._unwatch_topics()
            await self._topics.close()
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
        sender: Hashable | None = None,
    ) -> dict[TopicPartition, ProduceResult]:
        """Kafka Produce: one record batch per partition; a result per partition.

        Every partition is validated on its own and fails alone. acks=1 behaves as acks=-1 (an
        ack always means durable and sequenced); acks=0 returns {} at once while the write goes
        on in the background (awaited by `close`). Raises BrokerClosedError after `close`.
        `allow_zstd=False` (for a Produce request below v7) refuses zstd batches. `rewrite` is
        awaited in the request's turn, before validation, for the batches to write instead (the
        Kafka front end's transaction-version-1 bridge, which reads the coordinator): the request
        keeps its place in arrival order however long it takes, and its failure is the request's.
        `sender` names who sent the request (the Kafka server passes its connection): once every
        sender writing into the WAL's open segment has as many requests in flight as a Kafka
        producer keeps, the segment is uploaded without waiting for more (`WalWriter.submit`).

        As in Kafka, `timeout_ms` (even 0) bounds only the wait: partitions not answered in time
        get REQUEST_TIMED_OUT while their write goes on, to be committed or to fail within the
        broker's own budgets (`request_timeout_ms` for the coordinator calls before the WAL, the
        WAL's upload budget for admission).
        """
        return await self._produce_path.produce(
            self._require_running(),
            partitions,
            acks=acks,
            timeout_ms=timeout_ms,
            allow_zstd=allow_zstd,
            rewrite=rewrite,
            sender=sender,
        )

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
        views: bool = False,
    ) -> dict[TopicPartition, FetchResult]:
        """Kafka Fetch: record batches from each partition's offset (see `FetchResult`), as
        `record_views` when `views` (no copy of the records on the broker).

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
            views=views,
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

    async def alter_topic_config(
        self, name: str, config: TopicConfig, expected: TopicConfig | None = None
    ) -> TopicConfig | None:
        """Replace a topic's config (`BatchCoordinator.alter_topic_config`: the config in force
        after the step, None for an unknown topic)."""
        self._topics.forget([name])
        return await self._coordinator.alter_topic_config(name, config, expected)

    async def alter_resource_configs(
        self,
        resource_type: ConfigResourceType,
        name: str,
        configs: Mapping[str, str],
        expected: Mapping[str, str] | None = None,
    ) -> dict[str, str]:
        """Replace a broker's or group's dynamic configs (`BatchCoordinator.alter_resource_configs`:
        those in force after the step)."""
        return await self._coordinator.alter_resource_configs(
            resource_type, name, configs, expected
        )

    async def describe_resource_configs(
        self, resource_type: ConfigResourceType, names: Sequence[str] | None = None
    ) -> dict[str, dict[str, str]]:
        """The dynamic configs of brokers or groups, by name (those that have some)."""
        return await self._coordinator.describe_resource_configs(resource_type, names)

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
            produce=self._produce_path.stats(),
            fetch=self._reader.stats(),
            wal=self._writer.stats() if self._writer is not None else None,
        )


def _nothing() -> None:
    """What stopping a watch that never started does."""
