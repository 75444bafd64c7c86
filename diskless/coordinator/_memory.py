"""The in-memory batch coordinator: for tests and single-process brokers.

Every operation runs without an `await` between reading and mutating state, so it is atomic with
respect to other coroutines. The rules live in `_planner`, `_reads` and `diskless.txn`; this module
only stores.
"""

from __future__ import annotations

import asyncio
import bisect
import collections
import operator
from collections.abc import Iterator, Sequence

import msgspec
from sortedcontainers import SortedDict

from diskless._limits import COMMIT_AGE_MAX_MS_DEFAULT, LEASE_TTL_MS_MAX, CommitBounds
from diskless._object_keys import DEFAULT_OBJECT_PREFIX, check_commit_age
from diskless._types import ErrorCode, TopicPartition
from diskless.clock import Clock, SystemClock
from diskless.coordinator import _reads
from diskless.coordinator._api import (
    BatchCoordinator,
    CommitBatch,
    CommitBatchResult,
    DeleteRecordsRequest,
    DeleteRecordsResponse,
    FileInfo,
    FileState,
    FileStats,
    FindBatchesRequest,
    FindBatchesResponse,
    LeaseRequest,
    LeaseResult,
    ListOffsetsRequest,
    ListOffsetsResponse,
    ProducerSnapshot,
    RetentionResult,
    TopicConfig,
    TopicDescription,
)
from diskless.coordinator._checks import check_broker_epoch, check_new_topic, check_object_key
from diskless.coordinator._planner import plan_commit
from diskless.coordinator._rows import (
    AbortedTxn,
    PartitionState,
    StoredBatch,
    TxnLease,
    TxnRegistration,
)
from diskless.coordinator._snapshots import producer_snapshot
from diskless.coordinator._txn import (
    MarkerPlan,
    check_lease_grant,
    check_registration,
    plan_marker,
    run_write_txn_markers,
)
from diskless.txn import PRODUCER_ID_EXPIRATION_MS_DEFAULT, ProducerEntry, is_expired

_COMPACT_MIN = 1024
"""Deleted list heads are compacted once they are this long and half of the list."""


_base_offset = operator.attrgetter("base_offset")
_running_max = operator.attrgetter("ts_running_max")
_marker_offset = operator.attrgetter("last_offset")


class _Log:
    """One partition's batches. Offsets (and running max timestamps) only grow, so the
    append-only list is sorted by both and bisection finds either in O(log n).

    Deleting from the front only moves `head`; the dead prefix is dropped once it is large, which
    keeps deletion amortized O(1) and lookups O(log n) by bisection.
    """

    def __init__(self) -> None:
        self.rows: list[StoredBatch] = []
        self.head = 0
        # Batches by non-increasing timestamp, earliest first among equals: the front is the
        # MAX_TIMESTAMP answer (a sliding-window maximum over a log trimmed at the front).
        self.max_queue: collections.deque[StoredBatch] = collections.deque()

    def __len__(self) -> int:
        return len(self.rows) - self.head

    def append(self, batch: StoredBatch) -> None:
        assert not self.rows or batch.base_offset > self.rows[-1].last_offset
        self.rows.append(batch)
        queue = self.max_queue
        while queue and queue[-1].timestamp < batch.timestamp:
            queue.pop()
        queue.append(batch)

    def oldest(self) -> Iterator[StoredBatch]:
        return iter(self.rows[self.head :])

    def pop_oldest(self) -> StoredBatch:
        assert self.head < len(self.rows)
        batch = self.rows[self.head]
        self.head += 1
        if self.max_queue and self.max_queue[0] is batch:
            self.max_queue.popleft()
        if self.head >= _COMPACT_MIN and self.head * 2 >= len(self.rows):
            del self.rows[: self.head]
            self.head = 0
        return batch

    def from_offset(self, offset: int) -> Iterator[StoredBatch]:
        index = bisect.bisect_right(self.rows, offset, lo=self.head, key=_base_offset) - 1
        index = max(self.head, index)
        for i in range(index, len(self.rows)):
            yield self.rows[i]

    def first_running_max_at_least(self, ts: int) -> StoredBatch | None:
        index = bisect.bisect_left(self.rows, ts, lo=self.head, key=_running_max)
        return self.rows[index] if index < len(self.rows) else None

    def max_timestamp(self) -> StoredBatch | None:
        return self.max_queue[0] if self.max_queue else None


class _Topic(msgspec.Struct):
    name: str
    config: TopicConfig
    partitions: list[PartitionState]


