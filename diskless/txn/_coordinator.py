"""The transaction coordinator (Kafka transaction version 2), with no state of its own.

Kafka keeps the transactional-id state in `__transaction_state`, with one coordinator leader per
partition of it. Here the state is a record per id in the batch coordinator, changed only by
atomic steps there (`TransactionParticipant`), so any coordinator instance in any process serves
any id, and a restart loses nothing: a fresh instance bumps the epoch of the same producer id,
fencing the old producer, and finishes whatever the dead one left open. This class drives the
steps: it completes what a step prepared, retries what a race lost, and sweeps expired
transactions (any instance's sweeper may; exactly one abort wins).

Transaction version 2: every end bumps the producer epoch, the markers carry the bumped epoch,
and the next transaction starts again at sequence 0, so a late batch of an ended transaction is
always stale.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Sequence
from logging import ERROR
from typing import Final

import msgspec

from diskless._availability import log_failure
from diskless._kafka_errors import txn_error, txn_markers_error
from diskless._types import ErrorCode, GroupOwnership, TopicPartition
from diskless.clock import Clock, SystemClock
from diskless.errors import DisklessError
from diskless.txn._participant import TransactionParticipant
from diskless.txn._txn_state import (
    PREPARED_STATES,
    TRANSACTION_TIMEOUT_MS_MAX,
    PendingOffset,
    TxnRecord,
    TxnStep,
)

logger = logging.getLogger(__name__)

PRODUCER_ID_BLOCK_SIZE: Final = 1000
TIMEOUT_CHECK_INTERVAL_S: Final = 1.0
INIT_ATTEMPTS_MAX: Final = 4
"""InitProducerId completes what is open and asks again; past this it answers
CONCURRENT_TRANSACTIONS, which clients retry."""


class InitProducerIdResult(msgspec.Struct, frozen=True):
    error: ErrorCode
    producer_id: int = -1
    producer_epoch: int = -1


class EndTxnResult(msgspec.Struct, frozen=True):
    """Under transaction version 2 this carries the bumped epoch the producer continues with."""

    error: ErrorCode
    producer_id: int = -1
    producer_epoch: int = -1


class TransactionCoordinator:
    """InitProducerId, AddPartitionsToTxn and EndTxn with Kafka's errors, plus timeouts."""

    def __init__(
        self,
        participant: TransactionParticipant,
        *,
        clock: Clock | None = None,
        coordinator_epoch: int = 0,
        transaction_timeout_ms_max: int = TRANSACTION_TIMEOUT_MS_MAX,
    ) -> None:
        self._participant = participant
        self._timeout_ms_max = transaction_timeout_ms_max
        """Kafka's `transaction.max.timeout.ms`: a producer asking for a longer transaction
        timeout (or none) is refused with INVALID_TRANSACTION_TIMEOUT."""
        self._clock = clock or SystemClock()
        self._coordinator_epoch = coordinator_epoch
        # Idempotent producers' ids, allocated durably a block at a time: an unused rest of a
        # block is lost with the process, which is safe (ids are never reused).
        self._next_producer_id = 0
        self._producer_ids_left = 0
        self._allocation_lock = asyncio.Lock()
        self._timeout_task: asyncio.Task[None] | None = None

    # --- lifecycle ----------------------------------------------------------------------------
    async def start(self) -> None:
        """Start ending transactions that outlive their timeout (or were left prepared)."""
        if self._timeout_task is None:
            self._timeout_task = asyncio.create_task(self._abort_expired_forever())

    async def close(self) -> None:
        task, self._timeout_task = self._timeout_task, None
        if task is not None:
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)

    async def __aenter__(self) -> TransactionCoordinator:
        await self.start()
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.close()

    # --- the API ------------------------------------------------------------------------------
    async def init_producer_id(
        self, transactional_id: str | None, transaction_timeout_ms: int = 60_000
    ) -> InitProducerIdResult:
        """A producer id and epoch; for a known transactional id, bump the epoch and fence the old.

        What the id left open is finished first (an ongoing transaction aborted, a prepared one
        completed with its decision), so the new incarnation starts clean.
        """
        if transactional_id is None:
            return InitProducerIdResult(ErrorCode.NONE, await self._allocate_producer_id(), 0)
        if not 0 < transaction_timeout_ms <= self._timeout_ms_max:
            return InitProducerIdResult(ErrorCode.INVALID_TRANSACTION_TIMEOUT)
        for _ in range(INIT_ATTEMPTS_MAX):
            try:
                step = await self._participant.txn_init(transactional_id, transaction_timeout_ms)
                if step.must_complete:
                    assert step.record is not None
                    await self._complete(step.record)
                    continue
            except DisklessError as error:
                log_failure(logger, error, "InitProducerId of %r failed", transactional_id)
                return InitProducerIdResult(txn_error(error))
            assert step.record is not None
            return InitProducerIdResult(
                step.error, step.record.producer_id, step.record.producer_epoch
            )
        return InitProducerIdResult(ErrorCode.CONCURRENT_TRANSACTIONS)

    async def add_partitions_to_txn(
        self,
        transactional_id: str,
        producer_id: int,
        producer_epoch: int,
        partitions: Sequence[TopicPartition],
    ) -> list[ErrorCode]:
        """Make `partitions` part of the ongoing transaction (opening one if needed);
        `result[i]` answers `partitions[i]`."""
        return await self._participant.txn_add_partitions(
            transactional_id, producer_id, producer_epoch, partitions
        )

    async def add_offsets_to_txn(
        self, transactional_id: str, producer_id: int, producer_epoch: int, group_id: str
    ) -> ErrorCode:
        """AddOffsetsToTxn: the transaction will commit offsets of `group_id`."""
        return await self._participant.txn_add_offsets(
            transactional_id, producer_id, producer_epoch, group_id
        )

    async def txn_offset_commit(
        self,
        transactional_id: str,
        producer_id: int,
        producer_epoch: int,
        group_id: str,
        offsets: Sequence[PendingOffset],
        fence: GroupOwnership | None = None,
    ) -> ErrorCode:
        """TxnOffsetCommit: the offsets take effect atomically with the transaction's commit,
        and never if it aborts (consume-transform-produce exactly once). With a `fence` (the
        group's owner and its member's generation, KIP-447), only if they are current."""
        return await self._participant.txn_commit_offsets(
            transactional_id, producer_id, producer_epoch, group_id, offsets, fence
        )

    async def end_txn(
        self, transactional_id: str, producer_id: int, producer_epoch: int, commit: bool
    ) -> EndTxnResult:
        """Commit or abort; returns once every marker is placed (the outcome is final).

        Partitions deleted since they were added get no marker. Every error is one of Kafka's
        EndTxn errors.
        """
        try:
            step = await self._participant.txn_end(
                transactional_id, producer_id, producer_epoch, commit
            )
        except DisklessError as error:
            log_failure(logger, error, "EndTxn of %r failed", transactional_id)
            return EndTxnResult(txn_markers_error(error))
        if step.error is ErrorCode.NONE and step.must_complete:
            assert step.record is not None
            step = await self._complete(step.record)
        if step.error is not ErrorCode.NONE:
            return EndTxnResult(step.error)
        assert step.record is not None
        return EndTxnResult(ErrorCode.NONE, step.record.producer_id, step.record.producer_epoch)

    async def describe(self, transactional_id: str) -> TxnRecord | None:
        (record,) = await self._participant.describe_txns([transactional_id])
        return record

    async def abort_expired(self) -> list[str]:
        """End every transaction that is due (`TxnRecord.due_ms`): abort an ongoing one past
        its timeout, complete one left prepared. Returns the ids this call completed."""
        completed = []
        for due in await self._participant.txns_due():
            tid = due.transactional_id
            step = await self._participant.txn_expire(tid)
            if not step.must_complete:
                continue
            assert step.record is not None
            logger.info("ending transaction %r (%s) after its timeout", tid, step.record.state)
            if (await self._complete(step.record)).error is ErrorCode.NONE:
                completed.append(tid)
        return completed

    # --- internals ----------------------------------------------------------------------------
    async def _complete(self, prepared: TxnRecord) -> TxnStep:
        """Place the markers of a prepared transaction and complete it.

        On failure the transaction stays prepared, so that a retry (or a sweeper) finishes the
        same outcome: Kafka keeps sending markers until they land. The error is then
        CONCURRENT_TRANSACTIONS, Kafka's EndTxn and InitProducerId answer while markers are
        pending, which clients retry.
        """
        assert prepared.state in PREPARED_STATES, prepared
        try:
            step = await self._participant.txn_complete(prepared, self._coordinator_epoch)
        except DisklessError as error:
            log_failure(
                logger, error, "placing markers for producer %d failed", prepared.producer_id
            )
            return TxnStep(txn_markers_error(error), prepared, True)
        if step.error is not ErrorCode.NONE:
            logger.warning("markers for producer %d not all placed", prepared.producer_id)
            return step
        record = step.record
        if record is None or record.state in PREPARED_STATES:
            return TxnStep(ErrorCode.CONCURRENT_TRANSACTIONS, record, True)
        return step

    async def _allocate_producer_id(self) -> int:
        async with self._allocation_lock:
            if self._producer_ids_left == 0:
                self._next_producer_id = await self._participant.allocate_producer_ids(
                    PRODUCER_ID_BLOCK_SIZE
                )
                self._producer_ids_left = PRODUCER_ID_BLOCK_SIZE
            producer_id = self._next_producer_id
            self._next_producer_id += 1
            self._producer_ids_left -= 1
            return producer_id

    async def _abort_expired_forever(self) -> None:
        while True:
            await self._clock.sleep(TIMEOUT_CHECK_INTERVAL_S)
            try:
                await self.abort_expired()
            except Exception as error:
                log_failure(
                    logger, error, "ending expired transactions failed; will retry", level=ERROR
                )
