"""A deliberately broken coordinator store, for checking that simulations catch broken atomicity.

No correct store does what `HalfGroupStore` does: it applies only half of a group commit's
objects, then fails the step. A simulation whose auditor does not notice is too weak.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Coroutine
from typing import Any, TypeVar

from msgspec.structs import replace

from diskless._limits import COMMIT_AGE_MAX_MS_DEFAULT, CommitBounds
from diskless._object_keys import DEFAULT_OBJECT_PREFIX
from diskless.clock import Clock
from diskless.coordinator._backends.memory import MemoryStore
from diskless.coordinator._engine import CoordinatorEngine
from diskless.coordinator._store import (
    Changes,
    CoordinatorStore,
    Durability,
    Needs,
    Operation,
    Query,
    Snapshot,
    StoreStep,
)
from diskless.errors import CommitOutcomeUnknownError
from diskless.txn import PRODUCER_ID_EXPIRATION_MS_DEFAULT

T = TypeVar("T")


class _HalvingStep:
    """A step's access to the store that applies a group commit's first half only."""

    def __init__(self, inner: StoreStep) -> None:
        self.inner = inner
        self.torn = False

    async def load(self, needs: Needs) -> Snapshot:
        return await self.inner.load(needs)

    async def apply(self, changes: Changes) -> list[int]:
        kept = set(list(changes.files)[: len(changes.files) // 2])
        batches = [b for b in changes.batches if b.object_key in kept]
        if len(changes.files) >= 2 and len(batches) < len(changes.batches):
            self.torn = True
            files = {key: row for key, row in changes.files.items() if key in kept}
            changes = replace(changes, files=files, batches=batches)
        return await self.inner.apply(changes)


class HalfGroupStore:
    """Wraps `inner`; a step that commits several objects at once gets only the first half of
    them applied (with the partitions and producer entries of all of them), then fails as if
    its answer were lost. `torn_groups` counts the steps it tore (whose second half had
    batches to append)."""

    def __init__(self, inner: CoordinatorStore) -> None:
        self.inner = inner
        self.torn_groups = 0

    async def write(
        self,
        operation: Operation,
        step: Callable[[StoreStep], Coroutine[Any, Any, T]],
        durability: Durability = Durability.DURABLE,
        outcome_unknown_on_failure: bool = False,
    ) -> T:
        if operation is not Operation.COMMIT_FILES:
            return await self.inner.write(operation, step, durability, outcome_unknown_on_failure)
        halvings: list[_HalvingStep] = []

        async def halved(db: StoreStep) -> T:
            halvings.append(_HalvingStep(db))
            return await step(halvings[-1])

        result = await self.inner.write(operation, halved, durability, outcome_unknown_on_failure)
        if any(halving.torn for halving in halvings):
            self.torn_groups += 1
            raise CommitOutcomeUnknownError("half of the group was applied")
        return result

    async def read(self, query: Query[T]) -> T:
        return await self.inner.read(query)

    def release_signal(self) -> asyncio.Future[None] | None:
        return self.inner.release_signal()

    async def close(self) -> None:
        await self.inner.close()


class HalfGroupCoordinators:
    """Makes in-memory coordinators over `HalfGroupStore`s, and counts the groups they tore."""

    def __init__(self) -> None:
        self.stores: list[HalfGroupStore] = []

    def __call__(self, clock: Clock) -> CoordinatorEngine:
        self.stores.append(HalfGroupStore(MemoryStore()))
        return CoordinatorEngine(
            self.stores[-1],
            clock,
            PRODUCER_ID_EXPIRATION_MS_DEFAULT,
            CommitBounds(DEFAULT_OBJECT_PREFIX, COMMIT_AGE_MAX_MS_DEFAULT),
        )

    @property
    def torn_groups(self) -> int:
        return sum(store.torn_groups for store in self.stores)