class _File(msgspec.Struct):
    state: FileState
    size: int
    since_ms: int
    live_batches: int = 0

    def info(self, key: str) -> FileInfo:
        return FileInfo(key, self.state, self.size, self.since_ms)


class _PartitionView:
    """The planner's view of the partitions: a lookup, not a copy."""

    def __init__(self, coordinator: InMemoryBatchCoordinator) -> None:
        self._coordinator = coordinator

    def get(self, tp: TopicPartition, /) -> PartitionState | None:
        return self._coordinator.partition(tp)


class _ProducerView:
    """The planner's view of the producer entries: a lookup, not a copy."""

    def __init__(self, producers: dict[int, dict[int, ProducerEntry]]) -> None:
        self._producers = producers

    def get(self, key: tuple[int, int], /) -> ProducerEntry | None:
        return self._producers[key[0]].get(key[1])


class _RegistrationView:
    """The planner's view of the transaction registrations."""

    def __init__(self, registrations: dict[int, dict[int, TxnRegistration]]) -> None:
        self._registrations = registrations

    def get(self, key: tuple[int, int], /) -> TxnRegistration | None:
        return self._registrations[key[0]].get(key[1])


class InMemoryBatchCoordinator(BatchCoordinator):
    """A batch coordinator whose state lives in this process's memory."""

    def __init__(
        self,
        clock: Clock | None = None,
        producer_id_expiration_ms: int = PRODUCER_ID_EXPIRATION_MS_DEFAULT,
        *,
        commit_age_max_ms: int | None = COMMIT_AGE_MAX_MS_DEFAULT,
        object_prefix: str = DEFAULT_OBJECT_PREFIX,
    ) -> None:
        """`commit_age_max_ms`: see `SqliteBatchCoordinator` (None: no bound)."""
        self._clock: Clock = clock if clock is not None else SystemClock()
        self._expiration_ms = producer_id_expiration_ms
        self._commit_age_max_ms = commit_age_max_ms
        self._object_prefix = object_prefix
        # Transactions: registrations and leases by partition key, the ongoing-transaction index
        # (first offset -> producer id, the LSO) and the aborted-transaction index per partition.
        self._next_producer_id = 0
        self._registrations: dict[int, dict[int, TxnRegistration]] = {}
        self._leases: dict[int, TxnLease] = {}
        self._leases_by_producer: dict[tuple[int, int], set[int]] = {}
        self._next_lease_id = 1
        self._ongoing: dict[int, SortedDict] = {}
        self._aborted: dict[int, list[AbortedTxn]] = {}
        self._released: asyncio.Future[None] | None = None
        """Resolved (and replaced) whenever a lease is released: wakes ends waiting for one."""
        self._topics: dict[str, _Topic] = {}
        self._logs: dict[int, _Log] = {}
        self._states: dict[int, PartitionState] = {}
        """Partition states by key (the same objects as in `_topics`)."""
        self._producers: dict[int, dict[int, ProducerEntry]] = {}
        self._files: dict[str, _File] = {}
        self._brokers: dict[int, int] = {}
        self._next_partition_key = 1
        self._closed = False
        self._partition_view = _PartitionView(self)
        self._producer_view = _ProducerView(self._producers)
        self._registration_view = _RegistrationView(self._registrations)

    # --- lookups ------------------------------------------------------------------------------
    def partition(self, tp: TopicPartition) -> PartitionState | None:
        topic = self._topics.get(tp.topic)
        if topic is None or not 0 <= tp.partition < len(topic.partitions):
            return None
        return topic.partitions[tp.partition]

    def batches_from(self, state: PartitionState, offset: int) -> Iterator[StoredBatch]:
        return self._logs[state.key].from_offset(offset)

    def max_timestamp_batch(self, state: PartitionState) -> StoredBatch | None:
        return self._logs[state.key].max_timestamp()

    def first_running_max_at_least(self, state: PartitionState, ts: int) -> StoredBatch | None:
        return self._logs[state.key].first_running_max_at_least(ts)

    def aborted_from(self, state: PartitionState, offset: int) -> Iterator[AbortedTxn]:
        aborted = self._aborted[state.key]
        start = bisect.bisect_left(aborted, offset, key=_marker_offset)
        return iter(aborted[start:])

    def _check_open(self) -> None:
        if self._closed:
            raise RuntimeError("the coordinator is closed")

    # --- topics -------------------------------------------------------------------------------
    async def create_topic(
        self, name: str, partitions: int, config: TopicConfig | None = None
    ) -> bool:
        self._check_open()
        check_new_topic(name, partitions)
        if name in self._topics:
            return False
        topic = _Topic(name, config if config is not None else TopicConfig(), [])
        self._topics[name] = topic
        self._add_partitions(topic, partitions)
        return True

    def _add_partitions(self, topic: _Topic, total: int) -> None:
        for index in range(len(topic.partitions), total):
            key = self._next_partition_key
            self._next_partition_key += 1
            state = PartitionState(key, TopicPartition(topic.name, index), topic.config)
            topic.partitions.append(state)
            self._states[key] = state
            self._logs[key] = _Log()
            self._producers[key] = {}
            self._registrations[key] = {}
            self._ongoing[key] = SortedDict()
            self._aborted[key] = []

    async def create_partitions(self, name: str, total_partitions: int) -> None:
        self._check_open()
        topic = self._topics.get(name)
        if topic is None:
            raise ValueError(f"unknown topic {name!r}")
        if total_partitions < len(topic.partitions):
            raise ValueError(
                f"topic {name!r} has {len(topic.partitions)} partitions; cannot shrink to "
                f"{total_partitions}"
            )
        self._add_partitions(topic, total_partitions)

    async def describe_topics(self, names: Sequence[str] | None = None) -> list[TopicDescription]:
        self._check_open()
        selected = (
            sorted(self._topics) if names is None else [n for n in names if n in self._topics]
        )
        return [
            TopicDescription(n, len(self._topics[n].partitions), self._topics[n].config)
            for n in selected
        ]

    async def delete_topics(self, names: Sequence[str]) -> None:
        self._check_open()
        now = self._clock.now_ms()
        for name in names:
            topic = self._topics.pop(name, None)
            if topic is None:
                continue
            for state in topic.partitions:
                log = self._logs.pop(state.key)
                del self._states[state.key]
                while len(log):
                    self._release(log.pop_oldest(), now)
                del self._producers[state.key]
                for pid in self._registrations.pop(state.key):
                    self._drop_leases(state.key, pid, None)
                del self._ongoing[state.key]
                del self._aborted[state.key]

    # --- brokers ------------------------------------------------------------------------------
    async def register_broker(self, broker_id: int) -> int:
        self._check_open()
        epoch = self._brokers.get(broker_id, 0) + 1
        self._brokers[broker_id] = epoch
        return epoch

    # --- the write path -----------------------------------------------------------------------
    async def commit_file(
        self,
        object_key: str,
        broker_id: int,
        broker_epoch: int,
        file_size: int,
        batches: Sequence[CommitBatch],
    ) -> list[CommitBatchResult]:
        self._check_open()
        check_broker_epoch(broker_id, broker_epoch, self._brokers.get(broker_id))
        existing = self._files.get(object_key)
        check_object_key(object_key, None if existing is None else existing.state)
        now = self._clock.now_ms()
        check_commit_age(object_key, self._object_prefix, now, self._commit_age_max_ms)
        # The planner reads live state through these views and returns copies, so nothing
        # changes until the plan is applied below.
        plan = plan_commit(
            object_key,
            batches,
            self._partition_view,
            self._producer_view,
            now,
            self._expiration_ms,
            self._registration_view,
            self._leases,
        )
        # Apply: nothing below can fail, so the commit is all or nothing.
        for batch_row in plan.new_batches:
            self._logs[batch_row.partition_key].append(batch_row)
        for (partition_key, pid), entry in plan.producers.items():
            self._producers[partition_key][pid] = entry
        for new_state in plan.partitions.values():
            old = self._states[new_state.key]
            old.high_watermark = new_state.high_watermark
            old.size_bytes = new_state.size_bytes
            old.ts_running_max = new_state.ts_running_max
        for partition_key, first_offset, pid in plan.opened_txns:
            self._ongoing[partition_key][first_offset] = pid
            self._refresh_lso(partition_key)
        if plan.released_leases:
            for lease_id in plan.released_leases:
                self._drop_lease(lease_id)
            self._signal_release()
        live = len(plan.new_batches)
        self._files[object_key] = _File(
            FileState.LIVE if live else FileState.UNREFERENCED, file_size, now, live
        )
        return plan.results

    # --- transactions -------------------------------------------------------------------------
    async def allocate_producer_ids(self, count: int) -> int:
        self._check_open()
        if count < 1:
            raise ValueError(f"count must be >= 1, got {count}")
        first = self._next_producer_id
        self._next_producer_id += count
        return first

    def _live_entry(self, partition_key: int, producer_id: int) -> ProducerEntry | None:
        entry = self._producers[partition_key].get(producer_id)
        if entry is not None and is_expired(entry, self._clock.now_ms(), self._expiration_ms):
            return None
        return entry

    async def add_partitions_to_txn(
        self, producer_id: int, producer_epoch: int, partitions: Sequence[TopicPartition]
    ) -> list[ErrorCode]:
        self._check_open()
        results = []
        for tp in partitions:
            state = self.partition(tp)
            if state is None:
                results.append(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)
                continue
            registrations = self._registrations[state.key]
            error, new = check_registration(
                self._live_entry(state.key, producer_id),
                registrations.get(producer_id),
                producer_epoch,
            )
            if new is not None:
                registrations[producer_id] = new
                self._drop_leases(state.key, producer_id, new.producer_epoch - 1)
            results.append(error)
        return results

    async def acquire_txn_leases(
        self,
        broker_id: int,
        broker_epoch: int,
        requests: Sequence[LeaseRequest],
        ttl_ms: int,
    ) -> list[LeaseResult]:
        self._check_open()
        if not 0 < ttl_ms <= LEASE_TTL_MS_MAX:
            raise ValueError(f"ttl_ms must be in (0, {LEASE_TTL_MS_MAX}], got {ttl_ms}")
        check_broker_epoch(broker_id, broker_epoch, self._brokers.get(broker_id))
        expires = self._clock.now_ms() + ttl_ms
        results = []
        for tp, producer_id, producer_epoch in requests:
            state = self.partition(tp)
            if state is None:
                results.append(LeaseResult(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION))
                continue
            error = check_lease_grant(
                self._live_entry(state.key, producer_id),
                self._registrations[state.key].get(producer_id),
                producer_epoch,
            )
            if error is not ErrorCode.NONE:
                results.append(LeaseResult(error))
                continue
            lease_id = self._next_lease_id
            self._next_lease_id += 1
            self._leases[lease_id] = TxnLease(
                lease_id, state.key, producer_id, producer_epoch, expires
            )
            self._leases_by_producer.setdefault((state.key, producer_id), set()).add(lease_id)
            results.append(LeaseResult(ErrorCode.NONE, lease_id, expires))
        return results

    async def release_txn_leases(self, lease_ids: Sequence[int]) -> None:
        self._check_open()
        for lease_id in lease_ids:
            self._drop_lease(lease_id)
        if lease_ids:
            self._signal_release()

    async def write_txn_markers(
        self,
        producer_id: int,
        producer_epoch: int,
        marker_epoch: int,
        commit: bool,
        coordinator_epoch: int,
        partitions: Sequence[TopicPartition],
    ) -> list[ErrorCode]:
        self._check_open()
        return await run_write_txn_markers(
            self,
            self._clock,
            producer_id,
            producer_epoch,
            marker_epoch,
            commit,
            coordinator_epoch,
            partitions,
        )

    async def _txn_begin_end(
        self, producer_id: int, producer_epoch: int, partitions: Sequence[TopicPartition]
    ) -> list[ErrorCode]:
        self._check_open()
        results = []
        for tp in partitions:
            state = self.partition(tp)
            if state is None:
                results.append(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)
                continue
            registrations = self._registrations[state.key]
            registration = registrations.get(producer_id)
            if registration is not None and registration.producer_epoch == producer_epoch:
                registrations[producer_id] = TxnRegistration(producer_epoch, ending=True)
            results.append(ErrorCode.NONE)
        return results

    async def _txn_lease_deadline(
        self, producer_id: int, producer_epoch: int, partitions: Sequence[TopicPartition]
    ) -> int | None:
        self._check_open()
        now = self._clock.now_ms()
        earliest: int | None = None
        for tp in partitions:
            state = self.partition(tp)
            if state is None:
                continue
            for lease_id in self._leases_by_producer.get((state.key, producer_id), ()):
                lease = self._leases[lease_id]
                if (
                    lease.producer_epoch == producer_epoch
                    and lease.expires_ms > now
                    and (earliest is None or lease.expires_ms < earliest)
                ):
                    earliest = lease.expires_ms
        return earliest

    def _txn_release_signal(self) -> asyncio.Future[None] | None:
        if self._released is None or self._released.done():
            self._released = asyncio.get_running_loop().create_future()
        return self._released

    def _signal_release(self) -> None:
        released, self._released = self._released, None
        if released is not None and not released.done():
            released.set_result(None)

    async def _txn_write_markers(
        self,
        producer_id: int,
        producer_epoch: int,
        marker_epoch: int,
        commit: bool,
        coordinator_epoch: int,
        partitions: Sequence[TopicPartition],
    ) -> list[ErrorCode]:
        self._check_open()
        now = self._clock.now_ms()
        # Plan every partition first (nothing changes), then apply: all or nothing.
        plans: dict[TopicPartition, tuple[PartitionState, MarkerPlan] | ErrorCode] = {}
        for tp in dict.fromkeys(partitions):
            state = self.partition(tp)
            if state is None:
                plans[tp] = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
                continue
            ongoing = self._ongoing[state.key]
            next_first = next(
                (first for first, pid in ongoing.items()[:2] if pid != producer_id), None
            )
            plans[tp] = (
                state,
                plan_marker(
                    state,
                    self._live_entry(state.key, producer_id),
                    self._registrations[state.key].get(producer_id),
                    producer_id,
                    producer_epoch,
                    marker_epoch,
                    commit,
                    coordinator_epoch,
                    now,
                    next_first,
                ),
            )
        for planned in plans.values():
            if isinstance(planned, ErrorCode):
                continue
            state, plan = planned
            if plan.marker is None:
                continue
            key = state.key
            assert plan.state is not None and plan.entry is not None
            self._logs[key].append(plan.marker)
            state.high_watermark = plan.state.high_watermark
            state.size_bytes = plan.state.size_bytes
            state.ts_running_max = plan.state.ts_running_max
            self._producers[key][producer_id] = plan.entry
            if plan.closed_txn_first_offset is not None:
                closed = self._ongoing[key].pop(plan.closed_txn_first_offset, None)
                assert closed == producer_id, (closed, producer_id)
            if plan.aborted is not None:
                self._aborted[key].append(plan.aborted)
            registrations = self._registrations[key]
            registration = registrations.get(producer_id)
            if registration is not None and registration.producer_epoch <= producer_epoch:
                del registrations[producer_id]
            self._drop_leases(key, producer_id, producer_epoch)
            self._refresh_lso(key)
        return [
            planned if isinstance(planned, ErrorCode) else planned[1].error
            for planned in (plans[tp] for tp in partitions)
        ]

    def _refresh_lso(self, partition_key: int) -> None:
        ongoing = self._ongoing[partition_key]
        self._states[partition_key].txn_first_offset = ongoing.keys()[0] if ongoing else None

    def _drop_lease(self, lease_id: int) -> None:
        lease = self._leases.pop(lease_id, None)
        if lease is not None:
            self._leases_by_producer[(lease.partition_key, lease.producer_id)].discard(lease_id)

    def _drop_leases(self, partition_key: int, producer_id: int, epoch_max: int | None) -> None:
        """Drop the producer's leases on a partition up to `epoch_max` (None: all)."""
        ids = self._leases_by_producer.get((partition_key, producer_id))
        if not ids:
            return
        for lease_id in list(ids):
            if epoch_max is None or self._leases[lease_id].producer_epoch <= epoch_max:
                del self._leases[lease_id]
                ids.discard(lease_id)
        if not ids:
            del self._leases_by_producer[(partition_key, producer_id)]

    # --- the read path ------------------------------------------------------------------------
    async def find_batches(
        self, requests: Sequence[FindBatchesRequest], fetch_max_bytes: int
    ) -> list[FindBatchesResponse]:
        self._check_open()
        return _reads.find_batches(self, requests, fetch_max_bytes)

    async def list_offsets(
        self, requests: Sequence[ListOffsetsRequest]
    ) -> list[ListOffsetsResponse]:
        self._check_open()
        return _reads.list_offsets(self, requests)

    # --- deletion -----------------------------------------------------------------------------
    def _release(self, batch: StoredBatch, now_ms: int) -> None:
        """Drop a deleted batch's reference to its file (a marker has none)."""
        if not batch.object_key:
            return
        file = self._files[batch.object_key]
        assert file.state is FileState.LIVE and file.live_batches > 0, file
        file.live_batches -= 1
        if file.live_batches == 0:
            file.state = FileState.UNREFERENCED
            file.since_ms = now_ms

    def _trim(self, state: PartitionState, new_start: int, now_ms: int) -> list[StoredBatch]:
        """Delete the batches entirely below `new_start` and move the log start there."""
        assert state.log_start_offset <= new_start <= state.high_watermark
        log = self._logs[state.key]
        deleted: list[StoredBatch] = []
        while len(log) and log.rows[log.head].last_offset < new_start:
            batch = log.pop_oldest()
            state.size_bytes -= batch.size
            self._release(batch, now_ms)
            deleted.append(batch)
        state.log_start_offset = new_start
        aborted = self._aborted[state.key]
        gone = bisect.bisect_left(aborted, new_start, key=_marker_offset)
        if gone:
            del aborted[:gone]
        return deleted

    async def delete_records(
        self, requests: Sequence[DeleteRecordsRequest]
    ) -> list[DeleteRecordsResponse]:
        self._check_open()
        now = self._clock.now_ms()
        responses = []
        for request in requests:
            state = self.partition(request.topic_partition)
            decision = _reads.decide_delete_records(state, request.offset)
            if state is not None and decision.new_log_start_offset is not None:
                self._trim(state, decision.new_log_start_offset, now)
            responses.append(decision.response)
        return responses

    async def enforce_retention(self, max_batches: int = 10_000) -> RetentionResult:
        self._check_open()
        now = self._clock.now_ms()
        budget = max_batches
        deleted_batches = deleted_bytes = 0
        more = False
        for name in sorted(self._topics):
            for state in self._topics[name].partitions:
                victims, partition_more = _reads.retention_victims(
                    state, self._logs[state.key].oldest(), now, budget
                )
                more = more or partition_more
                if victims:
                    new_start = max(state.log_start_offset, victims[-1].last_offset + 1)
                    trimmed = self._trim(state, new_start, now)
                    assert trimmed == victims
                    deleted_batches += len(victims)
                    deleted_bytes += sum(v.size for v in victims)
                    budget -= len(victims)
        self._expire_producers(now)
        return RetentionResult(deleted_batches, deleted_bytes, more)

    def _expire_producers(self, now_ms: int) -> None:
        for entries in self._producers.values():
            expired = [
                pid for pid, e in entries.items() if is_expired(e, now_ms, self._expiration_ms)
            ]
            for pid in expired:
                del entries[pid]

    # --- object lifecycle ---------------------------------------------------------------------
    async def condemn_objects(self, keys: Sequence[str]) -> list[str]:
        self._check_open()
        now = self._clock.now_ms()
        condemned = []
        for key in keys:
            file = self._files.get(key)
            if file is None:
                file = self._files[key] = _File(FileState.CONDEMNED, 0, now)
            if file.state is FileState.CONDEMNED:
                condemned.append(key)
        return condemned

    async def files_to_delete(self, older_than_ms: int, limit: int = 1000) -> list[FileInfo]:
        self._check_open()
        candidates = sorted(
            (f.since_ms, key)
            for key, f in self._files.items()
            if f.state is not FileState.LIVE and f.since_ms < older_than_ms
        )
        return [self._files[key].info(key) for _, key in candidates[: max(0, limit)]]

    async def forget_files(self, keys: Sequence[str]) -> None:
        self._check_open()
        for key in keys:
            file = self._files.get(key)
            if file is not None and file.state is not FileState.LIVE:
                del self._files[key]

    async def file_info(self, keys: Sequence[str]) -> list[FileInfo | None]:
        self._check_open()
        return [f.info(k) if (f := self._files.get(k)) is not None else None for k in keys]

    async def file_stats(self) -> FileStats:
        self._check_open()
        counts = {state: [0, 0] for state in FileState}
        for file in self._files.values():
            counts[file.state][0] += 1
            counts[file.state][1] += file.size
        return FileStats(
            live_objects=counts[FileState.LIVE][0],
            live_bytes=counts[FileState.LIVE][1],
            unreferenced_objects=counts[FileState.UNREFERENCED][0],
            unreferenced_bytes=counts[FileState.UNREFERENCED][1],
            condemned_objects=counts[FileState.CONDEMNED][0],
            condemned_bytes=counts[FileState.CONDEMNED][1],
        )

    # --- inspection ---------------------------------------------------------------------------
    async def describe_producers(self, topic_partition: TopicPartition) -> list[ProducerSnapshot]:
        self._check_open()
        state = self.partition(topic_partition)
        if state is None:
            return []
        now = self._clock.now_ms()
        entries = self._producers[state.key]
        return [
            producer_snapshot(entries[pid])
            for pid in sorted(entries)
            if not is_expired(entries[pid], now, self._expiration_ms)
        ]

    @property
    def commit_bounds(self) -> CommitBounds:
        return CommitBounds(self._object_prefix, self._commit_age_max_ms)

    async def close(self) -> None:
        self._closed = True
