"""The in-memory store: the coordinator's state in this process's dicts and lists.

A step never suspends (`run_inline`), so it is atomic with respect to other coroutines; reads
run inline too. Everything here is storage: the rules are the engine's.
"""

from __future__ import annotations

import asyncio
import bisect
import collections
import itertools
import operator
from collections.abc import (
    AsyncIterator,
    Callable,
    Collection,
    Coroutine,
    Iterator,
    Mapping,
    Sequence,
)
from typing import Any, TypeVar

from msgspec.structs import replace
from sortedcontainers import SortedDict

from diskless._scram import ScramCredential, ScramMechanism
from diskless._types import CommittedOffset, GroupOwnership, TopicPartition
from diskless.coordinator._feed import ChangeListener, ChangeListeners, recorded
from diskless.coordinator._rules.acls import ACL_VERSION_COUNTER, AclBinding
from diskless.coordinator._rules.commit import ProducerKey
from diskless.coordinator._rules.files import FileRow
from diskless.coordinator._rules.reads import FETCH_HEAD_ROWS, FetchHead
from diskless.coordinator._rules.rows import (
    AbortedTxn,
    LeaseHolder,
    PartitionState,
    StoredBatch,
    TxnLease,
    TxnRegistration,
)
from diskless.coordinator._rules.txn import first_ongoing
from diskless.coordinator._store import (
    BatchRefs,
    Changes,
    Durability,
    Needs,
    Operation,
    Query,
    ReadView,
    Snapshot,
    StoreStep,
    TopicRow,
    run_inline,
)
from diskless.coordinator._values import (
    BrokerRegistration,
    FileState,
    MetadataStats,
)
from diskless.txn import ProducerEntry, TxnRecord

T = TypeVar("T")
K = TypeVar("K")
V = TypeVar("V")

_COMPACT_MIN = 1024
"""Deleted list heads are compacted once they are this long and half of the list."""

_base_offset = operator.attrgetter("base_offset")
_running_max = operator.attrgetter("ts_running_max")
_marker_offset = operator.attrgetter("last_offset")


def _is_row(batch: StoredBatch) -> bool:
    return not batch.is_extent


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
        self._enqueue(batch)

    def _enqueue(self, batch: StoredBatch) -> None:
        queue = self.max_queue
        while queue and queue[-1].timestamp < batch.timestamp:
            queue.pop()
        queue.append(batch)

    def below(self, offset: int) -> Iterator[StoredBatch]:
        """The stored batches lying entirely below `offset`, oldest first."""
        for i in range(self.head, len(self.rows)):
            if self.rows[i].last_offset >= offset:
                return
            yield self.rows[i]

    def trim(self, offset: int) -> None:
        """Delete the batches lying entirely below `offset`."""
        rows = self.rows
        while self.head < len(rows) and rows[self.head].last_offset < offset:
            if self.max_queue and self.max_queue[0] is rows[self.head]:
                self.max_queue.popleft()
            self.head += 1
        if self.head >= _COMPACT_MIN and self.head * 2 >= len(rows):
            del rows[: self.head]
            self.head = 0

    def consolidated(self) -> int:
        """Where the extents (a prefix) end: the index of the first batch row."""
        return bisect.bisect_left(self.rows, True, lo=self.head, key=_is_row)

    def swap(self, extent: StoredBatch) -> None:
        """Replace the rows within the extent's offsets (right after the extents) by it."""
        start = self.consolidated()
        end = bisect.bisect_right(self.rows, extent.last_offset, lo=start, key=_base_offset)
        rows = self.rows
        assert rows[start].base_offset == extent.base_offset, (rows[start], extent)
        assert rows[end - 1].last_offset == extent.last_offset, (rows[end - 1], extent)
        rows[start:end] = [extent]
        self.max_queue.clear()
        for i in range(self.head, len(rows)):
            self._enqueue(rows[i])

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


class _Partition:
    """A partition's state and everything keyed by it."""

    def __init__(self, state: PartitionState) -> None:
        self.state = state
        self.log = _Log()
        self.producers: dict[int, ProducerEntry] = {}
        self.registrations: dict[int, TxnRegistration] = {}
        self.ongoing: SortedDict = SortedDict()
        """The ongoing-transaction index: first offset -> producer id."""
        self.aborted: list[AbortedTxn] = []

    def refresh_lso(self) -> None:
        self.state.txn_first_offset = first_ongoing(self.ongoing.items())


