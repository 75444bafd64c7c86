"""Faults injected at the coordinator's store boundary, for simulations and failure tests.

`FaultyCoordinatorStore` wraps a `CoordinatorStore`, so the engine above it runs its real steps
(a group commit is one step: all of its objects or none) and each fault lands where a store's
own failures land:
- FAIL: the call raises `CoordinatorUnavailableError` before the store sees it: nothing applied;
- LOST_ANSWER: a write's step runs and is applied, then its answer is lost. A commit raises
  `CommitOutcomeUnknownError`, the case that makes retries need idempotence; any other write
  raises `CoordinatorUnavailableError`, as a PostgreSQL step does whose COMMIT answer never came;
- SLOW: the call first waits `slow_latency_s` more on the injected clock (a broker paused before
  its commit reaches the store, which then lands past its lease).
Every call also waits `latency_s` first. Faults are drawn from a seeded `random.Random`, the same
number of draws per call, so the same seed and the same call order replay the same faults.

`FaultyBatchCoordinator` is the engine over such a store wrapping another coordinator's store.
"""

from __future__ import annotations

import asyncio
import collections
import enum
import random
from collections.abc import Callable, Coroutine
from dataclasses import dataclass
from typing import Any, TypeVar

from diskless._fault_dice import Latency, Roll, roll
from diskless.clock import Clock, SystemClock
from diskless.coordinator._api import BatchCoordinator
from diskless.coordinator._engine import CoordinatorEngine
from diskless.coordinator._engine.base import EngineBase
from diskless.coordinator._feed import ChangeListener
from diskless.coordinator._store import (
    CoordinatorStore,
    Durability,
    Operation,
    Query,
    StoreStep,
)
from diskless.errors import CommitOutcomeUnknownError, CoordinatorUnavailableError

T = TypeVar("T")


class StoreCall(enum.Enum):
    """The kinds of store calls faults target."""

    COMMIT = "commit"
    """A write whose failure may leave its outcome unknown: the commit of uploaded objects."""
    WRITE = "write"
    """Any other write."""
    READ = "read"


class StepFault(enum.Enum):
    """What happens to one store call."""

    NONE = "none"
    FAIL = "fail"
    LOST_ANSWER = "lost_answer"
    SLOW = "slow"


@dataclass(frozen=True)
class CallFaults:
    """The faults of one kind of store call, as probabilities and latencies."""

    fail_rate: float = 0.0
    lost_answer_rate: float = 0.0
    slow_rate: float = 0.0
    slow_latency_s: Latency = 1.0
    latency_s: Latency = 0.0

    def __post_init__(self) -> None:
        rates = (self.fail_rate, self.lost_answer_rate, self.slow_rate)
        if not all(0.0 <= rate <= 1.0 for rate in rates):
            raise ValueError(f"fault rates must be probabilities in [0, 1], got {rates}")
        if self.fail_rate + self.lost_answer_rate > 1.0:
            raise ValueError("fail_rate + lost_answer_rate must not exceed 1")


NO_FAULTS = CallFaults()

_ROLLED = {
    Roll.NONE: StepFault.NONE,
    Roll.FAIL: StepFault.FAIL,
    Roll.LOST: StepFault.LOST_ANSWER,
    Roll.SLOW: StepFault.SLOW,
}


