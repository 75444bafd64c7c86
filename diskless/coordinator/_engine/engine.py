"""The coordinator engine: every `BatchCoordinator` operation, written once over a store.

Each write is one step run atomically by the store (`_store.CoordinatorStore.write`): read the
clock, check the preconditions, load what the rules need, decide with the rules (`_rules`), apply
what they decided. The clock is read inside the step, so a step that waited for the store's lock
decides on the time at which it lands. Reads go through the store's read view and never wait
behind writes. A backend is only a store: see `_backends`.
"""

from __future__ import annotations

import uuid
from collections import Counter
from collections.abc import Callable, Sequence
from typing import Final

from msgspec.structs import replace

from diskless._object_keys import commit_too_late
from diskless._types import NO_PRODUCER_ID, ErrorCode, TopicPartition
from diskless.coordinator._api import ChangeListener
from diskless.coordinator._engine.acls import AclOperations
from diskless.coordinator._engine.consumer_groups import GroupOperations
from diskless.coordinator._engine.extents import ConsolidationOperations
from diskless.coordinator._engine.scram import ScramOperations
from diskless.coordinator._engine.txn_records import TxnRecordOperations
from diskless.coordinator._rules import reads
from diskless.coordinator._rules.checks import broker_fenced, check_new_topic, object_key_taken
from diskless.coordinator._rules.commit import plan_commit
from diskless.coordinator._rules.files import (
    FileRow,
    condemned_file,
    may_forget,
    released_file,
)
from diskless.coordinator._rules.group import CommitGroup
from diskless.coordinator._rules.ownership import id_in_use, renewal_drops_leases
from diskless.coordinator._rules.rows import (
    PartitionState,
    StoredBatch,
)
from diskless.coordinator._rules.snapshots import producer_snapshot
from diskless.coordinator._store import (
    EMPTY,
    OFFSET_END,
    BatchRefs,
    Changes,
    Durability,
    Needs,
    Operation,
    ReadView,
    StoreStep,
    TopicRow,
    decide,
)
from diskless.coordinator._values import (
    BrokerRegistration,
    CommitBatch,
    CommitFileResult,
    CommitRefusal,
    DeleteRecordsRequest,
    DeleteRecordsResponse,
    FileCommit,
    FileInfo,
    FileState,
    FileStats,
    FindBatchesRequest,
    FindBatchesResponse,
    ListOffsetsRequest,
    ListOffsetsResponse,
    PartitionOffsets,
    ProducerSnapshot,
    RetentionResult,
    TopicConfig,
    TopicDescription,
)
from diskless.errors import BrokerIdInUseError

RETENTION_CHUNK_ROWS: Final = 256
"""Batches loaded at a time while retention walks a partition from its start."""


