"""The engine's commits: a broker's uploaded objects, committed in one step.

A broker commits every object waiting in line at once (`_rules.group`): each is checked
(`_rules.checks`: the broker's epoch, the object's key) and planned (`_rules.commit`) on the state
the objects before it left, and the step applies all of them or none.
"""

from __future__ import annotations

from collections.abc import Sequence

from diskless._object_keys import commit_too_late
from diskless._types import NO_PRODUCER_ID
from diskless.coordinator._engine.base import EngineBase
from diskless.coordinator._rules.checks import broker_fenced, object_key_taken
from diskless.coordinator._rules.commit import plan_commit
from diskless.coordinator._rules.group import CommitGroup
from diskless.coordinator._store import Changes, Needs, Operation, StoreStep
from diskless.coordinator._values import (
    CommitBatch,
    CommitFileResult,
    CommitRefusal,
    FileCommit,
)


class CommitOperations(EngineBase):
    async def commit_file(
        self,
        object_key: str,
        broker_id: int,
        broker_epoch: int,
        file_size: int,
        batches: Sequence[CommitBatch],
    ) -> CommitFileResult:
        (result,) = await self.commit_files(
            broker_id, broker_epoch, [FileCommit(object_key, file_size, batches)]
        )
        return result

    async def commit_files(
        self, broker_id: int, broker_epoch: int, files: Sequence[FileCommit]
    ) -> list[CommitFileResult]:
        files = list(files)
        needs = _commit_needs(broker_id, files)

        async def commit(db: StoreStep) -> list[CommitFileResult]:
            now = self._clock.now_ms()
            snapshot = await db.load(needs)
            fenced = broker_fenced(broker_id, broker_epoch, snapshot.broker_epochs.get(broker_id))
            if fenced is not None:
                return [CommitFileResult([], CommitRefusal.BROKER_FENCED, fenced)] * len(files)
            group = CommitGroup(
                snapshot.partitions, snapshot.producers, snapshot.leases, snapshot.files
            )
            results = []
            for file in files:
                key = file.object_key
                existing = group.stored_files.get(key)
                conflict = object_key_taken(
                    key, None if existing is None else existing.state
                ) or commit_too_late(
                    key, self._bounds.object_prefix, now, self._bounds.commit_age_max_ms
                )
                if conflict is not None:
                    results.append(
                        CommitFileResult([], CommitRefusal.OBJECT_KEY_CONFLICT, conflict)
                    )
                    continue
                plan = plan_commit(
                    key,
                    file.batches,
                    group.partitions,
                    group.producers,
                    now,
                    self._expiration_ms,
                    snapshot.registrations,
                    group.leases,
                    object_size=file.file_size,
                )
                group.add(key, file.file_size, plan, now)
                results.append(CommitFileResult(plan.results))
            if group.files:
                await db.apply(
                    Changes(
                        files=group.files,
                        batches=group.batches,
                        partitions=list(group.partition_states.values()),
                        producers=group.producer_entries,
                        leases_released=group.released_leases,
                        ongoing_opened=group.opened_txns,
                    )
                )
            return results

        return await self._write(Operation.COMMIT_FILES, commit, outcome_unknown_on_failure=True)


def _commit_needs(broker_id: int, files: Sequence[FileCommit]) -> Needs:
    """What committing `files` reads: every partition, producer, registration and lease their
    batches name, the broker's epoch and the files' rows."""
    partitions = set()
    producers = set()
    registrations = set()
    leases = set()
    for file in files:
        for b in file.batches:
            partitions.add(b.topic_partition)
            if b.producer_id != NO_PRODUCER_ID:
                producers.add((b.topic_partition, b.producer_id))
                if b.is_transactional:
                    registrations.add((b.topic_partition, b.producer_id))
            if b.lease_id is not None:
                leases.add(b.lease_id)
    return Needs(
        partitions=partitions,
        producers=producers,
        registrations=registrations,
        leases=leases,
        brokers=(broker_id,),
        files={f.object_key for f in files},
    )
