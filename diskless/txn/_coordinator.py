"""A transaction coordinator for prototype brokers and tests (Kafka transaction version 2).

It owns the transactional-id state machine (Kafka's TransactionStateManager) and drives the
partitions' side through a `TransactionParticipant`. Transaction version 2 is the baseline: every
transaction end bumps the producer epoch, the markers carry the bumped epoch, and the next
transaction starts again at sequence 0 — so a late batch of an ended transaction is always stale.

State lives in this process: run one coordinator per cluster (Kafka shards transactional ids over
`__transaction_state` partitions; a prototype needs one). Producer ids come from the participant,
which allocates them durably, so several coordinators or restarts never reuse one.
"""

from __future__ import annotations

import asyncio
import enum
import logging
from collections.abc import Sequence
from typing import Final

import msgspec

from diskless._kafka_errors import txn_markers_error
from diskless._types import ErrorCode, TopicPartition
from diskless.clock import Clock, SystemClock
from diskless.errors import DisklessError
from diskless.txn._participant import TransactionParticipant

logger = logging.getLogger(__name__)

PRODUCER_EPOCH_MAX: Final = 32767
"""Kafka's epochs are int16; an id whose epoch would pass this gets a fresh producer id."""
PRODUCER_ID_BLOCK_SIZE: Final = 1000
TRANSACTION_TIMEOUT_MS_MAX: Final = 15 * 60 * 1000
"""Kafka's `transaction.max.timeout.ms` default."""
TIMEOUT_CHECK_INTERVAL_S: Final = 1.0


class TxnState(enum.Enum):
    EMPTY = "Empty"
    ONGOING = "Ongoing"
    PREPARE_COMMIT = "PrepareCommit"
    PREPARE_ABORT = "PrepareAbort"
    COMPLETE_COMMIT = "CompleteCommit"
    COMPLETE_ABORT = "CompleteAbort"


_PREPARED: Final = frozenset({TxnState.PREPARE_COMMIT, TxnState.PREPARE_ABORT})
_MARKER_DONE: Final = frozenset({ErrorCode.NONE, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION})
"""Marker answers that complete a partition: placed, or the partition no longer exists."""
_UNFINISHED: Final = _PREPARED | {TxnState.ONGOING}


def _prepare_state(commit: bool) -> TxnState:
    return TxnState.PREPARE_COMMIT if commit else TxnState.PREPARE_ABORT


class InitProducerIdResult(msgspec.Struct, frozen=True):
    error: ErrorCode
    producer_id: int = -1
    producer_epoch: int = -1


class EndTxnResult(msgspec.Struct, frozen=True):
    """Under transaction version 2 this carries the bumped epoch the producer continues with."""

    error: ErrorCode
    producer_id: int = -1
    producer_epoch: int = -1


class TransactionDescription(msgspec.Struct, frozen=True):
    transactional_id: str
    producer_id: int
    producer_epoch: int
    state: TxnState
    partitions: list[TopicPartition]
    timeout_ms: int
    started_ms: int | None


class _Txn:
    """Mutable per-transactional-id metadata; only touched under that id's lock."""

    __slots__ = (
        "lock",
        "partitions",
        "producer_epoch",
        "producer_id",
        "started_ms",
        "state",
        "timeout_ms",
    )

    def __init__(self, producer_id: int, timeout_ms: int) -> None:
        self.producer_id = producer_id
        self.producer_epoch = 0
        self.timeout_ms = timeout_ms
        self.state = TxnState.EMPTY
        self.partitions: list[TopicPartition] = []
        self.started_ms: int | None = None
        self.lock = asyncio.Lock()


