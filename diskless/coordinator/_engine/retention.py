"""The engine's deletion of records: DeleteRecords and retention move partitions' log start
(`_rules.retention`), deleting the batches below it and releasing the files they referred to
(`files`).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from typing import Final

from msgspec.structs import replace

from diskless.coordinator._engine.files import FileOperations
from diskless.coordinator._rules.retention import RetentionScan, decide_delete_records
from diskless.coordinator._rules.rows import PartitionState, StoredBatch
from diskless.coordinator._store import BatchRefs, Changes, Needs, Operation, StoreStep
from diskless.coordinator._values import (
    DeleteRecordsRequest,
    DeleteRecordsResponse,
    RetentionResult,
)

RETENTION_CHUNK_ROWS: Final = 256
"""Batches loaded at a time while retention walks a partition from its start."""


class RetentionOperations(FileOperations):
    async def delete_records(
        self, requests: Sequence[DeleteRecordsRequest]
    ) -> list[DeleteRecordsResponse]:
        needs = Needs(partitions={r.topic_partition for r in requests})

        async def delete(db: StoreStep) -> list[DeleteRecordsResponse]:
            now = self._clock.now_ms()
            states = dict((await db.load(needs)).partitions)
            trims: dict[int, PartitionState] = {}
            responses = []
            for request in requests:
                state = states.get(request.topic_partition)
                decision = decide_delete_records(state, request.offset)
                if state is not None and decision.new_log_start_offset is not None:
                    state = replace(state, log_start_offset=decision.new_log_start_offset)
                    states[request.topic_partition] = trims[state.key] = state
                responses.append(decision.response)
            if trims:
                await self._trim(db, trims, {}, now)
            return responses

        return await self._write(Operation.DELETE_RECORDS, delete)

    async def _trim(
        self,
        db: StoreStep,
        trimmed: dict[int, PartitionState],
        refs: dict[int, BatchRefs],
        now_ms: int,
    ) -> None:
        """Move each partition's log start to its `log_start_offset`, deleting the batches
        entirely below it; `refs` may already hold what some of them reference."""
        missing = {k: s.log_start_offset for k, s in trimmed.items() if k not in refs}
        if missing:
            refs.update((await db.load(Needs(batch_refs=missing))).batch_refs)
        released: Counter[str] = Counter()
        states = []
        for key, state in trimmed.items():
            released.update(refs[key].files)
            states.append(replace(state, size_bytes=state.size_bytes - refs[key].size_bytes))
        await db.apply(
            Changes(
                trims={k: s.log_start_offset for k, s in trimmed.items()},
                partitions=states,
                files=await self._released_files(db, released, now_ms),
            )
        )

    async def enforce_retention(self, max_batches: int = 10_000) -> RetentionResult:
        async def enforce(db: StoreStep) -> RetentionResult:
            now = self._clock.now_ms()
            budget = max_batches
            more = False
            trimmed: dict[int, PartitionState] = {}
            refs: dict[int, BatchRefs] = {}
            retained = (await db.load(Needs(retained_partitions=True))).retained_partitions
            names = {state.topic_partition.topic for state in retained}
            topics = (await db.load(Needs(topics=names))).topics if names else {}
            for state in retained:
                topic = topics.get(state.topic_partition.topic)
                if topic is not None and not topic.config.deletes:
                    continue  # cleanup.policy=compact: cleaned, never deleted by time or size
                scan = RetentionScan(state, now, budget)
                offset = state.log_start_offset
                while not scan.done:
                    rows = (
                        await db.load(Needs(batches={state.key: (offset, RETENTION_CHUNK_ROWS)}))
                    ).batches.get(state.key, [])
                    scan.feed(rows)
                    if len(rows) < RETENTION_CHUNK_ROWS:
                        break
                    offset = rows[-1].last_offset + 1
                more = more or scan.more
                victims = scan.victims
                if not victims:
                    continue
                new_start = max(state.log_start_offset, victims[-1].last_offset + 1)
                trimmed[state.key] = replace(state, log_start_offset=new_start)
                refs[state.key] = _refs_of(victims)
                budget -= len(victims)
            deleted_batches = max_batches - budget
            deleted_bytes = sum(r.size_bytes for r in refs.values())
            if trimmed:
                await self._trim(db, trimmed, refs, now)
            await db.apply(Changes(producers_idle_before=now - self._expiration_ms))
            return RetentionResult(deleted_batches, deleted_bytes, more)

        return await self._write(Operation.ENFORCE_RETENTION, enforce)


def _refs_of(batches: Sequence[StoredBatch]) -> BatchRefs:
    files = Counter(b.object_key for b in batches if b.object_key)
    return BatchRefs(dict(files), sum(b.size for b in batches))
