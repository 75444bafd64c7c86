"""The state a coordinator backend stores, shared so that every backend stores the same thing."""

from __future__ import annotations

from typing import NamedTuple

import msgspec

from diskless._types import ControlType, TimestampType, TopicPartition
from diskless.coordinator._values import BatchInfo, ExtentIndex, TopicConfig


class PartitionState(msgspec.Struct, gc=False):
    """One partition's counters. `key` is the backend's id for the partition. (Loaded by the
    hundred per commit and holding no container: untracked by the cyclic garbage collector.)"""

    key: int
    topic_partition: TopicPartition
    config: TopicConfig
    high_watermark: int = 0
    log_start_offset: int = 0
    size_bytes: int = 0
    """Sum of the sizes of the batches still stored (for size retention)."""
    ts_running_max: int = -1
    """The largest batch timestamp ever appended (feeds the by-timestamp index)."""
    txn_first_offset: int | None = None
    """The first offset of the earliest ongoing transaction (from the ongoing-transaction index)."""

    @property
    def last_stable_offset(self) -> int:
        """Kafka's LSO: the earliest ongoing transaction's first offset if below the high
        watermark, else the high watermark; never below the log start offset."""
        first = self.txn_first_offset
        lso = self.high_watermark if first is None or first > self.high_watermark else first
        return max(lso, self.log_start_offset)


class StoredBatch(msgspec.Struct, frozen=True, array_like=True, gc=False):
    """One committed batch as stored by a backend."""

    partition_key: int
    base_offset: int
    last_offset: int
    object_key: str
    byte_offset: int
    size: int
    max_timestamp: int
    log_append_time: int
    timestamp: int
    """The timestamp retention and list-offsets use: the append time on LOG_APPEND_TIME topics."""
    ts_running_max: int
    """max(timestamp) over this batch and every earlier batch of the partition, deleted or not."""
    producer_id: int
    producer_epoch: int
    control: int = -1
    """-1 for data; a `ControlType` for a transaction marker (then `object_key` is empty)."""
    coordinator_epoch: int = 0
    """The transaction coordinator's epoch written in a marker."""
    index_byte_offset: int = -1
    index_size: int = -1
    """An extent's index in its object (-1: a batch row, not an extent). An extent stands for a
    run of consecutive batches (markers included) copied into one object: its `timestamp` and
    `max_timestamp` are the largest of theirs and `ts_running_max` the running max at its end,
    so every timestamp rule treats it as Kafka treats a segment."""
    object_size: int = -1
    """The size of the object holding it (-1: unknown, and always for a marker): with it the
    read path reads whole cache blocks. Not stored with the row: backends that keep files
    apart join it from there."""

    @property
    def is_extent(self) -> bool:
        return self.index_size >= 0

    def to_info(self, timestamp_type: TimestampType) -> BatchInfo:
        marker = self.control >= 0  # only metadata: no object, synthesized when read
        return BatchInfo(
            object_key="" if marker else self.object_key,
            byte_offset=0 if marker else self.byte_offset,
            size=self.size,
            base_offset=self.base_offset,
            last_offset=self.last_offset,
            timestamp_type=timestamp_type,
            log_append_time=self.log_append_time,
            max_timestamp=self.max_timestamp,
            producer_id=self.producer_id,
            producer_epoch=self.producer_epoch,
            control=ControlType(self.control) if marker else None,
            coordinator_epoch=self.coordinator_epoch if marker else 0,
            extent=ExtentIndex(self.index_byte_offset, self.index_size) if self.is_extent else None,
            object_size=None if marker or self.object_size < 0 else self.object_size,
        )


class TxnRegistration(msgspec.Struct, frozen=True, gc=False):
    """KIP-890 verification: (producer, epoch) has a transaction on a partition."""

    producer_epoch: int
    ending: bool = False
    """An end has begun (phase 1 of `write_txn_markers`): no new lease is granted."""
    client_epoch: int = -1
    """The epoch a transaction version 1 producer puts on its batches for `producer_epoch`
    (`diskless.txn.TxnRecord.client_epoch`); -1 when none does."""
    sequence_base: int = 0
    """That producer's sequence at which `producer_epoch` began here: its batches' sequences
    minus this are the ones the coordinator checks."""


class TxnLease(msgspec.Struct, frozen=True, gc=False):
    """A transactional batch on its way to a commit; the marker waits for it."""

    lease_id: int
    partition_key: int
    producer_id: int
    producer_epoch: int
    expires_ms: int
    broker_id: int = -1
    """The broker incarnation holding the lease (-1: unknown, a lease older than this field):
    the lease dies with that incarnation (`_rules.ownership.lease_alive`)."""
    broker_epoch: int = -1


class LeaseHolder(NamedTuple):
    """The leases one broker incarnation holds for a transaction: their earliest expiry."""

    broker_id: int
    broker_epoch: int
    expires_ms: int


class AbortedTxn(NamedTuple):
    """An entry of a partition's aborted-transaction index (Kafka's AbortedTxn)."""

    producer_id: int
    first_offset: int
    last_offset: int
    """The offset of the ABORT marker."""
    last_stable_offset: int
