"""A step's access to the PostgreSQL store: locked, batched loads and the apply.

Isolation is READ COMMITTED with explicit row locks, the way the SQLite store gets it from
`BEGIN IMMEDIATE`: whatever a step loads in order to change it stays as loaded until it commits.
- `load` takes `SELECT ... FOR UPDATE` on every row it returns that a step may change
  (transaction records, topics, partitions, leases, brokers, files, counters), each kind sorted
  by key and the kinds always in that order, so two steps touching overlapping rows queue
  behind each other instead of deadlocking.
- Rows keyed by a partition (batches, producers, registrations, the ongoing and aborted
  indexes) change only under that partition's lock; they are read in statements after the
  locks are taken, so each sees everything committed before it got them.
- A row that does not exist cannot be locked: two steps may both find a key absent and both
  insert it. The second then fails on the unique key (23505), and the store re-runs the step,
  which now finds the row. Steps that load in several calls may, rarely, lock in an order
  another step reverses: PostgreSQL detects that deadlock (40P01) and the store re-runs the
  step the same way.
- Wide steps first pass one gate, an advisory lock taken before any row lock (by
  `diskless_gated_load`, in the same round trip as the load). When two steps each lock w of a
  cluster's P partitions with w^2 >= 3 P, they share a partition with a probability of 95% or
  more, so they would queue on the partition locks anyway. What the gate changes is the
  order. Waiting on row locks, a step holds the locks it already has while it waits for the
  next one, and queues form behind queues that starve some steps: with four brokers
  committing objects of 100 of 1,000 partitions, p99 was 35 ms, against 19 ms through the
  gate, at the same rate. The gate serves in arrival order. It is taken only as a
  transaction's first lock, so a step waiting for it holds nothing another step could wait
  on: no deadlock.
"""

from __future__ import annotations

from collections.abc import Collection
from typing import Any, Final

import asyncpg

from diskless._types import GroupOwnership, TopicPartition
from diskless.coordinator._backends import sql_acls, sql_extents
from diskless.coordinator._backends.postgres_rows import (
    GATE_LOCK_KEY,
    GATE_OVERLAP,
    GATE_WIDTH_MIN,
    LOADED_BROKER,
    LOADED_FILE,
    LOADED_LEASE,
    LOADED_PARTITION,
    LOADED_PRODUCER,
    LOADED_REGISTRATION,
    PARTITION_COLUMNS_NO_LSO,
    TXN_TABLES,
    batch_columns,
    columns,
    entry_columns,
    int_array,
    text_array,
    two_columns,
)
from diskless.coordinator._backends.postgres_step_state import (
    apply_group_states,
    apply_indexes,
    apply_scram,
    apply_txn_state,
    load_share_states,
)
from diskless.coordinator._backends.sql_rows import (
    FILE_STATE_CODES,
    FILE_STATES,
    MARKER_FILE_ID,
    OWNER_COLUMNS,
    PARTITION_FROM,
    REGISTRATION_ROW,
    SCRAM_COLUMNS,
    TOPIC_COLUMNS,
    configs_from_text,
    configs_object_text,
    configs_text,
    entry_from_row,
    first_ongoing,
    partition_from_row,
    registration_from_row,
    scram_from_row,
    topic_config_values,
    topic_from_row,
    txn_from_blob,
    update_topic_config,
)
from diskless.coordinator._rules.files import FileRow
from diskless.coordinator._rules.rows import PartitionState, TxnLease
from diskless.coordinator._store import (
    BatchRefs,
    Changes,
    LoadingSnapshot,
    Needs,
    Snapshot,
    StoreStep,
)
from diskless.coordinator._values import BrokerRegistration, TopicConfig

_LOAD_ARGUMENT_TYPES: Final = (
    "text[]",
    "int[]",
    "int[]",
    "bigint[]",
    "int[]",
    "bigint[]",
    "bigint[]",
    "bigint[]",
    "text[]",
)
"""`diskless_load`'s parameters, each sent as text (see `int_array`)."""


def _load_call(function: str, leading: int) -> str:
    """The call of a load function with `leading` plain parameters before the load's own."""
    parameters = [f"${n}" for n in range(1, leading + 1)]
    parameters += [
        f"${leading + n}::text::{kind}" for n, kind in enumerate(_LOAD_ARGUMENT_TYPES, 1)
    ]
    return f"SELECT * FROM {function}({', '.join(parameters)})"