class CoordinatorEngine(
    TxnRecordOperations, ConsolidationOperations, GroupOperations, ScramOperations, AclOperations
):
    """A batch coordinator over any `CoordinatorStore`: the rules here, the state there."""

    # --- topics -------------------------------------------------------------------------------
    async def create_topic(
        self, name: str, partitions: int, config: TopicConfig | None = None
    ) -> ErrorCode:
        check_new_topic(name, partitions)
        row = TopicRow(
            name, partitions, config if config is not None else TopicConfig(), uuid.uuid4()
        )

        async def create(db: StoreStep) -> ErrorCode:
            if name in (await db.load(Needs(topics={name}))).topics:
                return ErrorCode.TOPIC_ALREADY_EXISTS
            await db.apply(Changes(topics_created=[row]))
            return ErrorCode.NONE

        return await self._write(Operation.CREATE_TOPIC, create)

    async def create_partitions(self, name: str, total_partitions: int) -> ErrorCode:
        async def grow(db: StoreStep) -> ErrorCode:
            topic = (await db.load(Needs(topics={name}))).topics.get(name)
            if topic is None:
                return ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
            if total_partitions <= topic.partition_count:
                return ErrorCode.INVALID_PARTITIONS
            await db.apply(Changes(partitions_added=[(name, total_partitions)]))
            return ErrorCode.NONE

        return await self._write(Operation.CREATE_PARTITIONS, grow)

    async def describe_topics(self, names: Sequence[str] | None = None) -> list[TopicDescription]:
        rows = await self._read(lambda view: view.topics(names))
        return [TopicDescription(r.name, r.partition_count, r.config, r.topic_id) for r in rows]

    async def delete_topics(self, names: Sequence[str]) -> list[ErrorCode]:
        async def delete(db: StoreStep) -> list[ErrorCode]:
            now = self._clock.now_ms()
            topics = (await db.load(Needs(topics=set(names)))).topics
            results = [
                ErrorCode.NONE if name in topics else ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
                for name in names
            ]
            if not topics:
                return results
            tps = {
                TopicPartition(t.name, i) for t in topics.values() for i in range(t.partition_count)
            }
            keys = [s.key for s in (await db.load(Needs(partitions=tps))).partitions.values()]
            refs = (await db.load(Needs(batch_refs=dict.fromkeys(keys, OFFSET_END)))).batch_refs
            released: Counter[str] = Counter()
            for partition_refs in refs.values():
                released.update(partition_refs.files)
            files = await self._released_files(db, released, now)
            await db.apply(Changes(topics_deleted=list(topics), files=files))
            return results

        return await self._write(Operation.DELETE_TOPICS, delete)

    # --- brokers ------------------------------------------------------------------------------
    async def register_broker(self, broker_id: int, *, exclusive: bool = False) -> int:
        needs = Needs(brokers=(broker_id,), broker_registrations=(broker_id,))

        async def register(db: StoreStep) -> int:
            now = self._clock.now_ms()
            snapshot = await db.load(needs)
            live = snapshot.broker_registrations.get(broker_id)
            if exclusive and live is not None and id_in_use(live, now):
                raise BrokerIdInUseError(broker_id, live.broker_epoch, live.expires_ms - now)
            epoch = snapshot.broker_epochs.get(broker_id, 0) + 1
            # The older incarnations' leases die with them (`_rules.ownership`).
            await db.apply(
                Changes(broker_epochs={broker_id: epoch}, broker_leases_dropped={broker_id: epoch})
            )
            return epoch

        return await self._write(Operation.REGISTER_BROKER, register)

    async def announce_broker(
        self,
        broker_id: int,
        broker_epoch: int,
        host: str,
        port: int,
        rack: str | None,
        ttl_ms: int,
    ) -> bool:
        if ttl_ms < 0:
            raise ValueError(f"ttl_ms must be >= 0, got {ttl_ms}")

        needs = Needs(brokers=(broker_id,), broker_registrations=(broker_id,))

        async def announce(db: StoreStep) -> bool:
            now = self._clock.now_ms()
            snapshot = await db.load(needs)
            if snapshot.broker_epochs.get(broker_id) != broker_epoch:
                return False
            registration = BrokerRegistration(
                broker_id, broker_epoch, host, port, rack, now + ttl_ms
            )
            previous = snapshot.broker_registrations.get(broker_id)
            # Leases that died with a lapsed registration stay dead (`_rules.ownership`).
            dropped = (
                {broker_id: broker_epoch + 1}
                if renewal_drops_leases(previous, broker_epoch, now)
                else EMPTY
            )
            await db.apply(
                Changes(
                    broker_registrations={broker_id: registration}, broker_leases_dropped=dropped
                )
            )
            return True

        return await self._write(Operation.ANNOUNCE_BROKER, announce, Durability.VOLATILE)

    async def live_brokers(self) -> list[BrokerRegistration]:
        async def live(view: ReadView) -> list[BrokerRegistration]:
            registrations = await view.broker_registrations()
            now = self._clock.now_ms()
            return [r for r in registrations if r.expires_ms > now]

        return await self._read(live)

    # --- the write path -----------------------------------------------------------------------
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

    # --- the read path ------------------------------------------------------------------------
    async def find_batches(
        self, requests: Sequence[FindBatchesRequest], fetch_max_bytes: int
    ) -> list[FindBatchesResponse]:
        return await self._read(
            lambda view: decide(reads.find_batches_plan(requests, fetch_max_bytes), view)
        )

    async def partition_offsets(
        self, partitions: Sequence[TopicPartition]
    ) -> list[PartitionOffsets | None]:
        return await self._read(lambda view: decide(reads.partition_offsets_plan(partitions), view))

    def watch_changes(self, listener: ChangeListener) -> Callable[[], None]:
        if self._closed:
            raise RuntimeError("the coordinator is closed")
        return self._store.watch_changes(listener)

    async def list_offsets(
        self, requests: Sequence[ListOffsetsRequest]
    ) -> list[ListOffsetsResponse]:
        return await self._read(lambda view: decide(reads.list_offsets_plan(requests), view))

    # --- deletion -----------------------------------------------------------------------------
    async def _released_files(
        self, db: StoreStep, released: Counter[str], now_ms: int
    ) -> dict[str, FileRow | None]:
        """The new rows of the files whose batches were deleted (`released`: batches per key)."""
        if not released:
            return {}
        files = (await db.load(Needs(files=set(released)))).files
        return {key: released_file(files[key], count, now_ms) for key, count in released.items()}

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
                decision = reads.decide_delete_records(state, request.offset)
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
            for state in (await db.load(Needs(retained_partitions=True))).retained_partitions:
                scan = reads.RetentionScan(state, now, budget)
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

    # --- object lifecycle ---------------------------------------------------------------------
    async def condemn_objects(self, keys: Sequence[str]) -> list[str]:
        async def condemn(db: StoreStep) -> list[str]:
            now = self._clock.now_ms()
            files = dict((await db.load(Needs(files=set(keys)))).files)
            new: dict[str, FileRow | None] = {}
            for key in keys:
                if key not in files:
                    files[key] = new[key] = condemned_file(now)
            await db.apply(Changes(files=new))
            return [key for key in keys if files[key].state is FileState.CONDEMNED]

        return await self._write(Operation.CONDEMN_OBJECTS, condemn)

    async def files_to_delete(self, older_than_ms: int, limit: int = 1000) -> list[FileInfo]:
        rows = await self._read(lambda view: view.dead_files(older_than_ms, max(0, limit)))
        return [row.info(key) for key, row in rows]

    async def forget_files(self, keys: Sequence[str]) -> None:
        async def forget(db: StoreStep) -> None:
            files = (await db.load(Needs(files=set(keys)))).files
            gone: dict[str, FileRow | None] = {k: None for k, f in files.items() if may_forget(f)}
            await db.apply(Changes(files=gone))

        await self._write(Operation.FORGET_FILES, forget)

    async def file_info(self, keys: Sequence[str]) -> list[FileInfo | None]:
        files = await self._read(lambda view: view.files(keys))
        return [f.info(k) if (f := files.get(k)) is not None else None for k in keys]

    async def file_stats(self) -> FileStats:
        totals = await self._read(lambda view: view.file_totals())

        def of(state: FileState) -> tuple[int, int]:
            return totals.get(state, (0, 0))

        return FileStats(
            live_objects=of(FileState.LIVE)[0],
            live_bytes=of(FileState.LIVE)[1],
            unreferenced_objects=of(FileState.UNREFERENCED)[0],
            unreferenced_bytes=of(FileState.UNREFERENCED)[1],
            condemned_objects=of(FileState.CONDEMNED)[0],
            condemned_bytes=of(FileState.CONDEMNED)[1],
        )

    # --- inspection ---------------------------------------------------------------------------
    async def describe_producers(self, topic_partition: TopicPartition) -> list[ProducerSnapshot]:
        async def describe(view: ReadView) -> list[ProducerSnapshot]:
            state = await view.partition(topic_partition)
            if state is None:
                return []
            entries = await view.producers_of(state.key)
            now = self._clock.now_ms()
            return [producer_snapshot(e) for e in entries if self._live(e, now) is not None]

        return await self._read(describe)


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


def _refs_of(batches: Sequence[StoredBatch]) -> BatchRefs:
    files = Counter(b.object_key for b in batches if b.object_key)
    return BatchRefs(dict(files), sum(b.size for b in batches))
