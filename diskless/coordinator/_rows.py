"""The state a coordinator backend stores, shared so that every backend stores the same thing."""

from __future__ import annotations

import msgspec

from diskless._types import TimestampType, TopicPartition
from diskless.coordinator._api import BatchInfo, TopicConfig


class PartitionState(msgspec.Struct):
    """One partition's counters. `key` is the backend's id for the partition."""

    key: int
    topic_partition: TopicPartition
    config: TopicConfig
    high_watermark: int = 0
    log_start_offset: int = 0
    size_bytes: int = 0
    """Sum of the sizes of the batches still stored (for size retention)."""
    ts_running_max: int = -1
    """The largest batch timestamp ever appended (feeds the by-timestamp index)."""

    @property
    def last_stable_offset(self) -> int:
        """The LSO; equal to the high watermark until transactions keep an index of their own."""
        return self.high_watermark


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

    def to_info(self, timestamp_type: TimestampType) -> BatchInfo:
        return BatchInfo(
            object_key=self.object_key,
            byte_offset=self.byte_offset,
            size=self.size,
            base_offset=self.base_offset,
            last_offset=self.last_offset,
            timestamp_type=timestamp_type,
            log_append_time=self.log_append_time,
            max_timestamp=self.max_timestamp,
            producer_id=self.producer_id,
            producer_epoch=self.producer_epoch,
        )
