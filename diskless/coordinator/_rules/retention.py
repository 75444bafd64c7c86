"""What moves a partition's log start: DeleteRecords, to the offset it names, and retention,
by time and size. The engine then deletes the batches below the new start
(`_engine.retention`).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import NamedTuple

from diskless._types import ErrorCode
from diskless.coordinator._rules.rows import PartitionState, StoredBatch
from diskless.coordinator._values import DeleteRecordsResponse


class DeleteRecordsDecision(NamedTuple):
    """The response, and the new log start offset when the start moves (None otherwise)."""

    response: DeleteRecordsResponse
    new_log_start_offset: int | None


def decide_delete_records(state: PartitionState | None, offset: int) -> DeleteRecordsDecision:
    """Kafka DeleteRecords: -1 means the high watermark; the new start need not be batch-aligned."""
    if state is None:
        return DeleteRecordsDecision(
            DeleteRecordsResponse(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION), None
        )
    target = state.high_watermark if offset == -1 else offset
    if target < 0 or target > state.high_watermark:
        return DeleteRecordsDecision(
            DeleteRecordsResponse(ErrorCode.OFFSET_OUT_OF_RANGE, state.log_start_offset), None
        )
    if target <= state.log_start_offset:
        return DeleteRecordsDecision(
            DeleteRecordsResponse(ErrorCode.NONE, state.log_start_offset), None
        )
    return DeleteRecordsDecision(DeleteRecordsResponse(ErrorCode.NONE, target), target)


class RetentionScan:
    """Which of a partition's oldest batches retention deletes now (at most `budget`).

    Time: a batch whose timestamp is more than `retention_ms` old. Size (Kafka's rule): the oldest
    batch goes while the partition keeps at least `retention_bytes` without it. An extent is a
    row like a batch, which makes these Kafka's segment rules for it (its timestamp is its
    largest, its size the whole). Deletion stops at
    the first batch neither rule removes, so the log stays a contiguous suffix. Batches are fed
    oldest first, in as many pieces as the caller loads them.
    """

    def __init__(self, state: PartitionState, now_ms: int, budget: int) -> None:
        self.victims: list[StoredBatch] = []
        self.more = False
        """The budget ran out before the rules did: another pass has work left."""
        config = state.config
        self.done = config.retention_ms < 0 and config.retention_bytes < 0
        """No later batch can be a victim: stop feeding."""
        self._config = config
        self._size = state.size_bytes
        self._cutoff = now_ms - config.retention_ms
        self._budget = budget

    def feed(self, batches: Iterable[StoredBatch]) -> None:
        config = self._config
        for batch in batches:
            if self.done:
                return
            by_time = config.retention_ms >= 0 and batch.timestamp < self._cutoff
            by_size = config.retention_bytes >= 0 and self._size - batch.size >= (
                config.retention_bytes
            )
            if not (by_time or by_size):
                self.done = True
            elif len(self.victims) >= self._budget:
                self.done = self.more = True
            else:
                self.victims.append(batch)
                self._size -= batch.size
