"""Producer ids and transactions for the Kafka front end: one per cluster, shared by its brokers.

The library's `TransactionCoordinator` implements transaction version 2 (KIP-890): every
transaction end bumps the producer epoch, the next transaction restarts at sequence 0, and a late
batch of an ended transaction is stale. The clients this prototype serves speak the client side of
transaction version 1 (librdkafka and kafka-python have no TV2): the producer keeps the epoch that
InitProducerId gave it across transactions, keeps counting sequences per partition, and the
EndTxn response (v0-v3) carries no new epoch.

`TransactionFront` bridges the two, per transactional producer, without changing either side:
- AddPartitionsToTxn, AddOffsetsToTxn, TxnOffsetCommit and EndTxn carry the client's epoch; the
  front end substitutes the coordinator's current epoch for it, and takes the bumped epoch from
  each EndTxn result.
- A transactional batch at the client's epoch is rewritten before it reaches the broker: the
  coordinator's current epoch replaces the client's, and the base sequence is shifted so that each
  coordinator epoch starts at 0 on every partition (the shift per partition is the client
  sequence that followed the last acknowledged batch when the epoch began). The CRC is
  recomputed; a batch whose CRC was already wrong is left alone for the broker to refuse.
A TV1 client only ends a transaction once every batch of it is acknowledged, so the shift is
known whenever a batch of the next transaction arrives. The bridge state lives in this process,
like the transaction coordinator's: one front end per cluster. The batch coordinator is the
participant (it allocates producer ids, registers partitions and places markers).
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Final

from diskless._types import ErrorCode, TopicPartition
from diskless.clock import Clock, SystemClock
from diskless.coordinator import BatchCoordinator
from diskless.records import SEQUENCE_MAX, InvalidBatch, parse_batch, rewrite_producer_state
from diskless.txn import EndTxnResult, InitProducerIdResult, PendingOffset, TransactionCoordinator

_log = logging.getLogger(__name__)

_SEQUENCE_MODULUS: Final = SEQUENCE_MAX + 1


class _Bridge:
    """The TV1 view of one transactional producer (see the module docstring)."""

    __slots__ = ("client_epoch", "next_sequence", "producer_id", "sequence_base", "server_epoch")

    def __init__(self, producer_id: int, epoch: int) -> None:
        self.producer_id = producer_id
        self.client_epoch = epoch
        self.server_epoch = epoch
        self.sequence_base: dict[TopicPartition, int] = {}
        self.next_sequence: dict[TopicPartition, int] = {}


class Rewrite:
    """A batch the bridge rewrote: what to learn when its produce is acknowledged."""

    __slots__ = ("bridge", "client_next_sequence", "topic_partition")

    def __init__(self, bridge: _Bridge, tp: TopicPartition, client_next_sequence: int) -> None:
        self.bridge = bridge
        self.topic_partition = tp
        self.client_next_sequence = client_next_sequence


class TransactionFront:
    """InitProducerId, AddPartitionsToTxn, EndTxn and the batch rewriting they imply."""

    def __init__(self, coordinator: BatchCoordinator, *, clock: Clock | None = None) -> None:
        self._coordinator = TransactionCoordinator(coordinator, clock=clock or SystemClock())
        self._by_transactional_id: dict[str, _Bridge] = {}
        self._by_producer_id: dict[int, _Bridge] = {}

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
        result = await self._coordinator.init_producer_id(transactional_id, timeout_ms)
        if transactional_id is not None and result.error is ErrorCode.NONE:
            old = self._by_transactional_id.pop(transactional_id, None)
            if old is not None:
                self._by_producer_id.pop(old.producer_id, None)
            bridge = _Bridge(result.producer_id, result.producer_epoch)
            self._by_transactional_id[transactional_id] = bridge
            self._by_producer_id[result.producer_id] = bridge
        return result

    async def add_partitions_to_txn(
        self,
        transactional_id: str,
        producer_id: int,
        client_epoch: int,
        partitions: Sequence[TopicPartition],
    ) -> list[ErrorCode]:
        epoch = self._server_epoch(transactional_id, producer_id, client_epoch)
        return await self._coordinator.add_partitions_to_txn(
            transactional_id, producer_id, epoch, partitions
        )

    async def add_offsets_to_txn(
        self, transactional_id: str, producer_id: int, client_epoch: int, group_id: str
    ) -> ErrorCode:
        epoch = self._server_epoch(transactional_id, producer_id, client_epoch)
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
    ) -> ErrorCode:
        epoch = self._server_epoch(transactional_id, producer_id, client_epoch)
        return await self._coordinator.txn_offset_commit(
            transactional_id, producer_id, epoch, group_id, offsets
        )

    async def end_txn(
        self, transactional_id: str, producer_id: int, client_epoch: int, commit: bool
    ) -> EndTxnResult:
        bridge = self._by_transactional_id.get(transactional_id)
        epoch = self._server_epoch(transactional_id, producer_id, client_epoch)
        result = await self._coordinator.end_txn(transactional_id, producer_id, epoch, commit)
        if result.error is not ErrorCode.NONE or bridge is None:
            return result
        # Re-validate after the await: a concurrent InitProducerId may have replaced the bridge.
        if self._by_transactional_id.get(transactional_id) is not bridge:
            return result
        if result.producer_id != bridge.producer_id:
            # The epoch overflowed and the coordinator moved to a new producer id; a TV1 client
            # cannot follow, so make it start over (it re-initializes on a fatal epoch error).
            _log.warning("producer %d exhausted its epochs", producer_id)
            self._by_producer_id.pop(bridge.producer_id, None)
            del self._by_transactional_id[transactional_id]
            return EndTxnResult(ErrorCode.PRODUCER_FENCED)
        bridge.server_epoch = result.producer_epoch
        bridge.sequence_base = dict(bridge.next_sequence)
        return result

    def _server_epoch(self, transactional_id: str, producer_id: int, client_epoch: int) -> int:
        bridge = self._by_transactional_id.get(transactional_id)
        if bridge is None or bridge.producer_id != producer_id:
            return client_epoch
        if client_epoch != bridge.client_epoch:
            return client_epoch  # stale or unknown: the coordinator answers it as such
        return bridge.server_epoch

    # --- the produce path ---------------------------------------------------------------------
    def rewrite_batch(self, tp: TopicPartition, records: bytes) -> tuple[bytes, Rewrite | None]:
        """The batch as the coordinator must see it, and what to learn from its ack.

        Synchronous on purpose: produce requests must reach the broker in arrival order.
        """
        if not self._by_producer_id:
            return records, None
        header = parse_batch(records)
        if isinstance(header, InvalidBatch) or header.size != len(records):
            return records, None  # not one whole batch: the broker refuses it as it is
        if not header.is_transactional:
            return records, None
        bridge = self._by_producer_id.get(header.producer_id)
        if bridge is None or header.producer_epoch != bridge.client_epoch:
            return records, None
        if not header.crc_valid():
            return records, None
        sequence = header.base_sequence
        base = bridge.sequence_base.get(tp, 0)
        server_sequence = (sequence - base) % _SEQUENCE_MODULUS
        client_next = (sequence + header.last_offset_delta + 1) % _SEQUENCE_MODULUS
        rewrite = Rewrite(bridge, tp, client_next)
        if bridge.server_epoch == header.producer_epoch and server_sequence == sequence:
            return records, rewrite
        batch = rewrite_producer_state(
            header, producer_epoch=bridge.server_epoch, base_sequence=server_sequence
        )
        return batch, rewrite

    @staticmethod
    def acknowledged(rewrite: Rewrite) -> None:
        """A rewritten batch was appended (or was a duplicate): the client moves past it."""
        rewrite.bridge.next_sequence[rewrite.topic_partition] = rewrite.client_next_sequence
