"""What the transaction coordinator needs from the batch coordinator.

The batch coordinator keeps the transactional-id records (`TxnRecord`) and plays the partition
leader's transactional role: it learns which partitions a transaction touches (KIP-890
verification), places the markers as metadata, and holds each marker back until the
transaction's in-flight batches have resolved (the commit barrier). Each method below is one
atomic step over a record and its partitions, so that any number of transaction coordinators
can share one batch coordinator.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

from diskless._types import ErrorCode, GroupOwnership, TopicPartition
from diskless.txn._txn_state import PendingOffset, TxnRecord, TxnStep


class TransactionParticipant(Protocol):
    async def allocate_producer_ids(self, count: int) -> int:
        """Reserve `count` consecutive producer ids, durably; returns the first one."""
        ...

    async def txn_init(self, transactional_id: str, timeout_ms: int) -> TxnStep:
        """A new record at epoch 0, or the epoch bumped (`init_record`)."""
        ...

    async def txn_add_partitions(
        self,
        transactional_id: str,
        producer_id: int,
        producer_epoch: int,
        partitions: Sequence[TopicPartition],
    ) -> list[ErrorCode]:
        """Check the record, register the partitions and add them to it; `result[i]` answers
        `partitions[i]`."""
        ...

    async def txn_add_offsets(
        self, transactional_id: str, producer_id: int, producer_epoch: int, group_id: str
    ) -> ErrorCode:
        """AddOffsetsToTxn (`add_offsets_to_record`)."""
        ...

    async def txn_commit_offsets(
        self,
        transactional_id: str,
        producer_id: int,
        producer_epoch: int,
        group_id: str,
        offsets: Sequence[PendingOffset],
        fence: GroupOwnership | None = None,
    ) -> ErrorCode:
        """TxnOffsetCommit (`commit_offsets_to_record`), if the group's `fence` holds."""
        ...

    async def txn_end(
        self, transactional_id: str, producer_id: int, producer_epoch: int, commit: bool
    ) -> TxnStep:
        """Prepare the decision (`end_record`), closing the transaction to new batches."""
        ...

    async def txn_expire(self, transactional_id: str) -> TxnStep:
        """Prepare an abort of a transaction past its timeout (`expire_record`)."""
        ...

    async def txn_complete(self, prepared: TxnRecord, coordinator_epoch: int) -> TxnStep:
        """Place the markers of a prepared transaction, once no batch of it can still land, and
        complete its record; a no-op answering the current record if it moved on."""
        ...

    async def describe_txns(self, transactional_ids: Sequence[str]) -> list[TxnRecord | None]: ...

    async def txns_due(self) -> list[TxnRecord]:
        """Records a sweeper must act on now (`TxnRecord.due_ms`)."""
        ...
