"""The in-memory store: the coordinator's state in this process's dicts and lists.

A step never suspends (`run_inline`), so it is atomic with respect to other coroutines; reads
run inline too. Everything here is storage: the rules are the engine's. Each partition's log and
what is keyed by it are in `memory_state`, the store's read view in `memory_reads`.
"""

from __future__ import annotations

import asyncio
import bisect
import collections
import itertools
from collections.abc import Callable, Coroutine, Iterator, Mapping
from typing import Any, TypeVar

from msgspec.structs import replace

from diskless._scram import ScramCredential, ScramMechanism
from diskless._types import CommittedOffset, GroupOwnership, TopicPartition
from diskless.coordinator._backends.memory_reads import MemoryReads, marker_offset, pick
from diskless.coordinator._backends.memory_state import Partition
from diskless.coordinator._feed import ChangeListener, ChangeListeners, recorded
from diskless.coordinator._rules.acls import AclBinding
from diskless.coordinator._rules.commit import ProducerKey
from diskless.coordinator._rules.files import FileRow
from diskless.coordinator._rules.rows import (
    PartitionState,
    TxnLease,
)
from diskless.coordinator._rules.txn import first_ongoing
from diskless.coordinator._store import (
    BatchRefs,
    Changes,
    Durability,
    Needs,
    Operation,
    Query,
    Snapshot,
    StoreStep,
    TopicRow,
    run_inline,
)
from diskless.coordinator._values import BrokerRegistration
from diskless.txn import TxnRecord

T = TypeVar("T")


class MemoryStore(StoreStep, MemoryReads):
    """A `CoordinatorStore` in memory; it is its own step transaction and read view."""

    def __init__(self) -> None:
        self._topics: dict[str, TopicRow] = {}
        self._partitions: dict[TopicPartition, Partition] = {}
        self._by_key: dict[int, Partition] = {}
        self._files: dict[str, FileRow] = {}
        self._brokers: dict[int, int] = {}
        self._registrations: dict[int, BrokerRegistration] = {}
        self._counters: dict[str, int] = {}
        self._txns: dict[str, TxnRecord] = {}
        self._group_offsets: dict[str, dict[TopicPartition, CommittedOffset]] = {}
        self._group_owners: dict[str, GroupOwnership] = {}
        self._group_states: dict[str, bytes] = {}
        self._share_states: dict[str, dict[TopicPartition, bytes]] = {}
        self._scram: dict[tuple[str, ScramMechanism], ScramCredential] = {}
        self._leases: dict[int, TxnLease] = {}
        self._acls: set[AclBinding] = set()
        self._resource_configs: dict[tuple[int, str], dict[str, str]] = {}
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
            snapshot.leases = pick(needs.leases, self._leases)
        if needs.brokers:
            snapshot.broker_epochs = pick(needs.brokers, self._brokers)
        if needs.all_broker_registrations:
            snapshot.broker_registrations = dict(self._registrations)
        elif needs.broker_registrations:
            snapshot.broker_registrations = pick(needs.broker_registrations, self._registrations)
        if needs.groups:
            snapshot.groups = pick(needs.groups, self._group_owners)
        if needs.files:
            snapshot.files = pick(needs.files, self._files)
        if needs.txns:
            snapshot.txns = pick(needs.txns, self._txns)
        if needs.topics or needs.counters:
            snapshot.topics = pick(needs.topics, self._topics)
            snapshot.counters = pick(needs.counters, self._counters)
        if needs.batch_refs or needs.batches or needs.retained_partitions:
            self._load_logs(needs, snapshot)
        if needs.scram_users:
            snapshot.scram = await self.scram_credentials(list(needs.scram_users))
        if needs.resource_configs:
            snapshot.resource_configs = {
                key: dict(self._resource_configs[key])
                for key in needs.resource_configs
                if key in self._resource_configs
            }
        if needs.acls:
            snapshot.acls = sorted(self._acls)
        if needs.share_partitions:
            snapshot.share_states = {
                (group_id, tp): blob
                for group_id, tp in needs.share_partitions
                if (blob := self._share_states.get(group_id, {}).get(tp)) is not None
            }
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

    def _topic_partitions(self, name: str) -> Iterator[Partition]:
        for index in range(self._topics[name].partition_count):
            yield self._partitions[TopicPartition(name, index)]

    # --- StoreStep: apply ----------------------------------------------------------------------
    async def apply(self, changes: Changes) -> list[int]:
        if (
            changes.topics_deleted
            or changes.topics_created
            or changes.partitions_added
            or changes.topic_configs
        ):
            self._apply_topics(changes)
        if changes.broker_epochs or changes.counters or changes.broker_registrations:
            self._brokers.update(changes.broker_epochs)
            self._counters.update(changes.counters)
            self._registrations.update(changes.broker_registrations)
        self._group_owners.update(changes.groups)
        self._group_states.update(changes.group_states)
        for group_id in changes.group_states_deleted:
            self._group_states.pop(group_id, None)
        for group_id in changes.share_groups_deleted:
            self._share_states.pop(group_id, None)
        for (group_id, tp), blob in changes.share_states.items():
            self._share_states.setdefault(group_id, {})[tp] = blob
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
        for resource, configs in changes.resource_configs.items():
            if configs:
                self._resource_configs[resource] = dict(configs)
            else:
                self._resource_configs.pop(resource, None)
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
            del aborted[: bisect.bisect_left(aborted, offset, key=marker_offset)]

    def _apply_topics(self, changes: Changes) -> None:
        for name in changes.topics_deleted:
            self._delete_topic(name)
        for row in changes.topics_created:
            self._topics[row.name] = row._replace(partition_count=0)
            self._grow(row.name, row.partition_count)
        for name, total in changes.partitions_added:
            self._grow(name, total)
        for name, config in changes.topic_configs.items():
            self._topics[name] = self._topics[name]._replace(config=config)
            for partition in self._topic_partitions(name):
                partition.state.config = config

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
        for key, entry_aborted in changes.aborted:  # in marker order (a cleaning's go back)
            bisect.insort(by_key[key].aborted, entry_aborted, key=marker_offset)
        self._txns.update(changes.txns)
        for (group_id, tp), committed in changes.group_offsets.items():
            self._group_offsets.setdefault(group_id, {})[tp] = committed
        for group_id, tp in changes.group_offsets_deleted:
            self._group_offsets.get(group_id, {}).pop(tp, None)
        for group_id in changes.group_offsets_cleared:
            self._group_offsets.pop(group_id, None)
        if changes.leases_released or changes.broker_leases_dropped:
            self._signal_release()
        return granted

    def _grow(self, name: str, total: int) -> None:
        topic = self._topics[name]
        for index in range(topic.partition_count, total):
            tp = TopicPartition(name, index)
            partition = Partition(PartitionState(next(self._partition_keys), tp, topic.config))
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
        for shares in self._share_states.values():
            for tp in [tp for tp in shares if tp.topic == name]:
                del shares[tp]

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
