"""Committing several objects in one step, with the results of committing them one by one.

A broker whose commits queue behind the coordinator commits every uploaded object waiting in
line at once: one load, one apply and one durable write instead of one each. The objects are
still planned one after another, each on the state the previous ones left: `CommitGroup` lays
what the planned objects changed (partitions, producer entries, files, released leases) over the
loaded snapshot, so `plan_commit` sees exactly what a separate commit would have loaded.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Generic, TypeVar

from diskless._types import TopicPartition
from diskless.coordinator._rules.commit import CommitPlan, Lookup, ProducerKey
from diskless.coordinator._rules.files import FileRow, committed_file
from diskless.coordinator._rules.rows import PartitionState, StoredBatch, TxnLease
from diskless.txn import ProducerEntry

K = TypeVar("K")
V = TypeVar("V")


class _Overlay(Generic[K, V]):
    """`top` over `base`: what the group changed, else what was loaded."""

    __slots__ = ("base", "top")

    def __init__(self, top: Mapping[K, V], base: Lookup[K, V]) -> None:
        self.top = top
        self.base = base

    def get(self, key: K, /) -> V | None:
        found = self.top.get(key)
        return found if found is not None else self.base.get(key)


class _Unreleased:
    """The loaded leases but those the group's earlier objects released (and so deleted)."""

    __slots__ = ("base", "released")

    def __init__(self, base: Lookup[int, TxnLease], released: set[int]) -> None:
        self.base = base
        self.released = released

    def get(self, lease_id: int, /) -> TxnLease | None:
        return None if lease_id in self.released else self.base.get(lease_id)


class CommitGroup:
    """The state of a group commit after the objects planned so far, and their merged changes."""

    def __init__(
        self,
        partitions: Lookup[TopicPartition, PartitionState],
        producers: Lookup[ProducerKey, ProducerEntry],
        leases: Lookup[int, TxnLease],
        files: Mapping[str, FileRow],
    ) -> None:
        self.files: dict[str, FileRow] = {}
        """The rows of the files committed so far, by key."""
        self.batches: list[StoredBatch] = []
        self.partition_states: dict[TopicPartition, PartitionState] = {}
        self.producer_entries: dict[ProducerKey, ProducerEntry] = {}
        self.released_leases: list[int] = []
        self.opened_txns: list[tuple[int, int, int]] = []
        self._released: set[int] = set()
        self.partitions = _Overlay(self.partition_states, partitions)
        self.producers = _Overlay(self.producer_entries, producers)
        self.leases = _Unreleased(leases, self._released)
        self.stored_files = _Overlay(self.files, files)

    def add(self, object_key: str, file_size: int, plan: CommitPlan, now_ms: int) -> None:
        """Lay `plan`, the commit of `object_key` planned on this group's state, over it."""
        self.files[object_key] = committed_file(file_size, len(plan.new_batches), now_ms)
        self.batches.extend(plan.new_batches)
        self.partition_states.update(plan.partitions)
        self.producer_entries.update(plan.producers)
        for lease_id in plan.released_leases:
            if lease_id not in self._released:
                self._released.add(lease_id)
                self.released_leases.append(lease_id)
        self.opened_txns.extend(plan.opened_txns)
