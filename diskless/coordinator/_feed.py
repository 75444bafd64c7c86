"""The coordinator's change feed: which partitions a committed step changed.

Brokers keep a local view of partition state (`diskless.read`) and park waiting fetches on it;
the feed tells them when to look again. A store publishes, after each step that commits, the
partitions whose high watermark, last stable offset or log start moved, and the topics created,
grown, reconfigured or deleted (`PartitionChanges`), to this process's listeners at once. Other
processes learn it their backend's way: PostgreSQL sends the same value with NOTIFY in the step's
own transaction (delivered on commit, in commit order); SQLite's processes notice a changed file
with one cheap check per interval and are told "everything may have changed".

The feed is a hint, never the truth: a listener re-reads what changed from the coordinator. A
lost or late notice therefore delays a broker, never misleads it, and each listener reconciles
on its own clock as well.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Collection, Coroutine, Sequence
from typing import Any, Final, TypeVar

from diskless._types import TopicPartition
from diskless.coordinator._api import ChangeListener as ChangeListener
from diskless.coordinator._store import Changes, Needs, Snapshot, StoreStep
from diskless.coordinator._values import PartitionChanges

_log = logging.getLogger(__name__)

T = TypeVar("T")

NOTIFY_CHANNEL: Final = "diskless_partition_changes"


def changes_of(applied: Sequence[Changes]) -> PartitionChanges:
    """What the `Changes` a step applied mean for fetches."""
    partitions: set[TopicPartition] = set()
    topics: set[str] = set()
    for changes in applied:
        partitions.update(state.topic_partition for state in changes.partitions)
        topics.update(changes.topics_deleted)
        topics.update(row.name for row in changes.topics_created)
        topics.update(name for name, _ in changes.partitions_added)
        topics.update(changes.topic_configs)
    return PartitionChanges(frozenset(partitions), frozenset(topics))


class RecordingStep:
    """A `StoreStep` that passes everything to `inner` and keeps what was applied: the store
    publishes it once the step has committed."""

    def __init__(self, inner: StoreStep) -> None:
        self.inner = inner
        self.applied: list[Changes] = []

    async def load(self, needs: Needs) -> Snapshot:
        return await self.inner.load(needs)

    async def apply(self, changes: Changes) -> list[int]:
        self.applied.append(changes)
        return await self.inner.apply(changes)

    def changes(self) -> PartitionChanges:
        return changes_of(self.applied)


def recorded(
    step: Callable[[StoreStep], Coroutine[Any, Any, T]],
) -> tuple[Callable[[StoreStep], Coroutine[Any, Any, T]], list[RecordingStep]]:
    """`step` run through a `RecordingStep`, and the list that holds the last run's one (a store
    may run a step several times: only the run that committed counts)."""
    runs: list[RecordingStep] = []

    def run(db: StoreStep) -> Coroutine[Any, Any, T]:
        recording = RecordingStep(db)
        runs[:] = [recording]
        return step(recording)

    return run, runs


class ChangeListeners:
    """This process's listeners of one store."""

    def __init__(self) -> None:
        self._listeners: list[ChangeListener] = []

    def __len__(self) -> int:
        return len(self._listeners)

    def add(self, listener: ChangeListener) -> Callable[[], None]:
        """Adds `listener`; returns the call that removes it."""
        self._listeners.append(listener)

        def remove() -> None:
            if listener in self._listeners:
                self._listeners.remove(listener)

        return remove

    def publish(self, changes: PartitionChanges) -> None:
        if not changes:
            return
        for listener in tuple(self._listeners):
            try:
                listener(changes)
            except Exception:  # a listener's bug must not fail the step that committed
                _log.exception("a change listener failed")

    def publish_runs(self, runs: Collection[RecordingStep]) -> None:
        for run in runs:
            self.publish(run.changes())