class MemoryStore(StoreStep, ReadView):
    """A `CoordinatorStore` in memory; it is its own step transaction and read view."""

    def __init__(self) -> None:
        self._topics: dict[str, TopicRow] = {}
        self._partitions: dict[TopicPartition, _Partition] = {}
        self._by_key: dict[int, _Partition] = {}
        self._files: dict[str, FileRow] = {}
        self._brokers: dict[int, int] = {}
        self._registrations: dict[int, BrokerRegistration] = {}
        self._counters: dict[str, int] = {}
        self._txns: dict[str, TxnRecord] = {}
        self._group_offsets: dict[str, dict[TopicPartition, CommittedOffset]] = {}
        self._group_owners: dict[str, GroupOwnership] = {}
        self._scram: dict[tuple[str, ScramMechanism], ScramCredential] = {}
        self._leases: dict[int, TxnLease] = {}
        self._acls: set[AclBinding] = set()
        self._leases_by_producer: dict[ProducerKey, set[int]] = {}
        self._lease_ids = itertools.count(1)
        self._partition_keys = itertools.count(1)
        self._released: asyncio.Future[None] | None = None
        """Resolved (and replaced) whenever a lease is released: wakes ends waiting for one."""
        self._listeners = ChangeListeners()

    # --- CoordinatorStore ---------------------------------------------------------------------
    async def write(
        self,
        operation: Operation,
        step: Callable[[StoreStep], Coroutine[Any, Any, T]],
        durability: Durability = Durability.DURABLE,
        outcome_unknown_on_failure: bool = False,
    ) -> T:
        run, runs = recorded(step)
        result = run_inline(run(self))
        self._listeners.publish_runs(runs)
        return result

    async def read(self, query: Query[T]) -> T:
        return await query(self)

    def watch_changes(self, listener: ChangeListener) -> Callable[[], None]:
        return self._listeners.add(listener)  # every change is this process's

    def release_signal(self) -> asyncio.Future[None] | None:
        if self._released is None or self._released.done():
            self._released = asyncio.get_running_loop().create_future()
        return self._released

    async def close(self) -> None:
        pass

    # --- StoreStep: load -----------------------------------------------------------------------
    async def load(self, needs: Needs) -> Snapshot:
        # Plain loops: a step usually needs a handful of keys, where comprehensions cost more.
        found = self._partitions
        partitions = {}
        for tp in needs.partitions:
            if (partition := found.get(tp)) is not None:
                partitions[tp] = partition.state
        snapshot = Snapshot(partitions)
        if needs.producers:
            producers = {}
            for tp, pid in needs.producers:
                partition = found.get(tp)
                if partition is not None and (entry := partition.producers.get(pid)) is not None:
                    producers[(partition.state.key, pid)] = entry
            snapshot.producers = producers
        if needs.registrations:
            registrations = {}
            for tp, pid in needs.registrations:
                partition = found.get(tp)
                if partition is not None and (reg := partition.registrations.get(pid)) is not None:
                    registrations[(partition.state.key, pid)] = reg
            snapshot.registrations = registrations
        if needs.other_ongoing:
            ongoing = {}
            for tp, pid in needs.other_ongoing:
                if (partition := found.get(tp)) is not None:
                    first = first_ongoing(partition.ongoing.items(), pid)
                    if first is not None:
                        ongoing[(partition.state.key, pid)] = first
            snapshot.other_ongoing = ongoing
        if needs.leases:
            snapshot.leases = _pick(needs.leases, self._leases)
        if needs.brokers:
            snapshot.broker_epochs = _pick(needs.brokers, self._brokers)
        if needs.broker_registrations:
            snapshot.broker_registrations = _pick(needs.broker_registrations, self._registrations)
        if needs.groups:
            snapshot.groups = _pick(needs.groups, self._group_owners)
        if needs.files:
            snapshot.files = _pick(needs.files, self._files)
        if needs.txns:
            snapshot.txns = _pick(needs.txns, self._txns)
        if needs.topics or needs.counters:
            snapshot.topics = _pick(needs.topics, self._topics)
            snapshot.counters = _pick(needs.counters, self._counters)
        if needs.batch_refs or needs.batches or needs.retained_partitions:
            self._load_logs(needs, snapshot)
        if needs.scram_users:
            snapshot.scram = await self.scram_credentials(list(needs.scram_users))
        if needs.acls:
            snapshot.acls = sorted(self._acls)
        return snapshot

    def _load_logs(self, needs: Needs, snapshot: Snapshot) -> None:
        refs = {}
        for key, offset in needs.batch_refs.items():
            below = list(self._by_key[key].log.below(offset))
            files = collections.Counter(b.object_key for b in below if b.object_key)
            refs[key] = BatchRefs(dict(files), sum(b.size for b in below))
        snapshot.batch_refs = refs
        snapshot.batches = {
            key: list(itertools.islice(self._by_key[key].log.from_offset(offset), limit))
            for key, (offset, limit) in needs.batches.items()
        }
        if needs.retained_partitions:
            snapshot.retained_partitions = [
                p.state
                for name in sorted(self._topics)
                for p in self._topic_partitions(name)
                if (p.state.config.retention_ms >= 0 or p.state.config.retention_bytes >= 0)
                and p.state.high_watermark > p.state.log_start_offset
            ]

    def _topic_partitions(self, name: str) -> Iterator[_Partition]:
        for index in range(self._topics[name].partition_count):
            yield self._partitions[TopicPartition(name, index)]

    # --- StoreStep: apply ----------------------------------------------------------------------
    async def apply(self, changes: Changes) -> list[int]:
        if changes.topics_deleted or changes.topics_created or changes.partitions_added:
            self._apply_topics(changes)
        if changes.broker_epochs or changes.counters or changes.broker_registrations:
            self._brokers.update(changes.broker_epochs)
            self._counters.update(changes.counters)
            self._registrations.update(changes.broker_registrations)
        self._group_owners.update(changes.groups)
        if changes.trims:
            self._apply_trims(changes.trims)
        for file_key, file in changes.files.items():
            if file is None:
                self._files.pop(file_key, None)
            else:
                self._files[file_key] = file
        by_key = self._by_key
        for extent in changes.extents:
            by_key[extent.partition_key].log.swap(extent)
        for batch in changes.batches:
            by_key[batch.partition_key].log.append(batch)
        for new in changes.partitions:
            state = by_key[new.key].state
            state.high_watermark = new.high_watermark
            state.log_start_offset = new.log_start_offset
            state.size_bytes = new.size_bytes
            state.ts_running_max = new.ts_running_max
        for (key, pid), entry in changes.producers.items():
            by_key[key].producers[pid] = entry
        if changes.producers_idle_before is not None:
            self._drop_idle_producers(changes.producers_idle_before)
        for credential_key, credential in changes.scram.items():
            if credential is None:
                self._scram.pop(credential_key, None)
            else:
                self._scram[credential_key] = credential
        self._acls.difference_update(changes.acls_deleted)
        self._acls.update(changes.acls_created)
        if changes.has_txn_state:
            return self._apply_txn_state(changes)
        return []

    def _apply_trims(self, trims: Mapping[int, int]) -> None:
        for key, offset in trims.items():
            partition = self._by_key[key]
            partition.log.trim(offset)
            aborted = partition.aborted
            del aborted[: bisect.bisect_left(aborted, offset, key=_marker_offset)]

    def _apply_topics(self, changes: Changes) -> None:
        for name in changes.topics_deleted:
            self._delete_topic(name)
        for row in changes.topics_created:
            self._topics[row.name] = row._replace(partition_count=0)
            self._grow(row.name, row.partition_count)
        for name, total in changes.partitions_added:
            self._grow(name, total)

    def _apply_txn_state(self, changes: Changes) -> list[int]:
        by_key = self._by_key
        for (key, pid), registration in changes.registrations.items():
            by_key[key].registrations[pid] = registration
        for (key, pid), epoch in changes.registrations_dropped:
            registrations = by_key[key].registrations
            dropped = registrations.get(pid)
            if dropped is not None and dropped.producer_epoch <= epoch:
                del registrations[pid]
        for lease_id in changes.leases_released:
            self._drop_lease(lease_id)
        for producer_key, epoch_max in changes.leases_dropped:
            self._drop_leases(producer_key, epoch_max)
        if changes.broker_leases_dropped:
            for lease in list(self._leases.values()):
                below = changes.broker_leases_dropped.get(lease.broker_id)
                if below is not None and lease.broker_epoch < below:
                    self._drop_lease(lease.lease_id)
        granted = []
        for lease in changes.leases_granted:
            lease_id = next(self._lease_ids)
            self._leases[lease_id] = replace(lease, lease_id=lease_id)
            self._leases_by_producer.setdefault(
                (lease.partition_key, lease.producer_id), set()
            ).add(lease_id)
            granted.append(lease_id)
        for key, first, pid in changes.ongoing_opened:
            partition = by_key[key]
            partition.ongoing[first] = pid
            partition.refresh_lso()
        for key, first in changes.ongoing_closed:
            partition = by_key[key]
            del partition.ongoing[first]
            partition.refresh_lso()
        for key, entry_aborted in changes.aborted:
            by_key[key].aborted.append(entry_aborted)
        self._txns.update(changes.txns)
        for (group_id, tp), committed in changes.group_offsets.items():
            self._group_offsets.setdefault(group_id, {})[tp] = committed
        if changes.leases_released or changes.broker_leases_dropped:
            self._signal_release()
        return granted

    def _grow(self, name: str, total: int) -> None:
        topic = self._topics[name]
        for index in range(topic.partition_count, total):
            tp = TopicPartition(name, index)
            partition = _Partition(PartitionState(next(self._partition_keys), tp, topic.config))
            self._partitions[tp] = self._by_key[partition.state.key] = partition
        self._topics[name] = topic._replace(partition_count=total)

    def _delete_topic(self, name: str) -> None:
        topic = self._topics.pop(name)
        for index in range(topic.partition_count):
            partition = self._partitions.pop(TopicPartition(name, index))
            key = partition.state.key
            del self._by_key[key]
            for producer_key in [k for k in self._leases_by_producer if k[0] == key]:
                self._drop_leases(producer_key, None)
        for offsets in self._group_offsets.values():
            for tp in [tp for tp in offsets if tp.topic == name]:
                del offsets[tp]

    def _drop_idle_producers(self, idle_before_ms: int) -> None:
        for partition in self._by_key.values():
            entries = partition.producers
            idle = [
                pid
                for pid, e in entries.items()
                if e.current_txn_first_offset is None and e.last_update_ms <= idle_before_ms
            ]
            for pid in idle:
                del entries[pid]

    def _drop_lease(self, lease_id: int) -> None:
        lease = self._leases.pop(lease_id, None)
        if lease is not None:
            self._leases_by_producer[(lease.partition_key, lease.producer_id)].discard(lease_id)

    def _drop_leases(self, key: ProducerKey, epoch_max: int | None) -> None:
        ids = self._leases_by_producer.get(key)
        if not ids:
            return
        for lease_id in list(ids):
            if epoch_max is None or self._leases[lease_id].producer_epoch <= epoch_max:
                del self._leases[lease_id]
                ids.discard(lease_id)
        if not ids:
            del self._leases_by_producer[key]

    def _signal_release(self) -> None:
        released, self._released = self._released, None
        if released is not None and not released.done():
            released.set_result(None)

    # --- ReadView -----------------------------------------------------------------------------
    async def partition(self, tp: TopicPartition) -> PartitionState | None:
        found = self._partitions.get(tp)
        return None if found is None else found.state

    async def partitions(self, tps: Sequence[TopicPartition]) -> list[PartitionState | None]:
        return [None if (p := self._partitions.get(tp)) is None else p.state for tp in tps]

    async def fetch_heads(
        self, wanted: Sequence[tuple[TopicPartition, int]], rows: int = FETCH_HEAD_ROWS
    ) -> list[FetchHead | None]:
        heads: list[FetchHead | None] = []
        for tp, offset in wanted:
            found = self._partitions.get(tp)
            if found is None:
                heads.append(None)
                continue
            loaded = list(itertools.islice(found.log.from_offset(offset), rows))
            aborted = bool(self._aborted_from(found.state.key, offset))
            heads.append(FetchHead(found.state, loaded, len(loaded) < rows, aborted))
        return heads

    async def aborted_within(
        self, ranges: Sequence[tuple[PartitionState, int, int]]
    ) -> list[list[AbortedTxn]]:
        return [
            [a for a in self._aborted_from(state.key, offset) if a.first_offset < end]
            for state, offset, end in ranges
        ]

    async def batches_from(self, state: PartitionState, offset: int) -> AsyncIterator[StoredBatch]:
        for row in self._by_key[state.key].log.from_offset(offset):
            yield row

    async def max_timestamp_batch(self, state: PartitionState) -> StoredBatch | None:
        return self._by_key[state.key].log.max_timestamp()

    async def first_running_max_at_least(
        self, state: PartitionState, ts: int
    ) -> StoredBatch | None:
        return self._by_key[state.key].log.first_running_max_at_least(ts)

    async def aborted_from(self, state: PartitionState, offset: int) -> AsyncIterator[AbortedTxn]:
        for aborted in self._aborted_from(state.key, offset):
            yield aborted

    def _aborted_from(self, key: int, offset: int) -> list[AbortedTxn]:
        aborted = self._by_key[key].aborted
        return aborted[bisect.bisect_left(aborted, offset, key=_marker_offset) :]

    async def topics(self, names: Sequence[str] | None) -> list[TopicRow]:
        if names is None:
            return [self._topics[name] for name in sorted(self._topics)]
        return [self._topics[name] for name in names if name in self._topics]

    async def producers_of(self, partition_key: int) -> list[ProducerEntry]:
        entries = self._by_key[partition_key].producers
        return [entries[pid] for pid in sorted(entries)]

    async def files(self, keys: Sequence[str]) -> dict[str, FileRow]:
        return {k: f for k in keys if (f := self._files.get(k)) is not None}

    async def unconsolidated_heads(self) -> list[tuple[PartitionState, StoredBatch]]:
        return [
            (p.state, p.log.rows[p.log.consolidated()])
            for p in self._by_key.values()
            if len(p.log) and not p.log.rows[-1].is_extent
        ]

    async def unconsolidated_rows(self, state: PartitionState) -> AsyncIterator[StoredBatch]:
        log = self._by_key[state.key].log
        for row in itertools.islice(log.rows, log.consolidated(), None):
            yield row

    async def metadata_stats(self) -> MetadataStats:
        rows = extents = retained = 0
        for partition in self._by_key.values():
            log = partition.log
            consolidated = log.consolidated() - log.head
            extents += consolidated
            rows += len(log) - consolidated
            retained += partition.state.size_bytes
        return MetadataStats(rows, extents, retained, None)

    async def dead_files(self, older_than_ms: int, limit: int) -> list[tuple[str, FileRow]]:
        candidates = sorted(
            (f.since_ms, key)
            for key, f in self._files.items()
            if f.state is not FileState.LIVE and f.since_ms < older_than_ms
        )
        return [(key, self._files[key]) for _, key in candidates[:limit]]

    async def file_totals(self) -> dict[FileState, tuple[int, int]]:
        totals: dict[FileState, tuple[int, int]] = {}
        for file in self._files.values():
            count, size = totals.get(file.state, (0, 0))
            totals[file.state] = (count + 1, size + file.size)
        return totals

    async def txns(self, transactional_ids: Sequence[str]) -> dict[str, TxnRecord]:
        return _pick(transactional_ids, self._txns)

    async def txn_registrations(
        self, keys: Sequence[tuple[TopicPartition, int]]
    ) -> dict[tuple[TopicPartition, int], TxnRegistration]:
        found = {}
        for tp, pid in keys:
            partition = self._partitions.get(tp)
            if partition is not None and (reg := partition.registrations.get(pid)) is not None:
                found[(tp, pid)] = reg
        return found

    async def broker_registrations(self) -> list[BrokerRegistration]:
        return [self._registrations[b] for b in sorted(self._registrations)]

    async def group_offsets(self, group_id: str) -> dict[TopicPartition, CommittedOffset]:
        return dict(self._group_offsets.get(group_id, {}))

    async def group_ownership(self, group_id: str) -> GroupOwnership | None:
        return self._group_owners.get(group_id)

    async def scram_credentials(
        self, users: Sequence[str] | None
    ) -> dict[tuple[str, ScramMechanism], ScramCredential]:
        named = None if users is None else set(users)
        return {k: c for k, c in self._scram.items() if named is None or k[0] in named}

    async def txns_due(self, now_ms: int, limit: int) -> list[TxnRecord]:
        due = sorted(
            (record.due_ms, tid)
            for tid, record in self._txns.items()
            if record.due_ms is not None and record.due_ms < now_ms
        )
        return [self._txns[tid] for _, tid in due[:limit]]

    async def lease_holders(
        self, partitions: Sequence[TopicPartition], producer_id: int, epoch: int, after_ms: int
    ) -> list[LeaseHolder]:
        earliest: dict[tuple[int, int], int] = {}
        for tp in dict.fromkeys(partitions):
            found = self._partitions.get(tp)
            if found is None:
                continue
            for lease_id in self._leases_by_producer.get((found.state.key, producer_id), ()):
                lease = self._leases[lease_id]
                if lease.producer_epoch == epoch and lease.expires_ms > after_ms:
                    holder = (lease.broker_id, lease.broker_epoch)
                    earliest[holder] = min(lease.expires_ms, earliest.get(holder, lease.expires_ms))
        return [LeaseHolder(b, e, expires) for (b, e), expires in sorted(earliest.items())]

    async def acl_version(self) -> int:
        return self._counters.get(ACL_VERSION_COUNTER, 0)

    async def acls(self) -> list[AclBinding]:
        return sorted(self._acls)


def _pick(keys: Collection[K], source: dict[K, V]) -> dict[K, V]:
    picked = {}
    for key in keys:
        if (value := source.get(key)) is not None:
            picked[key] = value
    return picked