LOAD_CALL: Final = _load_call("diskless_load", 0)
GATED_LOAD_CALL: Final = _load_call("diskless_gated_load", 2)
_UPDATE_TOPIC_CONFIG: Final = update_topic_config([f"${n}" for n in range(1, 13)])


class PostgresStep(StoreStep):
    """Loads and applies over one connection inside one transaction (see the module doc)."""

    def __init__(self, conn: asyncpg.Connection) -> None:
        self._conn = conn
        # Keys found by a load (hence locked): changed by UPDATE; others are INSERTed, so that
        # a concurrent insert of the same key fails instead of being overwritten.
        self._files_seen: set[str] = set()
        self._brokers_seen: set[int] = set()
        self._counters_seen: set[str] = set()
        self._txns_seen: set[str] = set()
        self._groups_seen: set[str] = set()
        self._shares_seen: set[tuple[str, TopicPartition]] = set()
        self.xid: int | None = None
        """The transaction's id, when an apply has already asked for it."""
        self._gate_considered = False
        """Set once anything may have taken a lock: from then on the gate is not taken."""

    # --- load ---------------------------------------------------------------------------------
    async def load(self, needs: Needs) -> Snapshot:
        conn = self._conn
        loaded = LoadingSnapshot()
        wanted = set(needs.partitions)
        for tp, _ in (*needs.producers, *needs.registrations, *needs.other_ongoing):
            wanted.add(tp)
        # The gate only as the transaction's first lock: the first load, before its own locks.
        gated = not (self._gate_considered or needs.txns or needs.topics)
        gated = gated and len(wanted) >= GATE_WIDTH_MIN
        self._gate_considered = True
        if needs.txns:
            for tid, blob in await conn.fetch(
                "SELECT transactional_id, record FROM txn_records"
                " WHERE transactional_id = ANY($1::text[]) ORDER BY transactional_id FOR UPDATE",
                sorted(needs.txns),
            ):
                loaded.txns[tid] = txn_from_blob(blob)
                self._txns_seen.add(tid)
        if needs.topics:
            for row in await conn.fetch(
                f"SELECT {TOPIC_COLUMNS} FROM topics t WHERE name = ANY($1::text[])"
                " ORDER BY name FOR UPDATE",
                sorted(needs.topics),
            ):
                loaded.topics[row[0]] = topic_from_row(row)
        partitions: dict[TopicPartition, PartitionState] = {}
        if wanted or needs.leases or needs.brokers or needs.files:
            partitions = await self._load_locked(needs, sorted(wanted), loaded, gated)
        loaded.partitions = {tp: s for tp, s in partitions.items() if tp in needs.partitions}
        if needs.all_broker_registrations:
            for row in await conn.fetch(
                f"SELECT {REGISTRATION_ROW} FROM broker_registrations ORDER BY broker_id"
            ):
                loaded.broker_registrations[row[0]] = BrokerRegistration(*row)
        elif needs.broker_registrations:
            for row in await conn.fetch(
                f"SELECT {REGISTRATION_ROW} FROM broker_registrations"
                " WHERE broker_id = ANY($1::int[]) ORDER BY broker_id",
                sorted(needs.broker_registrations),
            ):
                loaded.broker_registrations[row[0]] = BrokerRegistration(*row)
        if needs.groups:
            for group_id, *owner in await conn.fetch(
                f"SELECT group_id, {OWNER_COLUMNS} FROM group_owners"
                " WHERE group_id = ANY($1::text[]) ORDER BY group_id FOR UPDATE",
                sorted(needs.groups),
            ):
                loaded.groups[group_id] = GroupOwnership(*owner)
                self._groups_seen.add(group_id)
        if needs.scram_users:
            for row in await conn.fetch(
                f"SELECT {SCRAM_COLUMNS} FROM scram_credentials"
                " WHERE user_name = ANY($1::text[]) ORDER BY user_name, mechanism FOR UPDATE",
                sorted(needs.scram_users),
            ):
                key, credential = scram_from_row(row)
                loaded.scram[key] = credential
        for kind, name in sorted(needs.resource_configs):
            row = await conn.fetchrow(
                "SELECT configs FROM resource_configs WHERE resource_type = $1"
                " AND resource_name = $2 FOR UPDATE",
                kind,
                name,
            )
            if row is not None:
                loaded.resource_configs[(kind, name)] = dict(configs_from_text(row[0]))
        if needs.counters:
            for name, value in await conn.fetch(
                "SELECT name, value FROM meta WHERE name = ANY($1::text[]) ORDER BY name"
                " FOR UPDATE",
                sorted(needs.counters),
            ):
                loaded.counters[name] = value
                self._counters_seen.add(name)
        if needs.share_partitions:
            await load_share_states(conn, needs, loaded, self._shares_seen)
        if needs.acls:
            # After the counter's lock (every change of ACLs loads both): see the module doc.
            loaded.acls = await sql_acls.postgres_acls(conn)
        await self._load_partition_rows(needs, partitions, loaded)
        return loaded.freeze()

    async def _load_locked(
        self, needs: Needs, ordered: list[TopicPartition], loaded: LoadingSnapshot, gated: bool
    ) -> dict[TopicPartition, PartitionState]:
        """Lock and read partitions, leases, brokers and files, and read the producer entries
        and registrations of the locked partitions, in one call (`diskless_load`, behind the
        gate if `gated` and the step is wide); returns every locked partition."""
        slot_of = {tp: slot for slot, tp in enumerate(ordered, 1)}
        producers = sorted((slot_of[tp], pid) for tp, pid in needs.producers)
        registrations = sorted((slot_of[tp], pid) for tp, pid in needs.registrations)
        producer_slots, producer_ids = two_columns(producers)
        registration_slots, registration_ids = two_columns(registrations)
        arguments = (
            text_array([tp.topic for tp in ordered]),
            int_array([tp.partition for tp in ordered]),
            int_array(producer_slots),
            int_array(producer_ids),
            int_array(registration_slots),
            int_array(registration_ids),
            int_array(sorted(needs.leases)),
            int_array(sorted(needs.brokers)),
            text_array(sorted(needs.files)),
        )
        if gated:
            rows = await self._conn.fetch(GATED_LOAD_CALL, GATE_LOCK_KEY, GATE_OVERLAP, *arguments)
        else:
            rows = await self._conn.fetch(LOAD_CALL, *arguments)
        return self._read_loaded(rows, loaded)

    def _read_loaded(
        self, rows: list[asyncpg.Record], loaded: LoadingSnapshot
    ) -> dict[TopicPartition, PartitionState]:
        """Fill `loaded` from the rows of a load function; returns the partitions it found."""
        partitions = {}
        configs: dict[tuple[Any, ...], TopicConfig] = {}
        for row in rows:
            kind = row[0]
            if kind == LOADED_PARTITION:
                state = partition_from_row(row[1:15], configs)
                partitions[state.topic_partition] = state
            elif kind == LOADED_PRODUCER:
                loaded.producers[(row[1], row[3])] = entry_from_row(
                    (row[3], row[4], row[5], row[6], row[7], row[8], row[15])
                )
            elif kind == LOADED_REGISTRATION:
                loaded.registrations[(row[1], row[3])] = registration_from_row(row[4:8])
            elif kind == LOADED_LEASE:
                loaded.leases[row[1]] = TxnLease(row[1], row[3], row[4], row[5], row[6])
            elif kind == LOADED_BROKER:
                loaded.broker_epochs[row[1]] = row[3]
                self._brokers_seen.add(row[1])
            elif kind == LOADED_FILE:
                key = row[2]
                loaded.files[key] = FileRow(FILE_STATES[row[3]], row[4], row[5], row[6])
                self._files_seen.add(key)
        return partitions

    async def _with_lso(self, rows: list[asyncpg.Record]) -> dict[TopicPartition, PartitionState]:
        if not rows:
            return {}
        firsts = dict(
            await self._conn.fetch(
                f"SELECT k.id, {first_ongoing('k.id')} FROM unnest($1::bigint[]) k(id)",
                [row[0] for row in rows],
            )
        )
        configs: dict[tuple[Any, ...], TopicConfig] = {}
        found = {}
        for row in rows:
            values = list(row)
            values[11] = firsts.get(row[0])
            state = partition_from_row(values, configs)
            found[state.topic_partition] = state
        return found

    async def _load_partition_rows(
        self,
        needs: Needs,
        partitions: dict[TopicPartition, PartitionState],
        loaded: LoadingSnapshot,
    ) -> None:
        """The rows keyed by partitions this step has locked."""
        conn = self._conn
        if needs.other_ongoing:
            keys = _keys(needs.other_ongoing, partitions)
            for partition_id, producer_id, first in await conn.fetch(
                f"SELECT k.a, k.b, {first_ongoing('k.a', 'k.b')}"
                " FROM unnest($1::bigint[], $2::bigint[]) k(a, b)",
                *two_columns(keys),
            ):
                if first is not None:
                    loaded.other_ongoing[(partition_id, producer_id)] = first
        if needs.batch_refs:
            refs = sorted(needs.batch_refs.items())
            sizes: dict[int, int] = {}
            files: dict[int, dict[str, int]] = {}
            for partition_id, key, count, total in await conn.fetch(
                "SELECT b.partition_id, coalesce(f.key, ''), count(*), sum(b.size)"
                " FROM unnest($1::bigint[], $2::bigint[]) k(id, off) JOIN batches b"
                " ON b.partition_id = k.id AND b.base_offset < k.off AND b.last_offset < k.off"
                " LEFT JOIN files f ON f.file_id = b.file_id GROUP BY b.partition_id, f.key",
                *two_columns(refs),
            ):
                if key:
                    files.setdefault(partition_id, {})[key] = count
                sizes[partition_id] = sizes.get(partition_id, 0) + total
            for partition_id, (extent_files, size) in (
                await sql_extents.postgres_refs(conn, refs)
            ).items():
                files.setdefault(partition_id, {}).update(extent_files)
                sizes[partition_id] = sizes.get(partition_id, 0) + size
            for partition_id, _ in refs:
                loaded.batch_refs[partition_id] = BatchRefs(
                    files.get(partition_id, {}), sizes.get(partition_id, 0)
                )
        for partition_id, (offset, limit) in needs.batches.items():
            loaded.batches[partition_id] = await sql_extents.rows_holding(
                conn.fetch, partition_id, offset, limit
            )
        if needs.retained_partitions:
            rows = await conn.fetch(
                f"SELECT {PARTITION_COLUMNS_NO_LSO} FROM {PARTITION_FROM}"
                " WHERE (t.retention_ms >= 0 OR t.retention_bytes >= 0)"
                " AND p.high_watermark > p.log_start_offset"
                " ORDER BY p.partition_id FOR UPDATE OF p"
            )
            retained = await self._with_lso(rows)
            loaded.retained_partitions = sorted(retained.values(), key=lambda s: s.topic_partition)

    # --- apply --------------------------------------------------------------------------------
    async def apply(self, changes: Changes) -> list[int]:
        self._gate_considered = True
        conn = self._conn
        for name in changes.topics_deleted:
            await self._delete_topic(name)
        for name, count, cfg, topic_uuid in changes.topics_created:
            topic_id = await conn.fetchval(
                "INSERT INTO topics (name, partition_count, timestamp_type, retention_ms,"
                " retention_bytes, max_message_bytes, timestamp_before_max_ms,"
                " timestamp_after_max_ms, compression_type, compression_gzip_level,"
                " compression_lz4_level, compression_zstd_level, topic_uuid, inapplicable_configs)"
                " VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14)"
                " RETURNING topic_id",
                name,
                count,
                int(cfg.timestamp_type),
                cfg.retention_ms,
                cfg.retention_bytes,
                cfg.max_message_bytes,
                cfg.message_timestamp_before_max_ms,
                cfg.message_timestamp_after_max_ms,
                int(cfg.compression_type),
                cfg.compression_gzip_level,
                cfg.compression_lz4_level,
                cfg.compression_zstd_level,
                topic_uuid,
                configs_text(cfg),
            )
            await self._grow(topic_id, 0, count)
        for name, cfg in changes.topic_configs.items():
            await conn.execute(_UPDATE_TOPIC_CONFIG, *topic_config_values(cfg), name)
        for name, total in changes.partitions_added:
            topic_id, current = await conn.fetchrow(
                "UPDATE topics t SET partition_count = $2 FROM topics old"
                " WHERE t.topic_id = old.topic_id AND t.name = $1"
                " RETURNING t.topic_id, old.partition_count",
                name,
                total,
            )
            await self._grow(topic_id, current, total)
        await self._put(
            "brokers", "broker_id", "epoch", "bigint", changes.broker_epochs, self._brokers_seen
        )
        await self._put("meta", "name", "value", "text", changes.counters, self._counters_seen)
        file_ids = await self._apply_files(changes)
        if changes.trims:
            trims = two_columns(sorted(changes.trims.items()))
            await conn.execute(
                "DELETE FROM batches b USING unnest($1::bigint[], $2::bigint[]) k(id, off)"
                " WHERE b.partition_id = k.id AND b.base_offset < k.off AND b.last_offset < k.off",
                *trims,
            )
            await conn.execute(
                "DELETE FROM aborted_txns a USING unnest($1::bigint[], $2::bigint[]) k(id, off)"
                " WHERE a.partition_id = k.id AND a.last_offset < k.off",
                *trims,
            )
            await sql_extents.postgres_trim(conn, sorted(changes.trims.items()))
        if changes.extents:
            await sql_extents.swap_in(conn.execute, changes.extents)
        if changes.batches:
            ids = [
                file_ids[b.object_key] if b.object_key else MARKER_FILE_ID for b in changes.batches
            ]
            await conn.execute(
                "INSERT INTO batches SELECT * FROM unnest($1::bigint[], $2::bigint[],"
                " $3::bigint[], $4::bigint[], $5::bigint[], $6::bigint[], $7::bigint[],"
                " $8::bigint[], $9::bigint[], $10::bigint[], $11::bigint[], $12::int[],"
                " $13::int[], $14::int[])",
                *batch_columns(changes.batches, ids),
            )
        if changes.partitions:
            await conn.execute(
                "UPDATE partitions p SET high_watermark = k.hw, log_start_offset = k.ls,"
                " size_bytes = k.size, ts_running_max = k.ts FROM unnest($1::bigint[],"
                " $2::bigint[], $3::bigint[], $4::bigint[], $5::bigint[]) k(id, hw, ls, size, ts)"
                " WHERE p.partition_id = k.id",
                *columns(
                    [
                        (
                            s.key,
                            s.high_watermark,
                            s.log_start_offset,
                            s.size_bytes,
                            s.ts_running_max,
                        )
                        for s in changes.partitions
                    ],
                    5,
                ),
            )
        if changes.producers:
            await conn.execute(
                "INSERT INTO producers SELECT * FROM unnest($1::bigint[], $2::bigint[],"
                " $3::int[], $4::bigint[], $5::bigint[], $6::int[], $7::bigint[], $8::bytea[])"
                " ON CONFLICT (partition_id, producer_id) DO UPDATE SET"
                " producer_epoch = excluded.producer_epoch,"
                " last_timestamp = excluded.last_timestamp,"
                " last_update_ms = excluded.last_update_ms,"
                " coordinator_epoch = excluded.coordinator_epoch,"
                " txn_first_offset = excluded.txn_first_offset, batches = excluded.batches",
                *entry_columns(changes.producers),
            )
        if changes.producers_idle_before is not None:
            await conn.execute(
                "DELETE FROM producers WHERE txn_first_offset IS NULL AND last_update_ms <= $1",
                changes.producers_idle_before,
            )
        await apply_txn_state(conn, changes, self._txns_seen, self._groups_seen)
        if changes.scram:
            await apply_scram(conn, changes)
        await apply_group_states(conn, changes, self._shares_seen)
        for (kind, name), configs in sorted(changes.resource_configs.items()):
            if configs:
                await conn.execute(
                    "INSERT INTO resource_configs VALUES ($1, $2, $3)"
                    " ON CONFLICT (resource_type, resource_name)"
                    " DO UPDATE SET configs = excluded.configs",
                    kind,
                    name,
                    configs_object_text(configs),
                )
            else:
                await conn.execute(
                    "DELETE FROM resource_configs WHERE resource_type = $1 AND resource_name = $2",
                    kind,
                    name,
                )
        await sql_acls.postgres_apply(conn, changes)
        return await apply_indexes(conn, changes)

    async def _put(
        self,
        table: str,
        key: str,
        value: str,
        key_type: str,
        rows: Any,
        seen: set[Any],
    ) -> None:
        """Store `rows` (key -> value): UPDATE the loaded (locked) keys, INSERT the others."""
        if not rows:
            return
        conn = self._conn
        updates = sorted((k, v) for k, v in rows.items() if k in seen)
        inserts = sorted((k, v) for k, v in rows.items() if k not in seen)
        if updates:
            await conn.execute(
                f"UPDATE {table} t SET {value} = k.v FROM unnest($1::{key_type}[],"
                f" $2::bigint[]) k(k, v) WHERE t.{key} = k.k",
                *two_columns(updates),
            )
        if inserts:
            await conn.execute(
                f"INSERT INTO {table} SELECT * FROM unnest($1::{key_type}[], $2::bigint[])",
                *two_columns(inserts),
            )
            seen.update(k for k, _ in inserts)

    async def _apply_files(self, changes: Changes) -> dict[str, int]:
        """Store the file changes; returns the ids of the files the new batches refer to."""
        conn = self._conn
        file_ids: dict[str, int] = {}
        gone = sorted(key for key, file in changes.files.items() if file is None)
        if gone:
            await conn.execute("DELETE FROM files WHERE key = ANY($1::text[])", gone)
            self._files_seen.difference_update(gone)
        rows = sorted(
            (key, FILE_STATE_CODES[f.state], f.size, f.since_ms, f.live_batches)
            for key, f in changes.files.items()
            if f is not None
        )
        updates = [row for row in rows if row[0] in self._files_seen]
        inserts = [row for row in rows if row[0] not in self._files_seen]
        if updates:
            file_ids.update(
                await conn.fetch(
                    "UPDATE files f SET state = k.state, size = k.size, since_ms = k.since,"
                    " live_batches = k.live FROM unnest($1::text[], $2::smallint[],"
                    " $3::bigint[], $4::bigint[], $5::bigint[]) k(key, state, size, since, live)"
                    " WHERE f.key = k.key RETURNING f.key, f.file_id",
                    *columns(updates, 5),
                )
            )
        if inserts:
            file_ids.update(
                await conn.fetch(
                    "INSERT INTO files (key, state, size, since_ms, live_batches)"
                    " SELECT * FROM unnest($1::text[], $2::smallint[], $3::bigint[],"
                    " $4::bigint[], $5::bigint[]) RETURNING key, file_id",
                    *columns(inserts, 5),
                )
            )
            self._files_seen.update(row[0] for row in inserts)
        missing = sorted({b.object_key for b in changes.batches if b.object_key} - set(file_ids))
        if missing:
            file_ids.update(
                await conn.fetch(
                    "SELECT key, file_id FROM files WHERE key = ANY($1::text[])", missing
                )
            )
        return file_ids

    async def _grow(self, topic_id: int, current: int, total: int) -> None:
        await self._conn.execute(
            "INSERT INTO partitions (topic_id, partition) SELECT $1, generate_series($2, $3 - 1)",
            topic_id,
            current,
            total,
        )

    async def _delete_topic(self, name: str) -> None:
        conn = self._conn
        topic_id = await conn.fetchval("SELECT topic_id FROM topics WHERE name = $1", name)
        partition_ids = [
            r[0]
            for r in await conn.fetch(
                "SELECT partition_id FROM partitions WHERE topic_id = $1", topic_id
            )
        ]
        for table in ("batches", "extents", "producers", *TXN_TABLES):
            await conn.execute(
                f"DELETE FROM {table} WHERE partition_id = ANY($1::bigint[])", partition_ids
            )
        await conn.execute("DELETE FROM group_offsets WHERE topic = $1", name)
        await conn.execute("DELETE FROM share_states WHERE topic = $1", name)
        await conn.execute("DELETE FROM partitions WHERE topic_id = $1", topic_id)
        await conn.execute("DELETE FROM topics WHERE topic_id = $1", topic_id)


def _keys(
    wanted: Collection[tuple[TopicPartition, int]], partitions: dict[TopicPartition, PartitionState]
) -> list[tuple[int, int]]:
    """(partition key, producer id) of the wanted pairs whose partition exists, sorted."""
    return sorted(
        (state.key, pid) for tp, pid in wanted if (state := partitions.get(tp)) is not None
    )