class FaultyCoordinatorStore:
    """Wraps `inner` (a `CoordinatorStore`) and makes chosen calls fail, lose their answer or
    run slow: from an explicit schedule first (`schedule`), then at the configured rates.

    Set `enabled = False` to stop injecting faults (e.g. for the verification phase of a test);
    latencies stay, and the draws go on, so that what follows replays alike.
    """

    @property
    def retries(self) -> int:
        """The wrapped store's (`EngineBase.step_retries`)."""
        return int(getattr(self.inner, "retries", 0))

    def __init__(
        self,
        inner: CoordinatorStore,
        rng: random.Random,
        *,
        clock: Clock | None = None,
        commits: CallFaults = NO_FAULTS,
        writes: CallFaults = NO_FAULTS,
        reads: CallFaults = NO_FAULTS,
    ) -> None:
        if reads.lost_answer_rate:
            raise ValueError("a read changes nothing, so it has no answer to lose: use fail_rate")
        self.inner = inner
        self._rng = rng
        self._clock: Clock = clock if clock is not None else SystemClock()
        self._faults = {StoreCall.COMMIT: commits, StoreCall.WRITE: writes, StoreCall.READ: reads}
        self._schedule: dict[StoreCall, collections.deque[StepFault]] = {
            call: collections.deque() for call in StoreCall
        }
        self.enabled = True
        self.injected: collections.Counter[tuple[StoreCall, StepFault]] = collections.Counter()

    def schedule(self, call: StoreCall, *faults: StepFault) -> None:
        """The next calls of kind `call` get these faults, in order, before the rates apply."""
        if call is StoreCall.READ and StepFault.LOST_ANSWER in faults:
            raise ValueError("a read has no answer to lose")
        self._schedule[call].extend(faults)

    # --- CoordinatorStore ---------------------------------------------------------------------
    async def write(
        self,
        operation: Operation,
        step: Callable[[StoreStep], Coroutine[Any, Any, T]],
        durability: Durability = Durability.DURABLE,
        outcome_unknown_on_failure: bool = False,
    ) -> T:
        call = StoreCall.COMMIT if outcome_unknown_on_failure else StoreCall.WRITE
        fault = await self._before(call)
        result = await self.inner.write(operation, step, durability, outcome_unknown_on_failure)
        if fault is StepFault.LOST_ANSWER:
            message = f"injected: a {call.value} step was applied, then its answer lost"
            if call is StoreCall.COMMIT:
                raise CommitOutcomeUnknownError(message)
            raise CoordinatorUnavailableError(message)
        return result

    async def read(self, query: Query[T]) -> T:
        await self._before(StoreCall.READ)
        return await self.inner.read(query)

    def release_signal(self) -> asyncio.Future[None] | None:
        return self.inner.release_signal()

    def watch_changes(self, listener: ChangeListener) -> Callable[[], None]:
        return self.inner.watch_changes(listener)

    async def close(self) -> None:
        await self.inner.close()

    # --- the draws ----------------------------------------------------------------------------
    def _choose(self, call: StoreCall) -> tuple[StepFault, float]:
        """This call's fault and latency; always the same number of rng draws per call."""
        faults = self._faults[call]
        rolled, latency, slow_latency = roll(
            self._rng,
            fail_rate=faults.fail_rate,
            lost_rate=faults.lost_answer_rate,
            slow_rate=faults.slow_rate,
            latency_s=faults.latency_s,
            slow_latency_s=faults.slow_latency_s,
        )
        fault = _ROLLED[rolled]
        if not self.enabled:
            fault = StepFault.NONE
        elif self._schedule[call]:
            fault = self._schedule[call].popleft()
        if fault is StepFault.SLOW:
            latency += slow_latency
        return fault, latency

    async def _before(self, call: StoreCall) -> StepFault:
        fault, latency = self._choose(call)
        if fault is not StepFault.NONE:
            self.injected[call, fault] += 1
        if latency > 0:
            await self._clock.sleep(latency)
        if fault is StepFault.FAIL:
            raise CoordinatorUnavailableError(f"injected: a {call.value} failed before its step")
        return fault


class FaultyBatchCoordinator(CoordinatorEngine):
    """`inner`'s state and rules, through a `FaultyCoordinatorStore` over `inner`'s store.

    Every operation is the engine's own step, faults strike where the store fails, and `inner`
    sees everything applied through this one (a test audits through `inner`, fault free).
    Without faults it is a second engine over `inner`'s state, which failure tests subclass to
    watch or hold one operation (`super()` runs the real step). Closing it closes `inner`.
    """

    def __init__(
        self,
        inner: BatchCoordinator,
        rng: random.Random | None = None,
        *,
        commits: CallFaults = NO_FAULTS,
        writes: CallFaults = NO_FAULTS,
        reads: CallFaults = NO_FAULTS,
        clock: Clock | None = None,
    ) -> None:
        """`clock`, on which latencies run: `inner`'s by default."""
        if not isinstance(inner, EngineBase):
            raise TypeError(f"faults are injected below the engine, not around {inner!r}")
        self.inner = inner
        self.store = FaultyCoordinatorStore(
            inner._store,
            rng if rng is not None else random.Random(0),
            clock=clock if clock is not None else inner._clock,
            commits=commits,
            writes=writes,
            reads=reads,
        )
        super().__init__(self.store, inner._clock, inner._expiration_ms, inner.commit_bounds)

    @property
    def enabled(self) -> bool:
        return self.store.enabled

    @enabled.setter
    def enabled(self, value: bool) -> None:
        self.store.enabled = value

    async def close(self) -> None:
        self._closed = True
        await self.inner.close()