class TransactionCoordinator:
    """InitProducerId, AddPartitionsToTxn and EndTxn with Kafka's errors, plus timeouts."""

    def __init__(
        self,
        participant: TransactionParticipant,
        *,
        clock: Clock | None = None,
        coordinator_epoch: int = 0,
    ) -> None:
        self._participant = participant
        self._clock = clock or SystemClock()
        self._coordinator_epoch = coordinator_epoch
        self._txns: dict[str, _Txn] = {}
        self._next_producer_id = 0
        self._producer_ids_left = 0
        self._allocation_lock = asyncio.Lock()
        self._timeout_task: asyncio.Task[None] | None = None

    # --- lifecycle ----------------------------------------------------------------------------
    async def start(self) -> None:
        """Start aborting transactions that outlive their timeout."""
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

        An ongoing transaction of that id is aborted first (its markers placed), so the new
        incarnation starts clean.
        """
        if transactional_id is None:
            return InitProducerIdResult(ErrorCode.NONE, await self._allocate_producer_id(), 0)
        if not 0 < transaction_timeout_ms <= TRANSACTION_TIMEOUT_MS_MAX:
            return InitProducerIdResult(ErrorCode.INVALID_REQUEST)
        txn = self._txns.get(transactional_id)
        if txn is None:
            producer_id = await self._allocate_producer_id()
            txn = self._txns.setdefault(transactional_id, _Txn(producer_id, transaction_timeout_ms))
            if txn.producer_id == producer_id:
                return InitProducerIdResult(ErrorCode.NONE, producer_id, txn.producer_epoch)
        async with txn.lock:
            if txn.state in _UNFINISHED:
                # Finish what is open: a prepared outcome is kept, an ongoing one is aborted.
                error = await self._complete(txn, commit=txn.state is TxnState.PREPARE_COMMIT)
                if error is not ErrorCode.NONE:
                    return InitProducerIdResult(ErrorCode.CONCURRENT_TRANSACTIONS)
            txn.timeout_ms = transaction_timeout_ms
            await self._bump_epoch(txn)
            return InitProducerIdResult(ErrorCode.NONE, txn.producer_id, txn.producer_epoch)

    async def add_partitions_to_txn(
        self,
        transactional_id: str,
        producer_id: int,
        producer_epoch: int,
        partitions: Sequence[TopicPartition],
    ) -> list[ErrorCode]:
        """Make `partitions` part of the ongoing transaction (opening one if needed);
        `result[i]` answers `partitions[i]`."""
        txn = self._txns.get(transactional_id)
        if txn is None or txn.producer_id != producer_id:
            return [ErrorCode.INVALID_PRODUCER_ID_MAPPING] * len(partitions)
        async with txn.lock:
            error = self._check_epoch(txn, producer_epoch)
            if error is None and txn.state in (TxnState.PREPARE_COMMIT, TxnState.PREPARE_ABORT):
                error = ErrorCode.CONCURRENT_TRANSACTIONS
            if error is not None:
                return [error] * len(partitions)
            new = [tp for tp in dict.fromkeys(partitions) if tp not in txn.partitions]
            results = dict.fromkeys(partitions, ErrorCode.NONE)
            if new:
                errors = await self._participant.add_partitions_to_txn(
                    producer_id, producer_epoch, new
                )
                assert len(errors) == len(new), (len(errors), len(new))
                for tp, tp_error in zip(new, errors, strict=True):
                    results[tp] = tp_error
                    if tp_error is ErrorCode.NONE:
                        txn.partitions.append(tp)
            if txn.partitions and txn.state is not TxnState.ONGOING:
                txn.state = TxnState.ONGOING
                txn.started_ms = self._clock.now_ms()
            return [results[tp] for tp in partitions]

    async def end_txn(
        self, transactional_id: str, producer_id: int, producer_epoch: int, commit: bool
    ) -> EndTxnResult:
        """Commit or abort; returns once every marker is placed (the outcome is final).

        Partitions deleted since they were added get no marker. Every error is one of Kafka's
        EndTxn errors.
        """
        txn = self._txns.get(transactional_id)
        if txn is None or txn.producer_id != producer_id:
            return EndTxnResult(ErrorCode.INVALID_PRODUCER_ID_MAPPING)
        async with txn.lock:
            completed = TxnState.COMPLETE_COMMIT if commit else TxnState.COMPLETE_ABORT
            if producer_epoch == txn.producer_epoch - 1 and txn.state is completed:
                # A retry of the end that already bumped the epoch: answer it again.
                return EndTxnResult(ErrorCode.NONE, txn.producer_id, txn.producer_epoch)
            error = self._check_epoch(txn, producer_epoch)
            if error is not None:
                return EndTxnResult(error)
            if txn.state in _PREPARED and (txn.state is TxnState.PREPARE_COMMIT) != commit:
                return EndTxnResult(ErrorCode.INVALID_TXN_STATE)
            if txn.state not in _UNFINISHED:
                return EndTxnResult(ErrorCode.INVALID_TXN_STATE)
            error = await self._complete(txn, commit=commit)
            if error is not ErrorCode.NONE:
                return EndTxnResult(error)
            return EndTxnResult(ErrorCode.NONE, txn.producer_id, txn.producer_epoch)

    def describe(self, transactional_id: str) -> TransactionDescription | None:
        txn = self._txns.get(transactional_id)
        if txn is None:
            return None
        return TransactionDescription(
            transactional_id,
            txn.producer_id,
            txn.producer_epoch,
            txn.state,
            list(txn.partitions),
            txn.timeout_ms,
            txn.started_ms,
        )

    async def abort_expired(self) -> list[str]:
        """Abort every ongoing transaction older than its timeout; returns their ids."""
        now = self._clock.now_ms()
        aborted = []
        for transactional_id, txn in list(self._txns.items()):
            if not self._expired(txn, now):
                continue
            async with txn.lock:
                if not self._expired(txn, self._clock.now_ms()):
                    continue  # re-validated after waiting for the lock
                logger.info("ending transaction %r after its timeout", transactional_id)
                commit = txn.state is TxnState.PREPARE_COMMIT
                if await self._complete(txn, commit=commit) is ErrorCode.NONE:
                    aborted.append(transactional_id)
        return aborted

    # --- internals ----------------------------------------------------------------------------
    @staticmethod
    def _expired(txn: _Txn, now_ms: int) -> bool:
        """Ongoing past its timeout, or prepared but left unfinished by a failure."""
        if txn.state in _PREPARED:
            return True
        return (
            txn.state is TxnState.ONGOING
            and txn.started_ms is not None
            and now_ms - txn.started_ms > txn.timeout_ms
        )

    @staticmethod
    def _check_epoch(txn: _Txn, producer_epoch: int) -> ErrorCode | None:
        if producer_epoch < txn.producer_epoch:
            return ErrorCode.PRODUCER_FENCED
        if producer_epoch > txn.producer_epoch:
            return ErrorCode.INVALID_PRODUCER_EPOCH
        return None

    async def _complete(self, txn: _Txn, *, commit: bool) -> ErrorCode:
        """Prepare, bump the epoch (TV2), place the markers, complete. Caller holds the lock.

        On failure the transaction stays prepared, so that a retry (or the timeout loop)
        finishes the same outcome: Kafka keeps sending markers until they land. The error is
        CONCURRENT_TRANSACTIONS, Kafka's EndTxn and InitProducerId answer while markers are
        pending, which clients retry.
        """
        assert txn.state is TxnState.ONGOING or txn.state is _prepare_state(commit), txn.state
        txn.state = _prepare_state(commit)
        old_epoch = txn.producer_epoch
        # An id never reaches the int16 limit with a transaction open: see below.
        assert old_epoch < PRODUCER_EPOCH_MAX, old_epoch
        marker_epoch = old_epoch + 1
        try:
            errors = await self._participant.write_txn_markers(
                txn.producer_id,
                old_epoch,
                marker_epoch,
                commit,
                self._coordinator_epoch,
                list(txn.partitions),
            )
        except DisklessError as error:
            logger.exception("placing markers for producer %d failed", txn.producer_id)
            return txn_markers_error(error)
        assert len(errors) == len(txn.partitions)
        outcome = dict(zip(txn.partitions, errors, strict=True))
        gone = [tp for tp, e in outcome.items() if e is ErrorCode.UNKNOWN_TOPIC_OR_PARTITION]
        if gone:
            # Kafka's coordinator skips markers for partitions deleted since they were added:
            # nothing of the transaction remains there to commit or abort.
            logger.info("producer %d: no markers for deleted %s", txn.producer_id, gone)
            txn.partitions = [tp for tp in txn.partitions if tp not in gone]
        failed = {tp: e for tp, e in outcome.items() if e not in _MARKER_DONE}
        if failed:
            logger.warning("markers for producer %d failed: %s", txn.producer_id, failed)
            return ErrorCode.CONCURRENT_TRANSACTIONS
        txn.producer_epoch = marker_epoch
        txn.state = TxnState.COMPLETE_COMMIT if commit else TxnState.COMPLETE_ABORT
        txn.partitions = []
        txn.started_ms = None
        if marker_epoch >= PRODUCER_EPOCH_MAX:
            txn.producer_id = await self._allocate_producer_id()
            txn.producer_epoch = 0
        return ErrorCode.NONE

    async def _bump_epoch(self, txn: _Txn) -> None:
        if txn.producer_epoch + 1 >= PRODUCER_EPOCH_MAX:
            txn.producer_id = await self._allocate_producer_id()
            txn.producer_epoch = 0
        else:
            txn.producer_epoch += 1
        txn.state = TxnState.EMPTY

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
            except Exception:
                logger.exception("aborting expired transactions failed; will retry")
