"""The coordinator engine's plumbing: the store, the clock, and the closed check."""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable, Coroutine
from typing import Any, TypeVar

from diskless._availability import Availability
from diskless._limits import CommitBounds
from diskless.clock import Clock
from diskless.coordinator._api import (
    BatchCoordinator,
)
from diskless.coordinator._store import (
    CoordinatorStore,
    Durability,
    Operation,
    Query,
    ReadView,
    StoreStep,
)
from diskless.errors import CommitOutcomeUnknownError, CoordinatorError
from diskless.metrics import NULL_METRICS, Metrics, StepOutcome
from diskless.txn import ProducerEntry, is_expired

T = TypeVar("T")


class EngineBase(BatchCoordinator):
    """What every engine operation shares."""

    def __init__(
        self,
        store: CoordinatorStore,
        clock: Clock,
        producer_id_expiration_ms: int,
        commit_bounds: CommitBounds,
    ) -> None:
        self._store = store
        self._clock = clock
        self._expiration_ms = producer_id_expiration_ms
        self._bounds = commit_bounds
        self._closed = False
        self._availability = Availability("coordinator")
        self.metrics: Metrics = NULL_METRICS

    @property
    def commit_bounds(self) -> CommitBounds:
        return self._bounds

    @property
    def availability(self) -> Availability:
        return self._availability

    @property
    def step_retries(self) -> int:
        """Steps its store ran again after losing a race for the database (SQLite's busy lock,
        PostgreSQL's serialization failures and deadlocks); the in-memory store never does."""
        return int(getattr(self._store, "retries", 0))

    async def connect(self) -> None:
        if self._closed:
            raise RuntimeError("the coordinator is closed")
        await self._store.read(_nothing)

    async def _write(
        self,
        operation: Operation,
        step: Callable[[StoreStep], Coroutine[Any, Any, T]],
        durability: Durability = Durability.DURABLE,
        outcome_unknown_on_failure: bool = False,
    ) -> T:
        if self._closed:
            raise RuntimeError("the coordinator is closed")
        # The one place every step runs: its latency and outcome are measured here.
        started = time.perf_counter()
        outcome = StepOutcome.ERROR
        try:
            result = await self._reported(
                self._store.write(operation, step, durability, outcome_unknown_on_failure)
            )
            outcome = StepOutcome.OK
        except CommitOutcomeUnknownError:
            outcome = StepOutcome.UNKNOWN
            raise
        finally:
            self.metrics.coordinator_step(operation.value, time.perf_counter() - started, outcome)
        return result

    async def _read(self, query: Query[T]) -> T:
        if self._closed:
            raise RuntimeError("the coordinator is closed")
        return await self._reported(self._store.read(query))

    async def _reported(self, call: Awaitable[T]) -> T:
        """`call`'s outcome, reported to the availability: every operation passes here."""
        try:
            result = await call
        except CoordinatorError as error:
            self._availability.report(error)
            raise
        self._availability.answered()
        return result

    def _live(self, entry: ProducerEntry | None, now_ms: int) -> ProducerEntry | None:
        """The entry, unless it has expired (then the producer is unknown)."""
        if entry is not None and is_expired(entry, now_ms, self._expiration_ms):
            return None
        return entry

    async def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        await self._store.close()


async def _nothing(view: ReadView) -> None:
    """A read that asks for nothing: the store is reached, and opened on first use."""
