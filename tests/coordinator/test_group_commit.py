"""Group commits: `commit_files` answers exactly as committing the objects one by one would.

Two coordinators of the same backend on one virtual clock take the same random operations: one
commits each group of objects in one step (`commit_files`), the other one object after another
(`commit_file` per object). Every answer and the resulting state must be identical. The groups
chain what one object changes into the next one's checks: sequences continuing from one object
to the next, duplicates of a batch of an earlier object of the same group, a key twice in a
group, a lease used by two objects (the first releases it), transactions opened by one object
and continued by the next. The seed is printed (GROUP_COMMIT_SEED replays it).
"""

from __future__ import annotations

import os
import random
from collections.abc import Awaitable, Callable, Sequence
from pathlib import Path
from typing import Any

import msgspec
import pytest

from diskless._types import IsolationLevel, OffsetSpec, TopicPartition
from diskless.clock import ManualClock
from diskless.coordinator import (
    BatchCoordinator,
    CommitBatch,
    CommitFileResult,
    CommitRefusal,
    FaultyBatchCoordinator,
    FileCommit,
    FindBatchesRequest,
    LeaseRequest,
    ListOffsetsRequest,
    StepFault,
    StoreCall,
)
from diskless.errors import CommitOutcomeUnknownError, CoordinatorUnavailableError
from testkit.backends import BACKENDS, open_coordinator
from testkit.commits import batch

TOPIC = "g"
PARTITIONS = [TopicPartition(TOPIC, p) for p in range(4)]
UNKNOWN = TopicPartition(TOPIC, 99)
PRODUCERS = [1, 2, 3]
GROUPS = 60
SEED = int(os.environ.get("GROUP_COMMIT_SEED", random.randrange(1 << 30)))


class _Workload:
    """Random objects of batches, with the producers' next sequences tracked loosely (both
    coordinators get the same objects, so the test only needs plausible ones)."""

    def __init__(self, rng: random.Random) -> None:
        self.rng = rng
        self.epochs = dict.fromkeys(PRODUCERS, 0)
        self.sequences: dict[tuple[int, TopicPartition], int] = {}
        self.sent: list[CommitBatch] = []
        self.leases: dict[TopicPartition, int] = {}
        self.keys = 0

    def new_key(self) -> str:
        self.keys += 1
        return f"g/{self.keys:06d}"

    def one_batch(self) -> CommitBatch:
        rng = self.rng
        draw = rng.random()
        if draw < 0.1 and self.sent:
            return rng.choice(self.sent)  # a retry: a duplicate, or out of the retained window
        if draw < 0.15:
            return batch(UNKNOWN, count=1)
        tp = rng.choice(PARTITIONS)
        if draw < 0.3:
            return batch(tp, count=rng.randint(1, 5), ts=1_700_000_000_000 + rng.randrange(10**6))
        pid = rng.choice(PRODUCERS)
        epoch = self.epochs[pid] - (1 if rng.random() < 0.05 else 0)
        seq = self.sequences.get((pid, tp), 0) + (rng.choice([1, 7]) if rng.random() < 0.05 else 0)
        count = rng.randint(1, 4)
        txn = pid == 3  # producer 3 is transactional
        made = batch(tp, pid=pid, epoch=epoch, seq=seq, count=count, txn=txn)
        if txn and tp in self.leases and rng.random() < 0.9:
            made = msgspec.structs.replace(made, lease_id=self.leases[tp])
        self.sequences[(pid, tp)] = seq + count
        self.sent.append(made)
        return made

    def group(self) -> list[FileCommit]:
        rng = self.rng
        files = []
        for _ in range(rng.randint(1, 6)):
            key = files[-1].object_key if files and rng.random() < 0.05 else self.new_key()
            batches = [self.one_batch() for _ in range(rng.randint(1, 8))]
            files.append(FileCommit(key, 100 * len(batches), batches))
        return files


async def _state(coordinator: BatchCoordinator, keys: Sequence[str]) -> list[Any]:
    """Everything a commit can change, as reads see it."""
    state: list[Any] = []
    for isolation in IsolationLevel:
        state.append(
            await coordinator.find_batches(
                [FindBatchesRequest(tp, 0, 1 << 20, isolation) for tp in PARTITIONS], 1 << 30
            )
        )
        state.append(
            await coordinator.list_offsets(
                [ListOffsetsRequest(tp, OffsetSpec.LATEST, isolation) for tp in PARTITIONS]
            )
        )
    for tp in PARTITIONS:
        state.append(await coordinator.describe_producers(tp))
    state.append(await coordinator.file_info(keys))
    state.append(await coordinator.file_stats())
    return state


