"""What several transaction test modules share: a participant's lease and its end."""

from __future__ import annotations

import msgspec

from diskless._types import ErrorCode, TopicPartition
from diskless.clock import ManualClock
from diskless.coordinator import (
    BatchCoordinator,
    CommitBatch,
)
from testkit.clocks import drive

TTL_MS = 60_000


def leased(b: CommitBatch, lease_id: int) -> CommitBatch:
    return msgspec.structs.replace(b, lease_id=lease_id)


async def end(
    coordinator: BatchCoordinator,
    clock: ManualClock,
    pid: int,
    epoch: int,
    commit: bool,
    partitions: list[TopicPartition],
    coordinator_epoch: int = 0,
    step_s: float = 0.01,
) -> list[ErrorCode]:
    return await drive(
        clock,
        coordinator.write_txn_markers(pid, epoch, epoch + 1, commit, coordinator_epoch, partitions),
        step_s,
    )
