"""The engine's transaction operations: the partitions' side of transactions (`_rules.txn`)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Final

import msgspec

from diskless._limits import LEASE_TTL_MS_MAX
from diskless._types import ErrorCode, TopicPartition
from diskless.clock import sleep_unless
from diskless.coordinator._engine.base import EngineBase
from diskless.coordinator._rules.checks import broker_fenced
from diskless.coordinator._rules.commit import ProducerKey
from diskless.coordinator._rules.mirror import read_only
from diskless.coordinator._rules.ownership import lease_wait_deadline
from diskless.coordinator._rules.rows import (
    AbortedTxn,
    PartitionState,
    StoredBatch,
    TxnLease,
    TxnRegistration,
)
from diskless.coordinator._rules.txn import check_lease_grant, check_registration, plan_marker
from diskless.coordinator._store import (
    Changes,
    Durability,
    Needs,
    Operation,
    ReadView,
    Snapshot,
    StoreStep,
)
from diskless.coordinator._values import LeaseRequest, LeaseResult
from diskless.txn import ProducerEntry

NEXT_PRODUCER_ID: Final = "next_producer_id"
"""The counter producer ids are allocated from."""
LEASE_POLL_INTERVAL_S: Final = 0.02
"""How often an end re-checks for leases released by commits (when no release signal exists)."""

_VOLATILE = Durability.VOLATILE


class TransactionOperations(EngineBase):
    """Producer ids, KIP-890 registrations, leases (the commit barrier) and markers."""

    # --- transactions -------------------------------------------------------------------------
    async def allocate_producer_ids(self, count: int) -> int:
        if count < 1:
            raise ValueError(f"count must be >= 1, got {count}")

        async def allocate(db: StoreStep) -> int:
            counters = (await db.load(Needs(counters={NEXT_PRODUCER_ID}))).counters
            first = counters.get(NEXT_PRODUCER_ID, 0)
            await db.apply(Changes(counters={NEXT_PRODUCER_ID: first + count}))
            return first

        return await self._write(Operation.ALLOCATE_PRODUCER_IDS, allocate)

    @staticmethod
    def _txn_needs(producer_id: int, partitions: Sequence[TopicPartition]) -> Needs:
        keys = {(tp, producer_id) for tp in partitions}
        return Needs(partitions=set(partitions), producers=keys, registrations=set(keys))

    async def add_partitions_to_txn(
        self, producer_id: int, producer_epoch: int, partitions: Sequence[TopicPartition]
    ) -> list[ErrorCode]:
        needs = self._txn_needs(producer_id, partitions)
        needs.topics = {tp.topic for tp in partitions}  # a mirrored one is read-only

        async def add(db: StoreStep) -> list[ErrorCode]:
            now = self._clock.now_ms()
            snapshot = await db.load(needs)
            registrations: dict[ProducerKey, TxnRegistration] = {}
            stale_leases: list[tuple[ProducerKey, int | None]] = []
            results = []
            for tp in partitions:
                state = snapshot.partitions.get(tp)
                if state is None:
                    results.append(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)
                    continue
                if read_only(snapshot, tp):
                    results.append(ErrorCode.INVALID_TOPIC_EXCEPTION)
                    continue
                key = (state.key, producer_id)
                error, new = check_registration(
                    self._live(snapshot.producers.get(key), now),
                    registrations.get(key, snapshot.registrations.get(key)),
                    producer_epoch,
                )
                if new is not None:
                    registrations[key] = new
                    stale_leases.append((key, new.producer_epoch - 1))
                results.append(error)
            await db.apply(Changes(registrations=registrations, leases_dropped=stale_leases))
            return results

        return await self._write(Operation.ADD_PARTITIONS_TO_TXN, add, _VOLATILE)

    async def acquire_txn_leases(
        self,
        broker_id: int,
        broker_epoch: int,
        requests: Sequence[LeaseRequest],
        ttl_ms: int,
    ) -> list[LeaseResult]:
        if not 0 < ttl_ms <= LEASE_TTL_MS_MAX:
            raise ValueError(f"ttl_ms must be in (0, {LEASE_TTL_MS_MAX}], got {ttl_ms}")
        requests = list(requests)
        keys = {(r.topic_partition, r.producer_id) for r in requests}
        needs = Needs(
            partitions={r.topic_partition for r in requests},
            producers=keys,
            registrations=set(keys),
            brokers={broker_id},
        )

        async def acquire(db: StoreStep) -> list[LeaseResult]:
            now = self._clock.now_ms()
            expires = now + ttl_ms
            snapshot = await db.load(needs)
            if broker_fenced(broker_id, broker_epoch, snapshot.broker_epochs.get(broker_id)):
                return [LeaseResult(ErrorCode.STALE_BROKER_EPOCH)] * len(requests)
            results: list[LeaseResult | None] = []
            granted: list[TxnLease] = []
            for tp, producer_id, producer_epoch in requests:
                state = snapshot.partitions.get(tp)
                if state is None:
                    results.append(LeaseResult(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION))
                    continue
                key = (state.key, producer_id)
                error = check_lease_grant(
                    self._live(snapshot.producers.get(key), now),
                    snapshot.registrations.get(key),
                    producer_epoch,
                )
                if error is not ErrorCode.NONE:
                    results.append(LeaseResult(error))
                    continue
                granted.append(
                    TxnLease(
                        -1, state.key, producer_id, producer_epoch, expires, broker_id, broker_epoch
                    )
                )
                results.append(None)
            ids = iter(await db.apply(Changes(leases_granted=granted)))
            return [
                LeaseResult(ErrorCode.NONE, next(ids), expires) if r is None else r for r in results
            ]

        return await self._write(Operation.ACQUIRE_TXN_LEASES, acquire, _VOLATILE)

    async def release_txn_leases(self, lease_ids: Sequence[int]) -> None:
        if not lease_ids:
            return
        changes = Changes(leases_released=list(lease_ids))

        async def release(db: StoreStep) -> None:
            await db.apply(changes)

        await self._write(Operation.RELEASE_TXN_LEASES, release, _VOLATILE)

    async def write_txn_markers(
        self,
        producer_id: int,
        producer_epoch: int,
        marker_epoch: int,
        commit: bool,
        coordinator_epoch: int,
        partitions: Sequence[TopicPartition],
    ) -> list[ErrorCode]:
        """The commit barrier, then the markers (see `_rules.txn`)."""
        if marker_epoch <= producer_epoch:
            return [ErrorCode.INVALID_PRODUCER_EPOCH] * len(partitions)
        errors = await self._begin_end(producer_id, producer_epoch, partitions)
        known = [
            tp for tp, error in zip(partitions, errors, strict=True) if error is ErrorCode.NONE
        ]
        if not known:
            return errors
        await self._wait_for_leases(producer_id, producer_epoch, known)
        written = await self._write_markers(
            producer_id, producer_epoch, marker_epoch, commit, coordinator_epoch, known
        )
        by_tp = dict(zip(known, written, strict=True))
        return [by_tp.get(tp, error) for tp, error in zip(partitions, errors, strict=True)]

    async def _begin_end(
        self, producer_id: int, producer_epoch: int, partitions: Sequence[TopicPartition]
    ) -> list[ErrorCode]:
        """Phase 1: mark the registrations of (producer, epoch) ENDING: no new lease from now."""
        needs = Needs(
            partitions=set(partitions), registrations={(tp, producer_id) for tp in partitions}
        )

        async def begin(db: StoreStep) -> list[ErrorCode]:
            snapshot = await db.load(needs)
            await db.apply(Changes(registrations=_ending(snapshot, producer_id, producer_epoch)))
            return [
                ErrorCode.NONE
                if tp in snapshot.partitions
                else ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
                for tp in partitions
            ]

        return await self._write(Operation.END_TXN_MARKERS_BEGIN, begin, _VOLATILE)

    async def _wait_for_leases(
        self, producer_id: int, producer_epoch: int, partitions: Sequence[TopicPartition]
    ) -> None:
        """Phase 2: no lease can be added any more, so this waits at most one lease TTL, and
        no longer than the registrations of the brokers holding them live."""
        clock = self._clock

        async def deadline(view: ReadView) -> int | None:
            now = clock.now_ms()
            holders = await view.lease_holders(partitions, producer_id, producer_epoch, now)
            if not holders:
                return None
            registrations = {r.broker_id: r for r in await view.broker_registrations()}
            return lease_wait_deadline(holders, registrations, now)

        while True:
            deadline_ms = await self._read(deadline)
            if deadline_ms is None:
                return
            delay_s = min(max(0.0, (deadline_ms - clock.now_ms()) / 1000), LEASE_POLL_INTERVAL_S)
            signal = self._store.release_signal()
            if signal is None:
                await clock.sleep(delay_s)
                continue
            await sleep_unless(clock, delay_s, signal)

    def _marker_needs(self, producer_id: int, partitions: Sequence[TopicPartition]) -> Needs:
        needs = self._txn_needs(producer_id, partitions)
        needs.other_ongoing = needs.registrations
        return needs

    def _plan_markers(
        self,
        snapshot: Snapshot,
        partitions: Sequence[TopicPartition],
        producer_id: int,
        producer_epoch: int,
        marker_epoch: int,
        commit: bool,
        coordinator_epoch: int,
    ) -> tuple[dict[TopicPartition, ErrorCode], Changes]:
        """`plan_marker` on every partition, over a snapshot loaded with `_marker_needs`."""
        now = self._clock.now_ms()
        markers: list[StoredBatch] = []
        states: list[PartitionState] = []
        entries: dict[ProducerKey, ProducerEntry] = {}
        closed: list[tuple[int, int]] = []
        aborted: list[tuple[int, AbortedTxn]] = []
        ended: list[tuple[ProducerKey, int]] = []
        outcome: dict[TopicPartition, ErrorCode] = {}
        for tp in dict.fromkeys(partitions):
            state = snapshot.partitions.get(tp)
            if state is None:
                outcome[tp] = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
                continue
            key = (state.key, producer_id)
            plan = plan_marker(
                state,
                self._live(snapshot.producers.get(key), now),
                snapshot.registrations.get(key),
                producer_id,
                producer_epoch,
                marker_epoch,
                commit,
                coordinator_epoch,
                now,
                snapshot.other_ongoing.get(key),
            )
            outcome[tp] = plan.error
            if plan.marker is None:
                continue
            assert plan.state is not None and plan.entry is not None
            markers.append(plan.marker)
            states.append(plan.state)
            entries[key] = plan.entry
            if plan.closed_txn_first_offset is not None:
                closed.append((state.key, plan.closed_txn_first_offset))
            if plan.aborted is not None:
                aborted.append((state.key, plan.aborted))
            ended.append((key, producer_epoch))
        changes = Changes(
            batches=markers,
            partitions=states,
            producers=entries,
            registrations_dropped=ended,
            leases_dropped=ended,
            ongoing_closed=closed,
            aborted=aborted,
        )
        return outcome, changes

    async def _write_markers(
        self,
        producer_id: int,
        producer_epoch: int,
        marker_epoch: int,
        commit: bool,
        coordinator_epoch: int,
        partitions: Sequence[TopicPartition],
    ) -> list[ErrorCode]:
        """Phase 3: `plan_marker` on every partition and apply the plans, atomically."""
        needs = self._marker_needs(producer_id, partitions)

        async def write(db: StoreStep) -> list[ErrorCode]:
            snapshot = await db.load(needs)
            outcome, changes = self._plan_markers(
                snapshot,
                partitions,
                producer_id,
                producer_epoch,
                marker_epoch,
                commit,
                coordinator_epoch,
            )
            await db.apply(changes)
            return [outcome[tp] for tp in partitions]

        return await self._write(Operation.WRITE_TXN_MARKERS, write)


def _ending(
    snapshot: Snapshot, producer_id: int, producer_epoch: int
) -> dict[ProducerKey, TxnRegistration]:
    """The registrations of (producer, epoch) in `snapshot`, marked ENDING: from the step that
    applies them on, no lease is granted to the transaction (phase 1 of an end)."""
    ending = {}
    for state in snapshot.partitions.values():
        key = (state.key, producer_id)
        registration = snapshot.registrations.get(key)
        if registration is not None and registration.producer_epoch == producer_epoch:
            ending[key] = msgspec.structs.replace(registration, ending=True)
    return ending
