"""Producer ids and transactions for the Kafka front end, served alike by every server process.

The library's `TransactionCoordinator` implements transaction version 2 (KIP-890): every
transaction end bumps the producer epoch, the next transaction restarts at sequence 0, and a late
batch of an ended transaction is stale. The clients this prototype serves speak the client side of
transaction version 1 (librdkafka and kafka-python have no TV2): the producer keeps the epoch that
InitProducerId gave it across transactions, keeps counting sequences per partition, and the
EndTxn response (v0-v3) carries no new epoch.

`TransactionFront` bridges the two, per transactional producer, without changing either side and
without state of its own: what it needs is durable in the batch coordinator, so any process (or
a restarted one) bridges any producer.
- The transaction record (`diskless.txn.TxnRecord`) keeps the epoch the producer holds
  (`client_epoch`) and the coordinator epoch it stands for now (`bridged_epoch`), which follows
  the producer's own EndTxn only. AddPartitionsToTxn, AddOffsetsToTxn, TxnOffsetCommit and EndTxn
  carry the client's epoch; the front end reads the record and substitutes the bridged epoch.
  A transaction the coordinator ended on its own (a timeout) leaves the bridged epoch behind:
  the producer is fenced, as Kafka fences a version 1 producer whose transaction timed out.
- A transactional batch at the client's epoch is rewritten before it reaches the broker, from
  its partition's registration (`BatchCoordinator.describe_txn_registrations`, one read per
  produce request holding transactional batches): the registered epoch replaces the client's,
  and the base sequence is shifted so that each coordinator epoch starts at 0 on every partition
  (the registration carries the client sequence at which the epoch began there; the coordinator
  advances it when the transaction completes, from the last sequence it stored). The CRC is
  recomputed; a batch whose CRC was already wrong is left alone for the broker to refuse.
- A batch whose sequence is behind that base was sent before the registered epoch began on its
  partition, in a transaction that has ended (a paused broker's queued request, a late retry).
  Shifted, its sequence would wrap into the current epoch, and the coordinator would answer
  OUT_OF_ORDER_SEQUENCE_NUMBER, which librdkafka treats as fatal. The batch is passed on at the
  client's epoch instead. A base moves only when the bridge moves to a newer epoch, so the
  client's epoch is older than the registered one, and the coordinator answers
  INVALID_PRODUCER_EPOCH, as for any late batch of an ended transaction. Before the first move
  the base is 0 and the epochs are equal, so the batch is unchanged either way. "Behind" means
  within the half of the sequence space below the base, since sequences wrap.
The batch coordinator is the participant (it allocates producer ids, registers partitions and
places markers).
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Mapping, Sequence
from typing import Final, TypeAlias

from diskless._types import ErrorCode, GroupOwnership, TopicPartition
from diskless.broker import Rewrite
from diskless.clock import Clock, SystemClock
from diskless.coordinator import BatchCoordinator, ProducerSnapshot
from diskless.records import (
    SEQUENCE_MAX,
    BatchHeader,
    InvalidBatch,
    parse_batch,
    rewrite_producer_state,
)
from diskless.txn import (
    TRANSACTION_TIMEOUT_MS_MAX,
    EndTxnResult,
    InitProducerIdResult,
    PendingOffset,
    TransactionCoordinator,
    TxnRecord,
    TxnState,
)

_log = logging.getLogger(__name__)

_SEQUENCE_MODULUS: Final = SEQUENCE_MAX + 1
_SEQUENCE_AHEAD_MAX: Final = _SEQUENCE_MODULUS // 2
"""How far past a registration's base a batch's sequence may be and still belong to its epoch;
further means behind the base (wrapped), from an epoch that has ended."""
_COMPLETED: Final = {True: TxnState.COMPLETE_COMMIT, False: TxnState.COMPLETE_ABORT}

Batch: TypeAlias = bytes | memoryview


def bridged_epoch(record: TxnRecord | None, producer_id: int, client_epoch: int) -> int:
    """The coordinator epoch a version 1 producer's epoch stands for; a stale or unknown one
    is passed on as it is, for the coordinator to answer as such."""
    if record is None or record.producer_id != producer_id or record.client_epoch != client_epoch:
        return client_epoch
    return record.bridged_epoch


def transactional_header(records: Batch) -> BatchHeader | None:
    """The header of a whole, transactional batch with a valid CRC; None for anything else."""
    header = parse_batch(records)
    if isinstance(header, InvalidBatch) or header.size != len(records):
        return None  # not one whole batch: the broker refuses it as it is
    if not header.is_transactional or not header.crc_valid():
        return None
    return header


class TransactionFront:
    """InitProducerId, AddPartitionsToTxn, EndTxn and the batch rewriting they imply."""

    def __init__(
        self,
        coordinator: BatchCoordinator,
        *,
        clock: Clock | None = None,
        transaction_timeout_ms_max: int = TRANSACTION_TIMEOUT_MS_MAX,
    ) -> None:
        self._batches = coordinator
        self._coordinator = TransactionCoordinator(
            coordinator,
            clock=clock or SystemClock(),
            transaction_timeout_ms_max=transaction_timeout_ms_max,
        )

    async def start(self) -> None:
        await self._coordinator.start()

    async def close(self) -> None:
        await self._coordinator.close()

    @property
    def coordinator(self) -> TransactionCoordinator:
        return self._coordinator

    # --- the coordinator APIs -----------------------------------------------------------------
    async def init_producer_id(
        self, transactional_id: str | None, timeout_ms: int
    ) -> InitProducerIdResult:
        return await self._coordinator.init_producer_id(transactional_id, timeout_ms)

    async def add_partitions_to_txn(
        self,
        transactional_id: str,
        producer_id: int,
        client_epoch: int,
        partitions: Sequence[TopicPartition],
    ) -> list[ErrorCode]:
        epoch = await self._server_epoch(transactional_id, producer_id, client_epoch)
        return await self._coordinator.add_partitions_to_txn(
            transactional_id, producer_id, epoch, partitions
        )

    async def add_offsets_to_txn(
        self, transactional_id: str, producer_id: int, client_epoch: int, group_id: str
    ) -> ErrorCode:
        epoch = await self._server_epoch(transactional_id, producer_id, client_epoch)
        return await self._coordinator.add_offsets_to_txn(
            transactional_id, producer_id, epoch, group_id
        )

    async def txn_offset_commit(
        self,
        transactional_id: str,
        producer_id: int,
        client_epoch: int,
        group_id: str,
        offsets: Sequence[PendingOffset],
        fence: GroupOwnership | None = None,
    ) -> ErrorCode:
        epoch = await self._server_epoch(transactional_id, producer_id, client_epoch)
        return await self._coordinator.txn_offset_commit(
            transactional_id, producer_id, epoch, group_id, offsets, fence
        )

    async def end_txn(
        self, transactional_id: str, producer_id: int, client_epoch: int, commit: bool
    ) -> EndTxnResult:
        record = await self._coordinator.describe(transactional_id)
        epoch = bridged_epoch(record, producer_id, client_epoch)
        if (
            record is not None
            and record.producer_id == producer_id
            and record.client_epoch == client_epoch
            and record.producer_epoch == epoch
            and record.state is _COMPLETED[commit]
        ):
            # Transaction version 1 answers an end of a transaction just ended that way (a
            # retry whose first answer was lost) with success: the bridge moved with it.
            return EndTxnResult(ErrorCode.NONE, producer_id, epoch)
        result = await self._coordinator.end_txn(transactional_id, producer_id, epoch, commit)
        if result.error is ErrorCode.NONE and result.producer_id != producer_id:
            # The epoch overflowed and the coordinator moved to a new producer id; a TV1 client
            # cannot follow, so make it start over (it re-initializes on a fatal epoch error).
            _log.warning("producer %d exhausted its epochs", producer_id)
            return EndTxnResult(ErrorCode.PRODUCER_FENCED)
        return result

    async def _server_epoch(
        self, transactional_id: str, producer_id: int, client_epoch: int
    ) -> int:
        record = await self._coordinator.describe(transactional_id)
        return bridged_epoch(record, producer_id, client_epoch)

    # --- what the admin APIs read ---------------------------------------------------------------
    async def describe_txns(self, transactional_ids: Sequence[str]) -> list[TxnRecord | None]:
        """The records of the ids (None: unknown), for DescribeTransactions."""
        return await self._batches.describe_txns(transactional_ids)

    async def list_txns(self, after: str = "") -> list[TxnRecord]:
        """A page of records in id order after `after` (empty: the end), for ListTransactions."""
        return await self._batches.list_txns(after)

    async def describe_producers(self, topic_partition: TopicPartition) -> list[ProducerSnapshot]:
        """The producer state the coordinator keeps on a partition, for DescribeProducers."""
        return await self._batches.describe_producers(topic_partition)

    # --- the produce path ---------------------------------------------------------------------
    @staticmethod
    def transactional(
        partitions: Mapping[TopicPartition, Batch],
    ) -> dict[TopicPartition, BatchHeader]:
        """The batches of a produce request that the bridge may have to rewrite."""
        found = {}
        for tp, records in partitions.items():
            header = transactional_header(records)
            if header is not None:
                found[tp] = header
        return found

    def rewrite_for(self, partitions: Mapping[TopicPartition, Batch]) -> Rewrite | None:
        """The rewrite a produce request's batches need (`DisklessBroker.produce`'s `rewrite`,
        run in the request's turn); None when none of them is a transactional batch the bridge
        may have to rewrite, as for every request of a producer without transactions."""
        headers = self.transactional(partitions)
        if not headers:
            return None
        return functools.partial(self.rewrite_batches, headers=headers)

    async def rewrite_batches(
        self,
        partitions: Mapping[TopicPartition, Batch],
        headers: Mapping[TopicPartition, BatchHeader],
    ) -> dict[TopicPartition, Batch]:
        """The batches as the coordinator must see them (see the module docstring); `headers`:
        those of `transactional(partitions)`."""
        keys = [(tp, header.producer_id) for tp, header in headers.items()]
        registrations = await self._batches.describe_txn_registrations(keys)
        rewritten = dict(partitions)
        for (tp, header), registration in zip(headers.items(), registrations, strict=True):
            if registration is None or registration.client_epoch < 0:
                continue
            if header.producer_epoch != registration.client_epoch:
                continue
            sequence = (header.base_sequence - registration.sequence_base) % _SEQUENCE_MODULUS
            if sequence >= _SEQUENCE_AHEAD_MAX:
                continue  # from before the registered epoch: stale at the client's epoch
            if registration.producer_epoch == header.producer_epoch and sequence == (
                header.base_sequence
            ):
                continue
            rewritten[tp] = rewrite_producer_state(
                header, producer_epoch=registration.producer_epoch, base_sequence=sequence
            )
        return rewritten
