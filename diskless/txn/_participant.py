"""What the transaction coordinator needs from the partitions' side (the batch coordinator).

The batch coordinator plays the partition leader's transactional role: it learns which partitions
a transaction touches (KIP-890 verification), places the markers as metadata, and holds each
marker back until the transaction's in-flight batches have resolved (the commit barrier).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

from diskless._types import ErrorCode, TopicPartition


class TransactionParticipant(Protocol):
    async def allocate_producer_ids(self, count: int) -> int:
        """Reserve `count` consecutive producer ids, durably; returns the first one."""
        ...

    async def add_partitions_to_txn(
        self, producer_id: int, producer_epoch: int, partitions: Sequence[TopicPartition]
    ) -> list[ErrorCode]:
        """Register partitions as part of (producer_id, producer_epoch)'s ongoing transaction.

        `result[i]` answers `partitions[i]`; only registered pairs may produce transactionally.
        """
        ...

    async def write_txn_markers(
        self,
        producer_id: int,
        producer_epoch: int,
        marker_epoch: int,
        commit: bool,
        coordinator_epoch: int,
        partitions: Sequence[TopicPartition],
    ) -> list[ErrorCode]:
        """Write a COMMIT or ABORT marker at `marker_epoch` on every partition of the transaction.

        Returns only once no batch of (producer_id, producer_epoch) can still land on those
        partitions: in-flight batches have been committed or their leases have expired, and any
        later batch of the transaction is rejected. `result[i]` answers `partitions[i]`.
        """
        ...
