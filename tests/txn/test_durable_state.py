"""Transaction state survives the transaction coordinator: restarts, SIGKILL, and two processes
racing on the same transactional ids.

Kafka keeps this state in `__transaction_state`; here it is in the batch coordinator, so a fresh
`TransactionCoordinator` (in this process or another) bumps the same producer id's epoch,
fences the old producer, and ends what the dead one left open.
"""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest

from diskless import ErrorCode, IsolationLevel, ManualClock, TopicPartition
from diskless.coordinator import (
    BatchCoordinator,
    FindBatchesRequest,
    ListOffsetsRequest,
    SqliteBatchCoordinator,
)
from diskless.txn import TransactionCoordinator, TxnState
from testkit.backends import BACKENDS, open_coordinator
from testkit.commits import Committer, batch
from tests.txn import _txn_child

TP = TopicPartition("t", 0)
ROOT = Path(__file__).resolve().parents[2]


async def offsets(coordinator: BatchCoordinator, tp: TopicPartition) -> tuple[int, int]:
    """(high watermark, last stable offset)."""
    latest, stable = await coordinator.list_offsets(
        [
            ListOffsetsRequest(tp, -1),
            ListOffsetsRequest(tp, -1, IsolationLevel.READ_COMMITTED),
        ]
    )
    return latest.offset, stable.offset


async def committed_data(coordinator: BatchCoordinator, tp: TopicPartition) -> int:
    """Data batches a read_committed consumer gets (aborted ones filtered as a client does)."""
    (response,) = await coordinator.find_batches(
        [FindBatchesRequest(tp, 0, 1 << 30, IsolationLevel.READ_COMMITTED)], 1 << 30
    )
    aborted = {pid for pid, _ in response.aborted_transactions}
    return sum(1 for b in response.batches if b.control is None and b.producer_id not in aborted)


async def open_transaction(coordinator: BatchCoordinator) -> tuple[int, int]:
    tc = TransactionCoordinator(coordinator, clock=ManualClock())
    init = await tc.init_producer_id("tx", 10_000)
    pid, epoch = init.producer_id, init.producer_epoch
    assert await tc.add_partitions_to_txn("tx", pid, epoch, [TP]) == [ErrorCode.NONE]
    (result,) = await Committer(coordinator).commit(
        [batch(TP, pid=pid, epoch=epoch, seq=0, count=3, txn=True)]
    )
    assert result.error is ErrorCode.NONE
    return pid, epoch


async def check_ended(coordinator: BatchCoordinator, pid: int, old_epoch: int) -> None:
    """The open transaction was aborted: LSO back at the high watermark, no data committed,
    and the old producer fenced on both the coordinator API and the produce path."""
    high_watermark, stable = await offsets(coordinator, TP)
    assert stable == high_watermark == 4  # three records and the ABORT marker
    assert await committed_data(coordinator, TP) == 0
    tc = TransactionCoordinator(coordinator, clock=ManualClock())
    fenced = await tc.end_txn("tx", pid, old_epoch, commit=True)
    assert fenced.error is ErrorCode.PRODUCER_FENCED
    (late,) = await Committer(coordinator, broker_id=2).commit(
        [batch(TP, pid=pid, epoch=old_epoch, seq=3, count=1, txn=True)]
    )
    assert late.error is ErrorCode.INVALID_PRODUCER_EPOCH


@pytest.mark.parametrize("backend", BACKENDS)
async def test_a_fresh_coordinator_bumps_the_same_producer_and_aborts_what_was_open(
    backend: str, tmp_path: Path
) -> None:
    first = open_coordinator(backend, tmp_path, ManualClock())
    await first.create_topic("t", 1)
    pid, epoch = await open_transaction(first)
    # The process holding the transaction coordinator is gone; a durable backend is reopened.
    second = first if backend == "memory" else open_coordinator(backend, tmp_path, ManualClock())
    if second is not first:
        await first.close()
    try:
        tc = TransactionCoordinator(second, clock=ManualClock())
        again = await tc.init_producer_id("tx", 10_000)
        assert again.error is ErrorCode.NONE
        assert again.producer_id == pid
        assert again.producer_epoch == epoch + 2  # the abort's bump, then the re-init's
        await check_ended(second, pid, epoch)
    finally:
        await second.close()


