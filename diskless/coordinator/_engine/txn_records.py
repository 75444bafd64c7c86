"""The engine's transaction records: the transactional-id state, durable and leaderless.

Each operation is one atomic step that re-reads the record, applies a transition of
`diskless.txn` (the compare-and-set: the step decides on the record as it is when the step lands)
and, in the same step, its effect on the partitions: registering them (AddPartitionsToTxn),
closing them to new leases (prepare), placing the markers (complete). So a registration can never
be added to a transaction after it was prepared, and the markers of one end are placed once
however many instances race to complete it.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Final

from msgspec.structs import replace

from diskless._types import ErrorCode, GroupOwnership, TopicPartition
from diskless.coordinator._engine.txn import NEXT_PRODUCER_ID, TransactionOperations, _ending
from diskless.coordinator._rules.commit import ProducerKey
from diskless.coordinator._rules.mirror import read_only
from diskless.coordinator._rules.ownership import check_group_fence
from diskless.coordinator._rules.rows import TxnRegistration
from diskless.coordinator._rules.txn import check_registration
from diskless.coordinator._store import Changes, Needs, Operation, Snapshot, StoreStep
from diskless.coordinator._values import RegisteredTxn
from diskless.txn import (
    PREPARED_STATES,
    PendingOffset,
    TxnRecord,
    TxnStep,
    add_offsets_to_record,
    add_to_record,
    commit_offsets_to_record,
    complete_record,
    end_record,
    expire_record,
    init_record,
    needs_new_producer_id,
    new_record,
)

TXNS_DUE_PER_CALL_MAX = 100
TXNS_LISTED_PER_CALL_MAX: Final = 1000
"""How many records one `list_txns` call reads at most: a listing of every transactional id
pages through them."""
"""Records a sweeper takes on per `txns_due` call."""
_MARKER_DONE = frozenset({ErrorCode.NONE, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION})
"""Marker answers that complete a partition: placed, or the partition no longer exists."""


class TxnRecordOperations(TransactionOperations):
    """InitProducerId, AddPartitionsToTxn and EndTxn over durable transaction records."""

    async def _next_producer_id(self, db: StoreStep, record: TxnRecord | None) -> tuple[int, int]:
        """The producer id a transition may take (a new id, or one whose epoch ran out), and
        the counter's value after taking it: unchanged unless the step uses it."""
        if record is not None and not needs_new_producer_id(record):
            return -1, -1
        counters = (await db.load(Needs(counters=(NEXT_PRODUCER_ID,)))).counters
        first = counters.get(NEXT_PRODUCER_ID, 0)
        return first, first + 1

    async def txn_init(self, transactional_id: str, timeout_ms: int) -> TxnStep:
        """InitProducerId for a transactional id (`diskless.txn._txn_state.init`)."""

        async def init(db: StoreStep) -> TxnStep:
            now = self._clock.now_ms()
            record = (await db.load(Needs(txns=(transactional_id,)))).txns.get(transactional_id)
            next_id, counter = await self._next_producer_id(db, record)
            if record is None:
                new = new_record(transactional_id, next_id, timeout_ms, now)
                step = TxnStep(ErrorCode.NONE, new)
            else:
                step = init_record(record, timeout_ms, now, next_id)
            if step.record is record:
                return step
            assert step.record is not None
            takes_id = step.record.producer_id == next_id and next_id >= 0
            changes = Changes(
                txns={transactional_id: step.record},
                counters={NEXT_PRODUCER_ID: counter} if takes_id else {},
                registrations=await self._closing(db, record, step.record),
            )
            await db.apply(changes)
            return step

        return await self._write(Operation.TXN_INIT, init)

    async def _closing(
        self, db: StoreStep, old: TxnRecord | None, new: TxnRecord
    ) -> dict[ProducerKey, TxnRegistration]:
        """When a transition prepares an ongoing transaction: its registrations, marked ENDING."""
        if old is None or old.state in PREPARED_STATES or new.state not in PREPARED_STATES:
            return {}
        keys = {(tp, old.producer_id) for tp in old.partitions}
        snapshot = await db.load(Needs(partitions=set(old.partitions), registrations=keys))
        return _ending(snapshot, old.producer_id, old.producer_epoch)

    async def txn_add_partitions(
        self,
        transactional_id: str,
        producer_id: int,
        producer_epoch: int,
        partitions: Sequence[TopicPartition],
    ) -> list[ErrorCode]:
        """AddPartitionsToTxn: check the record, register the partitions (KIP-890) and add them
        to the record, in one step; `result[i]` answers `partitions[i]`."""
        needs = self._txn_needs(producer_id, partitions)
        needs.topics = {tp.topic for tp in partitions}  # a mirrored one is read-only

        async def add(db: StoreStep) -> list[ErrorCode]:
            now = self._clock.now_ms()
            record = (await db.load(Needs(txns=(transactional_id,)))).txns.get(transactional_id)
            check = add_to_record(record, producer_id, producer_epoch, (), now)
            if check.error is not ErrorCode.NONE:
                return [check.error] * len(partitions)
            snapshot = await db.load(needs)
            registrations: dict[ProducerKey, TxnRegistration] = {}
            stale_leases: list[tuple[ProducerKey, int | None]] = []
            results: dict[TopicPartition, ErrorCode] = {}
            for tp in dict.fromkeys(partitions):
                state = snapshot.partitions.get(tp)
                if state is None:
                    results[tp] = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
                    continue
                if read_only(snapshot, tp):
                    results[tp] = ErrorCode.INVALID_TOPIC_EXCEPTION
                    continue
                key = (state.key, producer_id)
                error, new = check_registration(
                    self._live(snapshot.producers.get(key), now),
                    snapshot.registrations.get(key),
                    producer_epoch,
                )
                if new is not None:
                    registrations[key] = _bridged(new, record, tp)
                    stale_leases.append((key, new.producer_epoch - 1))
                results[tp] = error
            added = [tp for tp, error in results.items() if error is ErrorCode.NONE]
            step = add_to_record(record, producer_id, producer_epoch, added, now)
            txns = {}
            if added and step.record is not None and step.record is not record:
                txns[transactional_id] = step.record
            await db.apply(
                Changes(registrations=registrations, leases_dropped=stale_leases, txns=txns)
            )
            return [results[tp] for tp in partitions]

        return await self._write(Operation.TXN_ADD_PARTITIONS, add)

    async def _transition(
        self,
        operation: Operation,
        transactional_id: str,
        decide: Callable[[TxnRecord | None, int], TxnStep],
        group_fence: tuple[str, GroupOwnership] | None = None,
    ) -> TxnStep:
        """One step: `decide(record, now)`, and the record it answers stored if it changed,
        with the partitions of a transaction it prepares closed to new leases. With a
        `group_fence` (group id, fence), nothing happens unless it holds (`check_group_fence`)."""

        async def transition(db: StoreStep) -> TxnStep:
            if group_fence is not None:
                group_id, fence = group_fence
                stored = (await db.load(Needs(groups=(group_id,)))).groups.get(group_id)
                error = check_group_fence(stored, fence)
                if error is not ErrorCode.NONE:
                    return TxnStep(error)
            now = self._clock.now_ms()
            record = (await db.load(Needs(txns=(transactional_id,)))).txns.get(transactional_id)
            step = decide(record, now)
            if step.record is not None and step.record is not record:
                await db.apply(
                    Changes(
                        txns={transactional_id: step.record},
                        registrations=await self._closing(db, record, step.record),
                    )
                )
            return step

        return await self._write(operation, transition)

    async def txn_add_offsets(
        self, transactional_id: str, producer_id: int, producer_epoch: int, group_id: str
    ) -> ErrorCode:
        """AddOffsetsToTxn: the transaction commits offsets of `group_id` (opened if needed)."""
        step = await self._transition(
            Operation.TXN_ADD_OFFSETS,
            transactional_id,
            lambda record, now: add_offsets_to_record(
                record, producer_id, producer_epoch, group_id, now
            ),
        )
        return step.error

    async def txn_commit_offsets(
        self,
        transactional_id: str,
        producer_id: int,
        producer_epoch: int,
        group_id: str,
        offsets: Sequence[PendingOffset],
        fence: GroupOwnership | None = None,
    ) -> ErrorCode:
        """TxnOffsetCommit: the offsets take effect if and when the transaction commits."""
        step = await self._transition(
            Operation.TXN_COMMIT_OFFSETS,
            transactional_id,
            lambda record, _: commit_offsets_to_record(
                record, producer_id, producer_epoch, group_id, offsets
            ),
            (group_id, fence) if fence is not None else None,
        )
        return step.error

    async def txn_end(
        self, transactional_id: str, producer_id: int, producer_epoch: int, commit: bool
    ) -> TxnStep:
        """EndTxn's first step: prepare the decision (the caller then completes it)."""
        return await self._transition(
            Operation.TXN_END,
            transactional_id,
            lambda record, now: end_record(record, producer_id, producer_epoch, commit, now),
        )

    async def txn_expire(self, transactional_id: str) -> TxnStep:
        """A sweeper's first step: abort an ongoing transaction past its timeout (prepare it)."""
        return await self._transition(
            Operation.TXN_EXPIRE,
            transactional_id,
            lambda record, now: (
                TxnStep(ErrorCode.NONE) if record is None else expire_record(record, now)
            ),
        )

    async def txn_complete(self, prepared: TxnRecord, coordinator_epoch: int) -> TxnStep:
        """Place the markers of a prepared transaction and complete it (epoch bumped, TV2).

        Waits first until no batch of the transaction can still land (the commit barrier); then
        one step places every marker and completes the record, unless the record moved on
        meanwhile (another instance completed it): then nothing is written, and the record as
        it is now is the answer. A marker refused by a partition leaves the record prepared:
        CONCURRENT_TRANSACTIONS, retried by the client or a sweeper.
        """
        assert prepared.state in PREPARED_STATES, prepared
        tid = prepared.transactional_id
        pid, epoch = prepared.producer_id, prepared.producer_epoch
        await self._wait_for_leases(pid, epoch, prepared.partitions)
        needs = self._marker_needs(pid, prepared.partitions)

        async def complete(db: StoreStep) -> TxnStep:
            now = self._clock.now_ms()
            record = (await db.load(Needs(txns=(tid,)))).txns.get(tid)
            if record is None or (record.producer_id, record.producer_epoch, record.state) != (
                pid,
                epoch,
                prepared.state,
            ):
                return TxnStep(ErrorCode.NONE, record)
            snapshot = await db.load(needs)
            outcome, changes = self._plan_markers(
                snapshot,
                record.partitions,
                pid,
                epoch,
                epoch + 1,
                record.commit,
                coordinator_epoch,
            )
            if any(error not in _MARKER_DONE for error in outcome.values()):
                retry = replace(record, updated_ms=now)
                await db.apply(replace(changes, txns={tid: retry}))
                return TxnStep(ErrorCode.CONCURRENT_TRANSACTIONS, retry, True)
            next_id, counter = await self._next_producer_id(db, record)
            done = complete_record(record, now, next_id, _last_sequences(snapshot, record))
            counters = {NEXT_PRODUCER_ID: counter} if next_id >= 0 else {}
            offsets = {}
            if record.commit:  # the offsets committed in the transaction take effect with it
                for o in record.pending_offsets:
                    offsets[(o.group_id, o.topic_partition)] = o.committed
            await db.apply(
                replace(changes, txns={tid: done}, counters=counters, group_offsets=offsets)
            )
            return TxnStep(ErrorCode.NONE, done)

        return await self._write(Operation.TXN_COMPLETE, complete)

    async def describe_txns(self, transactional_ids: Sequence[str]) -> list[TxnRecord | None]:
        found = await self._read(lambda view: view.txns(transactional_ids))
        return [found.get(tid) for tid in transactional_ids]

    async def describe_txn_registrations(
        self, keys: Sequence[tuple[TopicPartition, int]]
    ) -> list[RegisteredTxn | None]:
        found = await self._read(lambda view: view.txn_registrations(keys))
        return [
            None
            if (r := found.get(key)) is None
            else RegisteredTxn(r.producer_epoch, r.ending, r.client_epoch, r.sequence_base)
            for key in keys
        ]

    async def txns_due(self) -> list[TxnRecord]:
        """Records a sweeper must act on now (`TxnRecord.due_ms`), earliest first."""
        now = self._clock.now_ms()
        return await self._read(lambda view: view.txns_due(now, TXNS_DUE_PER_CALL_MAX))

    async def list_txns(self, after: str = "") -> list[TxnRecord]:
        return await self._read(lambda view: view.txns_after(after, TXNS_LISTED_PER_CALL_MAX))


def _bridged(
    registration: TxnRegistration, record: TxnRecord | None, tp: TopicPartition
) -> TxnRegistration:
    """A new registration, with what a broker needs to rewrite the batches of a version 1
    producer whose epoch the record bridges to the registered one."""
    if record is None or record.bridged_epoch != registration.producer_epoch:
        return registration
    return replace(
        registration, client_epoch=record.client_epoch, sequence_base=record.sequence_base(tp)
    )


def _last_sequences(snapshot: Snapshot, record: TxnRecord) -> dict[TopicPartition, int]:
    """The last sequence the prepared transaction wrote on each partition (before its marker
    resets the producer's state there)."""
    last = {}
    for tp in record.partitions:
        state = snapshot.partitions.get(tp)
        if state is None:
            continue
        entry = snapshot.producers.get((state.key, record.producer_id))
        if entry is not None and entry.producer_epoch == record.producer_epoch and entry.batches:
            last[tp] = entry.last_sequence
    return last
