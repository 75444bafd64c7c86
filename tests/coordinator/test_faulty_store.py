"""Faults injected at the coordinator's store: where each one strikes, on every backend.

A failure before the step applies nothing; a lost answer hides an applied step; a slow call waits
on the injected clock; the same seed draws the same faults. What a fault does to a group commit
is in test_group_commit; what it does to whole workloads, in the fault simulations.
"""

from __future__ import annotations

import asyncio
import inspect
import random

import pytest

from diskless._object_keys import DEFAULT_OBJECT_PREFIX, new_object_key
from diskless._types import ErrorCode, TopicPartition
from diskless.clock import ManualClock
from diskless.coordinator import (
    BatchCoordinator,
    CallFaults,
    CommitRefusal,
    FaultyBatchCoordinator,
    FaultyCoordinatorStore,
    FileCommit,
    FindBatchesRequest,
    InMemoryBatchCoordinator,
    StepFault,
    StoreCall,
)
from diskless.coordinator._backends.memory import MemoryStore
from diskless.errors import CommitOutcomeUnknownError, CoordinatorUnavailableError
from testkit.commits import batch
from tests.coordinator._helpers import STORE_METHODS

TP = TopicPartition("t", 0)


def test_the_faulty_store_is_the_store_interface_and_its_schedule() -> None:
    public = {name for name, _ in inspect.getmembers(FaultyCoordinatorStore, inspect.isfunction)}
    assert {name for name in public if not name.startswith("_")} == STORE_METHODS | {"schedule"}


def test_rates_must_be_probabilities() -> None:
    with pytest.raises(ValueError, match="probabilities"):
        CallFaults(fail_rate=1.5)
    with pytest.raises(ValueError, match="must not exceed 1"):
        CallFaults(fail_rate=0.6, lost_answer_rate=0.6)
    with pytest.raises(ValueError, match="no answer to lose"):
        FaultyCoordinatorStore(MemoryStore(), random.Random(0), reads=CallFaults(0, 0.1))
    store = FaultyCoordinatorStore(MemoryStore(), random.Random(0))
    with pytest.raises(ValueError, match="no answer to lose"):
        store.schedule(StoreCall.READ, StepFault.LOST_ANSWER)


def test_faults_go_below_the_engine_of_a_library_coordinator_only() -> None:
    class Elsewhere(InMemoryBatchCoordinator):
        pass

    assert isinstance(FaultyBatchCoordinator(Elsewhere()).inner, Elsewhere)
    with pytest.raises(TypeError, match="below the engine"):
        FaultyBatchCoordinator(object())  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("fault", "raised", "applied"),
    [
        (StepFault.FAIL, CoordinatorUnavailableError, False),
        (StepFault.LOST_ANSWER, CoordinatorUnavailableError, True),
    ],
)
async def test_a_write_fails_before_its_step_or_loses_the_answer_of_an_applied_one(
    coordinator: BatchCoordinator, fault: StepFault, raised: type[Exception], applied: bool
) -> None:
    faulty = FaultyBatchCoordinator(coordinator)
    faulty.store.schedule(StoreCall.WRITE, fault)
    with pytest.raises(raised, match="injected"):
        await faulty.create_topic("t", 1)
    assert [t.name for t in await coordinator.describe_topics()] == ["t"] * applied
    again = await faulty.create_topic("t", 1)  # the schedule is used up
    assert again == (ErrorCode.TOPIC_ALREADY_EXISTS if applied else ErrorCode.NONE)
    assert faulty.store.injected == {(StoreCall.WRITE, fault): 1}


async def test_a_commit_whose_answer_is_lost_was_applied(
    coordinator: BatchCoordinator,
) -> None:
    assert await coordinator.create_topic("t", 1) == ErrorCode.NONE
    epoch = await coordinator.register_broker(1)
    faulty = FaultyBatchCoordinator(coordinator)
    faulty.store.schedule(StoreCall.COMMIT, StepFault.LOST_ANSWER)
    with pytest.raises(CommitOutcomeUnknownError):
        await faulty.commit_files(1, epoch, [FileCommit("k", 100, [batch(TP)])])
    (found,) = await faulty.find_batches([FindBatchesRequest(TP, 0, 1 << 20)], 1 << 20)
    assert [b.object_key for b in found.batches] == ["k"]


async def test_a_read_fails_before_it_reads(coordinator: BatchCoordinator) -> None:
    assert await coordinator.create_topic("t", 1) == ErrorCode.NONE
    faulty = FaultyBatchCoordinator(coordinator, reads=CallFaults(fail_rate=1.0))
    with pytest.raises(CoordinatorUnavailableError):
        await faulty.describe_topics()
    faulty.enabled = False
    assert [t.name for t in await faulty.describe_topics()] == ["t"]
    assert faulty.store.injected == {(StoreCall.READ, StepFault.FAIL): 1}


async def test_a_slow_commit_decides_when_it_lands() -> None:
    """The engine reads the clock inside the step: a commit slowed past the commit-age bound
    is refused, as one held up on its way to the store would be."""
    clock = ManualClock()
    inner = InMemoryBatchCoordinator(clock, commit_age_max_ms=10_000)
    assert await inner.create_topic("t", 1) == ErrorCode.NONE
    epoch = await inner.register_broker(1)
    faulty = FaultyBatchCoordinator(
        inner, commits=CallFaults(slow_rate=1.0, slow_latency_s=11.0, latency_s=0.5)
    )
    key = new_object_key(DEFAULT_OBJECT_PREFIX, clock.now_ms(), 1)
    commit = asyncio.ensure_future(faulty.commit_files(1, epoch, [FileCommit(key, 1, [batch(TP)])]))
    await clock.advance(11.0)
    assert not commit.done()
    await clock.advance(0.5)
    (result,) = await commit
    assert result.refused is CommitRefusal.OBJECT_KEY_CONFLICT
    assert "created 11500 ms ago" in (result.reason or "")
    assert faulty.store.injected == {(StoreCall.COMMIT, StepFault.SLOW): 1}


async def test_the_same_seed_draws_the_same_faults() -> None:
    async def run(seed: int) -> list[str]:
        faulty = FaultyBatchCoordinator(
            InMemoryBatchCoordinator(),
            random.Random(seed),
            writes=CallFaults(fail_rate=0.3, lost_answer_rate=0.3),
            reads=CallFaults(fail_rate=0.3),
        )
        outcomes = []
        for n in range(40):
            try:
                outcomes.append(repr(await faulty.create_topic(f"t{n}", 1)))
                outcomes.append(repr(len(await faulty.describe_topics())))
            except CoordinatorUnavailableError as error:
                outcomes.append(str(error))
        return outcomes

    first = await run(7)
    assert first == await run(7)
    assert first != await run(8)
    assert {repr(ErrorCode.NONE), "injected: a write failed before its step"} <= set(first)
    assert "injected: a write step was applied, then its answer lost" in first