@pytest.mark.parametrize("backend", BACKENDS)
async def test_a_group_commit_answers_as_commits_one_by_one(backend: str, tmp_path: Path) -> None:
    print(f"GROUP_COMMIT_SEED={SEED}")
    rng = random.Random(SEED)
    clock = ManualClock()
    grouped = open_coordinator(backend, tmp_path, clock, "grouped")
    single = open_coordinator(backend, tmp_path, clock, "single")
    workload = _Workload(rng)

    async def both(call: Callable[[BatchCoordinator], Awaitable[Any]]) -> Any:
        answers = [await call(grouped), await call(single)]
        assert answers[0] == answers[1], (SEED, answers)
        return answers[0]

    try:
        await both(lambda c: c.create_topic(TOPIC, len(PARTITIONS)))
        epoch = await both(lambda c: c.register_broker(1))
        grouped_files = 0
        for _ in range(GROUPS):
            draw = rng.random()
            if draw < 0.3:
                await both(lambda c: c.add_partitions_to_txn(3, workload.epochs[3], PARTITIONS))
                leases = await both(
                    lambda c: c.acquire_txn_leases(
                        1,
                        epoch,
                        [LeaseRequest(tp, 3, workload.epochs[3]) for tp in PARTITIONS],
                        60_000,
                    )
                )
                workload.leases = {
                    tp: r.lease_id
                    for tp, r in zip(PARTITIONS, leases, strict=True)
                    if r.lease_id >= 0
                }
            elif draw < 0.37:
                await clock.advance(61.0)  # past the leases: a marker need not wait
                await both(
                    lambda c: c.write_txn_markers(3, workload.epochs[3], 0, True, 0, PARTITIONS)
                )
                workload.leases = {}
            files = workload.group()
            grouped_files += len(files) > 1
            answers = [
                await grouped.commit_files(1, epoch, files),
                await _one_by_one(single, 1, epoch, files),
            ]
            assert answers[0] == answers[1], (SEED, files, answers)
            assert len(answers[0]) == len(files)
            await clock.advance(rng.choice([0.0, 0.01, 1.0]))
        assert grouped_files > GROUPS // 2
        keys = [f"g/{n:06d}" for n in range(1, workload.keys + 1)]
        assert await _state(grouped, keys) == await _state(single, keys), SEED
        committed = [info for info in await grouped.file_info(keys) if info is not None]
        assert len(committed) > GROUPS, SEED
    finally:
        await grouped.close()
        await single.close()


@pytest.mark.parametrize("backend", BACKENDS)
async def test_a_fenced_broker_commits_nothing_of_its_group(backend: str, tmp_path: Path) -> None:
    coordinator = open_coordinator(backend, tmp_path, ManualClock())
    try:
        await coordinator.create_topic(TOPIC, len(PARTITIONS))
        stale = await coordinator.register_broker(1)
        await coordinator.register_broker(1)
        files = [FileCommit(f"f/{n}", 100, [batch(PARTITIONS[n])]) for n in range(3)]
        results = await coordinator.commit_files(1, stale, files)
        assert [r.refused for r in results] == [CommitRefusal.BROKER_FENCED] * 3
        assert await coordinator.file_info([f.object_key for f in files]) == [None] * 3
    finally:
        await coordinator.close()


async def _one_by_one(
    coordinator: BatchCoordinator, broker_id: int, epoch: int, files: Sequence[FileCommit]
) -> list[CommitFileResult]:
    return [
        await coordinator.commit_file(f.object_key, broker_id, epoch, f.file_size, f.batches)
        for f in files
    ]


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize(
    ("fault", "raised"),
    [
        (StepFault.FAIL, CoordinatorUnavailableError),
        (StepFault.LOST_ANSWER, CommitOutcomeUnknownError),
    ],
)
async def test_a_group_step_that_fails_at_the_store_is_applied_whole_or_not_at_all(
    backend: str, fault: StepFault, raised: type[Exception], tmp_path: Path
) -> None:
    """A failure before the step applies nothing of the group; a lost answer hides a step that
    applied all of it. The producers' retry, in new objects, then appends every batch, or
    finds every one a duplicate."""
    inner = open_coordinator(backend, tmp_path, ManualClock())
    faulty = FaultyBatchCoordinator(inner)
    try:
        await inner.create_topic(TOPIC, len(PARTITIONS))
        epoch = await inner.register_broker(1)
        batches = [batch(PARTITIONS[n], pid=1, epoch=0, seq=0) for n in range(3)]
        files = [FileCommit(f"f/{n}", 100, [b]) for n, b in enumerate(batches)]
        faulty.store.schedule(StoreCall.COMMIT, fault)
        with pytest.raises(raised):
            await faulty.commit_files(1, epoch, files)
        applied = fault is StepFault.LOST_ANSWER
        infos = await inner.file_info([f.object_key for f in files])
        assert [info is not None for info in infos] == [applied] * 3
        retry = [FileCommit(f"retry/{n}", 100, [b]) for n, b in enumerate(batches)]
        retried = await faulty.commit_files(1, epoch, retry)
        assert [(r.refused, r.batches[0].error) for r in retried] == [(None, 0)] * 3
        assert [r.batches[0].duplicate for r in retried] == [applied] * 3
        assert [r.batches[0].base_offset for r in retried] == [0] * 3
    finally:
        await faulty.close()
