"""The engine's consolidation and compaction: offering runs of batch rows, and swapping them
for an extent (consolidation's copy, or the cleaner's cleaned object over the same offsets).

The swap is one atomic step that re-reads the rows it replaces, so that retention,
DeleteRecords, topic deletion or another consolidator acting in between makes it a refusal
(with no change) rather than a swap over rows that are no longer the candidate's.
"""

from __future__ import annotations

from collections import Counter

from msgspec.structs import replace

from diskless._object_keys import commit_too_late
from diskless._types import TopicPartition
from diskless.coordinator._engine.files import FileOperations
from diskless.coordinator._rules import cleaning as cleaning_rules
from diskless.coordinator._rules import extents
from diskless.coordinator._rules.checks import object_key_taken
from diskless.coordinator._rules.files import committed_file
from diskless.coordinator._rules.rows import AbortedTxn, PartitionState, StoredBatch
from diskless.coordinator._store import Changes, Needs, Operation, ReadView, Snapshot, StoreStep
from diskless.coordinator._values import (
    AbortedEntry,
    CleanedSwap,
    CleaningRange,
    ConsolidationCandidate,
    ExtentSwap,
    ExtentSwapResult,
    MetadataStats,
)


class ConsolidationOperations(FileOperations):
    async def consolidation_candidates(
        self, committed_before_ms: int, bytes_max: int, limit: int
    ) -> list[ConsolidationCandidate]:
        async def pick(view: ReadView) -> list[ConsolidationCandidate]:
            oldest: list[tuple[int, str, int, PartitionState]] = []
            heads = await view.unconsolidated_heads()
            keys = sorted({first.object_key for _, first in heads if first.object_key})
            files = await view.files(keys)
            for state, first in heads:
                if extents.candidate_run(state, [first], files, committed_before_ms):
                    committed = extents.commit_time(first, files)
                    assert committed is not None
                    tp = state.topic_partition
                    oldest.append((committed, tp.topic, tp.partition, state))
            oldest.sort(key=lambda entry: entry[:3])
            candidates = []
            for *_, state in oldest[: max(0, limit)]:
                rows = extents.leading_bytes(await _leading_rows(view, state, bytes_max), bytes_max)
                files = await view.files(sorted({row.object_key for row in rows if row.object_key}))
                run = extents.candidate_run(state, rows, files, committed_before_ms)
                timestamp_type = state.config.timestamp_type
                batches = [row.to_info(timestamp_type) for row in run]
                candidates.append(ConsolidationCandidate(state.topic_partition, batches, state.key))
            return candidates

        return await self._read(pick)

    def _object_conflict(self, snapshot: Snapshot, object_key: str, now: int) -> str | None:
        """Why the object a swap brings may not be committed (its key is taken, or it was
        uploaded too long ago: `commit_too_late`), or None."""
        existing = snapshot.files.get(object_key)
        taken = object_key_taken(object_key, None if existing is None else existing.state)
        return taken or commit_too_late(
            object_key, self._bounds.object_prefix, now, self._bounds.commit_age_max_ms
        )

    async def commit_extent(self, swap: ExtentSwap) -> ExtentSwapResult:
        candidate = swap.candidate
        if not candidate.batches:
            raise ValueError("an extent swap needs a candidate with at least one batch")
        tp = candidate.topic_partition
        base = candidate.batches[0].base_offset

        async def commit(db: StoreStep) -> ExtentSwapResult:
            now = self._clock.now_ms()
            snapshot = await db.load(Needs(partitions=(tp,), files=(swap.object_key,)))
            conflict = self._object_conflict(snapshot, swap.object_key, now)
            if conflict is not None:
                return ExtentSwapResult(False, conflict)
            state = snapshot.partitions.get(tp)
            rows: list[StoredBatch] = []
            if state is not None:
                wanted = {state.key: (max(0, base - 1), len(candidate.batches) + 1)}
                rows = (await db.load(Needs(batches=wanted))).batches.get(state.key, [])
            refusal = extents.swap_refusal(state, candidate, rows)
            if refusal is not None:
                return ExtentSwapResult(False, refusal)
            assert state is not None
            if rows[0].last_offset < base:
                rows = rows[1:]
            rows = rows[: len(candidate.batches)]
            extent = extents.extent_row(rows, swap)
            released = Counter(row.object_key for row in rows if row.object_key)
            files = await self._released_files(db, released, now)
            files[swap.object_key] = committed_file(swap.object_size, 1, now)
            moved = sum(row.size for row in rows)
            new_state = replace(state, size_bytes=state.size_bytes - moved + extent.size)
            await db.apply(Changes(files=files, extents=[extent], partitions=[new_state]))
            return ExtentSwapResult(True)

        return await self._write(Operation.COMMIT_EXTENT, commit)

    async def cleaning_range(self, tp: TopicPartition, bytes_max: int) -> CleaningRange | None:
        async def read(view: ReadView) -> CleaningRange | None:
            state = await view.partition(tp)
            topics = await view.topics([tp.topic])
            if state is None or not topics:
                return None
            rows: list[StoredBatch] = []
            size = 0
            async for row in view.batches_from(state, state.log_start_offset):
                if row.base_offset >= state.high_watermark or (
                    rows and size + row.size > bytes_max
                ):
                    break
                rows.append(row)
                size += row.size
            aborted: list[AbortedEntry] = []
            if rows:
                async for entry in view.aborted_from(state, rows[0].base_offset):
                    if entry.first_offset <= rows[-1].last_offset:
                        aborted.append(AbortedEntry(*entry))
            now = self._clock.now_ms()
            last_records: dict[int, tuple[int | None, int]] = {}
            for producer in await view.producers_of(state.key):
                if self._live(producer, now) is not None:
                    last = producer.batches[-1].last_offset if producer.batches else None
                    last_records[producer.producer_id] = (last, producer.producer_epoch)
            timestamp_type = state.config.timestamp_type
            return CleaningRange(
                tp,
                state.key,
                topics[0].config,
                state.log_start_offset,
                state.high_watermark,
                state.last_stable_offset,
                [row.to_info(timestamp_type) for row in rows],
                aborted,
                last_records,
            )

        return await self._read(read)

    async def commit_cleaned(self, swap: CleanedSwap) -> ExtentSwapResult:
        cleaning = swap.cleaning
        if not 0 < swap.rows <= len(cleaning.batches):
            raise ValueError(f"a cleaned swap replaces 1..{len(cleaning.batches)} rows")
        tp = cleaning.topic_partition
        replaced = cleaning.batches[: swap.rows]
        end = replaced[-1].last_offset + 1

        async def commit(db: StoreStep) -> ExtentSwapResult:
            now = self._clock.now_ms()
            snapshot = await db.load(Needs(partitions=(tp,), files=(swap.object_key,)))
            conflict = self._object_conflict(snapshot, swap.object_key, now)
            if conflict is not None:
                return ExtentSwapResult(False, conflict)
            state = snapshot.partitions.get(tp)
            rows: list[StoredBatch] = []
            if state is not None:
                wanted = {state.key: (replaced[0].base_offset, len(replaced))}
                rows = list((await db.load(Needs(batches=wanted))).batches.get(state.key, []))
            refusal = cleaning_rules.cleaned_refusal(state, cleaning, replaced, rows)
            if refusal is not None:
                return ExtentSwapResult(False, refusal)
            assert state is not None
            rows = rows[: len(replaced)]
            extent = cleaning_rules.cleaned_extent(rows, swap)
            released = Counter(row.object_key for row in rows if row.object_key)
            files = await self._released_files(db, released, now)
            files[swap.object_key] = committed_file(swap.object_size, 1, now)
            moved = sum(row.size for row in rows)
            new_state = replace(state, size_bytes=state.size_bytes - moved + extent.size)
            kept = [
                (
                    state.key,
                    AbortedTxn(e.producer_id, e.first_offset, e.last_offset, e.last_stable_offset),
                )
                for e in swap.aborted_kept
                if e.last_offset < end
            ]
            await db.apply(
                Changes(
                    files=files,
                    trims={state.key: end},
                    extents=[extent],
                    partitions=[new_state],
                    aborted=kept,
                )
            )
            return ExtentSwapResult(True)

        return await self._write(Operation.COMMIT_CLEANED, commit)

    async def metadata_stats(self) -> MetadataStats:
        return await self._read(lambda view: view.metadata_stats())


async def _leading_rows(view: ReadView, state: PartitionState, bytes_max: int) -> list[StoredBatch]:
    """The partition's leading unconsolidated rows, until they hold more than `bytes_max`."""
    rows: list[StoredBatch] = []
    size = 0
    async for row in view.unconsolidated_rows(state):
        rows.append(row)
        size += row.size
        if size > bytes_max:
            break
    return rows