@pytest.mark.parametrize("backend", BACKENDS)
async def test_any_instance_sweeps_an_abandoned_transaction_at_its_timeout(
    backend: str, tmp_path: Path
) -> None:
    clock = ManualClock()
    coordinator = open_coordinator(backend, tmp_path, clock)
    try:
        await coordinator.create_topic("t", 1)
        pid, epoch = await open_transaction(coordinator)
        assert await offsets(coordinator, TP) == (3, 0)
        sweeper = TransactionCoordinator(coordinator, clock=clock)  # never saw the transaction
        assert await sweeper.abort_expired() == []
        await clock.advance(11.0)
        assert await sweeper.abort_expired() == ["tx"]
        assert await sweeper.abort_expired() == []
        record = await sweeper.describe("tx")
        assert record is not None and record.state is TxnState.COMPLETE_ABORT
        assert (record.producer_id, record.producer_epoch) == (pid, epoch + 1)
        await check_ended(coordinator, pid, epoch)
    finally:
        await coordinator.close()


def _child(db: Path, mode: str, seed: int) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-m", "tests.txn._txn_child", str(db), mode, str(seed)],
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        stdout=subprocess.PIPE,
        text=True,
    )


async def test_sigkill_of_the_coordinator_process_mid_transaction(tmp_path: Path) -> None:
    db = tmp_path / "coordinator.db"
    setup = SqliteBatchCoordinator(db)
    await setup.create_topic("t", _txn_child.PARTITIONS)
    await setup.close()
    child = _child(db, "open", 0)
    try:
        assert child.stdout is not None
        line = await asyncio.to_thread(child.stdout.readline)
        _, pid_text, epoch_text = line.split()
        os.kill(child.pid, signal.SIGKILL)
        await asyncio.to_thread(child.wait, 30)
    finally:
        child.kill()
        child.wait()
        if child.stdout is not None:
            child.stdout.close()
    pid, epoch = int(pid_text), int(epoch_text)
    coordinator = SqliteBatchCoordinator(db)
    try:
        assert await offsets(coordinator, TP) == (3, 0)  # the dead process's transaction is open
        again = await TransactionCoordinator(coordinator).init_producer_id("tx", 10_000)
        assert (again.error, again.producer_id) == (ErrorCode.NONE, pid)
        assert again.producer_epoch == epoch + 2
        await check_ended(coordinator, pid, epoch)
    finally:
        await coordinator.close()


@pytest.mark.seeds(3)
async def test_two_processes_racing_on_the_same_ids_agree_on_every_outcome(
    seed: int, tmp_path: Path
) -> None:
    print(f"seed {seed}")
    db = tmp_path / "coordinator.db"
    setup = SqliteBatchCoordinator(db)
    await setup.create_topic("t", _txn_child.PARTITIONS)
    await setup.close()
    children = [_child(db, "race", seed * 2 + i) for i in range(2)]
    try:
        outputs = [await asyncio.to_thread(c.communicate, None, 120) for c in children]
    finally:
        for child in children:
            child.kill()
    assert [c.returncode for c in children] == [0, 0], outputs
    coordinator = SqliteBatchCoordinator(db)
    try:
        # Whatever is still open ends at its timeout, by any sweeper.
        tc = TransactionCoordinator(coordinator)
        await asyncio.sleep(_txn_child.TIMEOUT_MS / 1000 + 0.1)
        await tc.abort_expired()
        outcomes: dict[tuple[int, int], set[int]] = {}
        for p in range(_txn_child.PARTITIONS):
            tp = TopicPartition("t", p)
            high_watermark, stable = await offsets(coordinator, tp)
            assert stable == high_watermark, tp
            (response,) = await coordinator.find_batches(
                [FindBatchesRequest(tp, 0, 1 << 30)], 1 << 30
            )
            marks = Counter(
                (b.producer_id, b.producer_epoch) for b in response.batches if b.control is not None
            )
            assert max(marks.values(), default=1) == 1, marks  # never a doubled marker
            for b in response.batches:
                if b.control is not None:
                    outcomes.setdefault((b.producer_id, b.producer_epoch), set()).add(b.control)
        assert outcomes, "the schedule ended no transaction"
        split = {txn: kinds for txn, kinds in outcomes.items() if len(kinds) > 1}
        assert not split, split  # one outcome per transaction on all of its partitions
        for record in await coordinator.describe_txns(list(_txn_child.IDS)):
            assert record is not None and record.state not in (
                TxnState.ONGOING,
                TxnState.PREPARE_COMMIT,
                TxnState.PREPARE_ABORT,
            )
    finally:
        await coordinator.close()
