"""The in-memory store's read view: lookups over the store's own dicts and lists.

`MemoryStore` is its own read view; its lookups answer at once, inline on the event loop.
"""

from __future__ import annotations

import bisect
import itertools
import operator
from collections.abc import AsyncIterator, Collection, Sequence
from typing import TypeVar

from diskless._scram import ScramCredential, ScramMechanism
from diskless._types import CommittedOffset, GroupOwnership, GroupRecord, TopicPartition
from diskless.coordinator._backends.memory_state import Partition
from diskless.coordinator._rules.acls import ACL_VERSION_COUNTER, AclBinding
from diskless.coordinator._rules.commit import ProducerKey
from diskless.coordinator._rules.files import FileRow
from diskless.coordinator._rules.ownership import MEMBERSHIP_VERSION_COUNTER
from diskless.coordinator._rules.reads import FETCH_HEAD_ROWS, FetchHead
from diskless.coordinator._rules.rows import (
    AbortedTxn,
    LeaseHolder,
    PartitionState,
    StoredBatch,
    TxnLease,
    TxnRegistration,
)
from diskless.coordinator._store import ReadView, TopicRow
from diskless.coordinator._values import BrokerRegistration, FileState, MetadataStats
from diskless.txn import ProducerEntry, TxnRecord

K = TypeVar("K")
V = TypeVar("V")

marker_offset = operator.attrgetter("last_offset")


class MemoryReads(ReadView):
    """The read side of `MemoryStore`, over the state it keeps."""

    _topics: dict[str, TopicRow]
    _partitions: dict[TopicPartition, Partition]
    _by_key: dict[int, Partition]
    _files: dict[str, FileRow]
    _registrations: dict[int, BrokerRegistration]
    _counters: dict[str, int]
    _txns: dict[str, TxnRecord]
    _group_offsets: dict[str, dict[TopicPartition, CommittedOffset]]
    _group_owners: dict[str, GroupOwnership]
    _group_states: dict[str, bytes]
    _share_states: dict[str, dict[TopicPartition, bytes]]
    _scram: dict[tuple[str, ScramMechanism], ScramCredential]
    _leases: dict[int, TxnLease]
    _acls: set[AclBinding]
    _resource_configs: dict[tuple[int, str], dict[str, str]]
    _leases_by_producer: dict[ProducerKey, set[int]]

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
        return aborted[bisect.bisect_left(aborted, offset, key=marker_offset) :]

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
        return pick(transactional_ids, self._txns)

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

    async def group_records(self, group_ids: Sequence[str] | None) -> dict[str, GroupRecord]:
        with_offsets = {g for g, offsets in self._group_offsets.items() if offsets}
        known = with_offsets | self._group_owners.keys()
        named = known if group_ids is None else known.intersection(group_ids)
        return {g: GroupRecord(self._group_owners.get(g), g in with_offsets) for g in sorted(named)}

    async def group_state(self, group_id: str) -> bytes | None:
        return self._group_states.get(group_id)

    async def share_states(
        self, group_id: str, partitions: Sequence[TopicPartition] | None
    ) -> dict[TopicPartition, bytes]:
        stored = self._share_states.get(group_id, {})
        if partitions is None:
            return dict(sorted(stored.items()))
        return {tp: stored[tp] for tp in partitions if tp in stored}

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

    async def txns_after(self, after: str, limit: int) -> list[TxnRecord]:
        return [self._txns[tid] for tid in sorted(t for t in self._txns if t > after)[:limit]]

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

    async def resource_configs(
        self, resource_type: int, names: Sequence[str] | None
    ) -> dict[str, dict[str, str]]:
        named = None if names is None else set(names)
        return {
            name: dict(configs)
            for (kind, name), configs in sorted(self._resource_configs.items())
            if kind == resource_type and (named is None or name in named)
        }

    async def counter(self, name: str) -> int:
        return self._counters.get(name, 0)

    async def acl_version(self) -> int:
        return self._counters.get(ACL_VERSION_COUNTER, 0)

    async def membership_version(self) -> int:
        return self._counters.get(MEMBERSHIP_VERSION_COUNTER, 0)

    async def acls(self) -> list[AclBinding]:
        return sorted(self._acls)


def pick(keys: Collection[K], source: dict[K, V]) -> dict[K, V]:
    picked = {}
    for key in keys:
        if (value := source.get(key)) is not None:
            picked[key] = value
    return picked
