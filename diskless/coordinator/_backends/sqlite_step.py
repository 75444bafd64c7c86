"""A step's access to the SQLite store: batched loads and the apply, inside `BEGIN IMMEDIATE`."""

from __future__ import annotations

import sqlite3
from collections.abc import Collection
from typing import Any, Final

from diskless._types import GroupOwnership, TopicPartition
from diskless.coordinator._backends import sql_acls, sql_extents
from diskless.coordinator._backends.sql_rows import (
    ENTRY_COLUMNS,
    FILE_COLUMNS,
    FILE_STATE_CODES,
    INSERT_BATCH,
    MARKER_FILE_ID,
    OWNER_COLUMNS,
    PARTITION_COLUMNS,
    PARTITION_FROM,
    REGISTRATION_COLUMNS,
    REGISTRATION_ROW,
    TOPIC_COLUMNS,
    TXN_TABLES,
    UPSERT_PRODUCER,
    batch_to_row,
    configs_object_text,
    configs_text,
    entry_from_row,
    entry_to_row,
    file_from_row,
    first_ongoing,
    in_lists,
    keyed_lookups,
    partition_from_row,
    registration_from_row,
    scram_to_row,
    topic_config_values,
    topic_from_row,
    txn_from_blob,
    txn_to_row,
    update_topic_config,
)
from diskless.coordinator._backends.sqlite_reads import SqliteReads
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

_UPDATE_TOPIC_CONFIG: Final = update_topic_config(["?"] * 12)


class SqliteStep(StoreStep):
    """Loads and applies over the writer's connection; its awaits never suspend."""

    def __init__(self, conn: sqlite3.Connection) -> None:
        self._conn = conn
        self._reads = SqliteReads(conn)

    # --- load ---------------------------------------------------------------------------------
    async def load(self, needs: Needs) -> Snapshot:
        conn = self._conn
        snapshot = LoadingSnapshot()
        wanted = set(needs.partitions)
        for tp, _ in (*needs.producers, *needs.registrations, *needs.other_ongoing):
            wanted.add(tp)
        partitions = self._partitions(wanted) if wanted else {}
        snapshot.partitions = {tp: s for tp, s in partitions.items() if tp in needs.partitions}
        if needs.producers:
            keys = _keys(needs.producers, partitions)
            for sql, params in keyed_lookups(
                f"SELECT p.partition_id, {ENTRY_COLUMNS} FROM k JOIN producers p"
                " ON p.partition_id = k.a AND p.producer_id = k.b",
                keys,
                (-1, -1),
            ):
                for row in conn.execute(sql, params):
                    snapshot.producers[(row[0], row[1])] = entry_from_row(row[1:])
        if needs.registrations:
            keys = _keys(needs.registrations, partitions)
            for sql, params in keyed_lookups(
                f"SELECT r.partition_id, r.producer_id, {REGISTRATION_COLUMNS} FROM k JOIN"
                " txn_registrations r ON r.partition_id = k.a AND r.producer_id = k.b",
                keys,
                (-1, -1),
            ):
                for row in conn.execute(sql, params):
                    snapshot.registrations[(row[0], row[1])] = registration_from_row(row[2:])
        for key in _keys(needs.other_ongoing, partitions):
            (first,) = conn.execute(f"SELECT {first_ongoing('?1', '?2')}", key).fetchone()
            if first is not None:
                snapshot.other_ongoing[key] = first
        for marks, chunk in in_lists(sorted(needs.leases)):
            for row in conn.execute(
                "SELECT lease_id, partition_id, producer_id, producer_epoch, expires_ms,"
                f" broker_id, broker_epoch FROM txn_leases WHERE lease_id IN ({marks})",
                chunk,
            ):
                snapshot.leases[row[0]] = TxnLease(*row)
        for marks, chunk in in_lists(sorted(needs.brokers)):
            for broker_id, epoch in conn.execute(
                f"SELECT broker_id, epoch FROM brokers WHERE broker_id IN ({marks})", chunk
            ):
                snapshot.broker_epochs[broker_id] = epoch
        if needs.all_broker_registrations:
            for row in conn.execute(f"SELECT {REGISTRATION_ROW} FROM broker_registrations"):
                snapshot.broker_registrations[row[0]] = BrokerRegistration(*row)
        for marks, chunk in in_lists(sorted(needs.broker_registrations)):
            for row in conn.execute(
                f"SELECT {REGISTRATION_ROW} FROM broker_registrations WHERE broker_id IN ({marks})",
                chunk,
            ):
                snapshot.broker_registrations[row[0]] = BrokerRegistration(*row)
        for marks, chunk in in_lists(sorted(needs.groups)):
            for group_id, *owner in conn.execute(
                f"SELECT group_id, {OWNER_COLUMNS} FROM group_owners WHERE group_id IN ({marks})",
                chunk,
            ):
                snapshot.groups[group_id] = GroupOwnership(*owner)
        for group_id, tp in sorted(needs.share_partitions):
            row = conn.execute(
                "SELECT state FROM share_states WHERE group_id = ? AND topic = ? AND partition = ?",
                (group_id, tp.topic, tp.partition),
            ).fetchone()
            if row is not None:
                snapshot.share_states[(group_id, tp)] = bytes(row[0])
        for marks, chunk in in_lists(sorted(needs.files)):
            for row in conn.execute(
                f"SELECT {FILE_COLUMNS} FROM files WHERE key IN ({marks})", chunk
            ):
                file_key, file = file_from_row(row)
                snapshot.files[file_key] = file
        for marks, chunk in in_lists(sorted(needs.topics)):
            for row in conn.execute(
                f"SELECT {TOPIC_COLUMNS} FROM topics t WHERE name IN ({marks})", chunk
            ):
                snapshot.topics[row[0]] = topic_from_row(row)
        for marks, chunk in in_lists(sorted(needs.counters)):
            for name, value in conn.execute(
                f"SELECT name, value FROM meta WHERE name IN ({marks})", chunk
            ):
                snapshot.counters[name] = value
        if needs.scram_users:
            snapshot.scram = await self._reads.scram_credentials(list(needs.scram_users))
        for kind, name in needs.resource_configs:
            found = await self._reads.resource_configs(kind, [name])
            if name in found:
                snapshot.resource_configs[(kind, name)] = found[name]
        for marks, chunk in in_lists(sorted(needs.txns)):
            for tid, blob in conn.execute(
                f"SELECT transactional_id, record FROM txn_records"
                f" WHERE transactional_id IN ({marks})",
                chunk,
            ):
                snapshot.txns[tid] = txn_from_blob(blob)
        for partition_id, offset in needs.batch_refs.items():
            files: dict[str, int] = {}
            size = 0
            for key, count, total in conn.execute(
                "SELECT coalesce(f.key, ''), count(*), sum(b.size) FROM batches b"
                " LEFT JOIN files f ON f.file_id = b.file_id"
                " WHERE b.partition_id = ? AND b.base_offset < ? AND b.last_offset < ?"
                " GROUP BY b.file_id",
                (partition_id, offset, offset),
            ):
                if key:
                    files[key] = count
                size += total
            extent_files, extent_size = sql_extents.sqlite_refs(conn, partition_id, offset)
            files.update(extent_files)
            snapshot.batch_refs[partition_id] = BatchRefs(files, size + extent_size)
        for partition_id, (offset, limit) in needs.batches.items():
            snapshot.batches[partition_id] = await self._reads.batches_holding(
                partition_id, offset, limit
            )
        if needs.retained_partitions:
            snapshot.retained_partitions = [
                partition_from_row(row)
                for row in conn.execute(
                    f"SELECT {PARTITION_COLUMNS} FROM {PARTITION_FROM}"
                    " WHERE (t.retention_ms >= 0 OR t.retention_bytes >= 0)"
                    " AND p.high_watermark > p.log_start_offset ORDER BY t.name, p.partition"
                )
            ]
        if needs.acls:
            snapshot.acls = sql_acls.sqlite_acls(conn)
        return snapshot.freeze()

    def _partitions(self, tps: set[TopicPartition]) -> dict[TopicPartition, PartitionState]:
        """The existing partitions among `tps`, in a few queries whatever their number."""
        found: dict[TopicPartition, PartitionState] = {}
        configs: dict[tuple[Any, ...], TopicConfig] = {}
        for sql, params in keyed_lookups(
            f"SELECT {PARTITION_COLUMNS} FROM k JOIN topics t ON t.name = k.a"
            " JOIN partitions p ON p.topic_id = t.topic_id AND p.partition = k.b",
            sorted(tps),
            ("", -1),
        ):
            for row in self._conn.execute(sql, params):
                state = partition_from_row(row, configs)
                found[state.topic_partition] = state
        return found

    # --- apply --------------------------------------------------------------------------------
    async def apply(self, changes: Changes) -> list[int]:
        conn = self._conn
        for name in changes.topics_deleted:
            self._delete_topic(name)
        for name, count, cfg, topic_id in changes.topics_created:
            cursor = conn.execute(
                "INSERT INTO topics (name, partition_count, timestamp_type, retention_ms,"
                " retention_bytes, max_message_bytes, timestamp_before_max_ms,"
                " timestamp_after_max_ms, compression_type, compression_gzip_level,"
                " compression_lz4_level, compression_zstd_level, topic_uuid, inapplicable_configs)"
                " VALUES (?, 0, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                (
                    name,
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
                    topic_id.hex,
                    configs_text(cfg),
                ),
            )
            assert cursor.lastrowid is not None
            self._grow(cursor.lastrowid, 0, count)
        for name, cfg in changes.topic_configs.items():
            conn.execute(_UPDATE_TOPIC_CONFIG, (*topic_config_values(cfg), name))
        for name, total in changes.partitions_added:
            topic_id, current = conn.execute(
                "SELECT topic_id, partition_count FROM topics WHERE name = ?", (name,)
            ).fetchone()
            self._grow(topic_id, current, total)
        if changes.broker_epochs:
            conn.executemany(
                "INSERT OR REPLACE INTO brokers VALUES (?, ?)", changes.broker_epochs.items()
            )
        if changes.broker_registrations:
            conn.executemany(
                "INSERT OR REPLACE INTO broker_registrations VALUES (?, ?, ?, ?, ?, ?)",
                [
                    (r.broker_id, r.broker_epoch, r.host, r.port, r.rack, r.expires_ms)
                    for r in changes.broker_registrations.values()
                ],
            )
        if changes.groups:
            conn.executemany(
                "INSERT OR REPLACE INTO group_owners VALUES (?, ?, ?, ?)",
                [
                    (group_id, o.broker_id, o.broker_epoch, o.generation)
                    for group_id, o in changes.groups.items()
                ],
            )
        if changes.group_states:
            conn.executemany(
                "INSERT OR REPLACE INTO group_states VALUES (?, ?)", changes.group_states.items()
            )
        for group_id in changes.group_states_deleted:
            conn.execute("DELETE FROM group_states WHERE group_id = ?", (group_id,))
        for group_id in changes.share_groups_deleted:
            conn.execute("DELETE FROM share_states WHERE group_id = ?", (group_id,))
        if changes.share_states:
            conn.executemany(
                "INSERT OR REPLACE INTO share_states VALUES (?, ?, ?, ?)",
                [
                    (g, tp.topic, tp.partition, blob)
                    for (g, tp), blob in changes.share_states.items()
                ],
            )
        if changes.counters:
            conn.executemany("INSERT OR REPLACE INTO meta VALUES (?, ?)", changes.counters.items())
        if changes.scram:
            self._apply_scram(changes)
        for (kind, name), configs in changes.resource_configs.items():
            if configs:
                conn.execute(
                    "INSERT OR REPLACE INTO resource_configs VALUES (?, ?, ?)",
                    (kind, name, configs_object_text(configs)),
                )
            else:
                conn.execute(
                    "DELETE FROM resource_configs WHERE resource_type = ? AND resource_name = ?",
                    (kind, name),
                )
        file_ids = self._apply_files(changes)
        for partition_id, offset in changes.trims.items():
            conn.execute(
                "DELETE FROM batches"
                " WHERE partition_id = ? AND base_offset < ? AND last_offset < ?",
                (partition_id, offset, offset),
            )
            conn.execute(
                "DELETE FROM aborted_txns WHERE partition_id = ? AND last_offset < ?",
                (partition_id, offset),
            )
            sql_extents.sqlite_trim(conn, partition_id, offset)
        await sql_extents.swap_in(sql_extents.sqlite_execute(conn), changes.extents)
        if changes.batches:
            conn.executemany(
                INSERT_BATCH,
                [
                    batch_to_row(b, file_ids[b.object_key] if b.object_key else MARKER_FILE_ID)
                    for b in changes.batches
                ],
            )
        if changes.partitions:
            conn.executemany(
                "UPDATE partitions SET high_watermark = ?, log_start_offset = ?, size_bytes = ?,"
                " ts_running_max = ? WHERE partition_id = ?",
                [
                    (s.high_watermark, s.log_start_offset, s.size_bytes, s.ts_running_max, s.key)
                    for s in changes.partitions
                ],
            )
        if changes.producers:
            conn.executemany(
                UPSERT_PRODUCER,
                [entry_to_row(key, e) for (key, _), e in changes.producers.items()],
            )
        if changes.producers_idle_before is not None:
            conn.execute(
                "DELETE FROM producers WHERE txn_first_offset IS NULL AND last_update_ms <= ?",
                (changes.producers_idle_before,),
            )
        self._apply_txn_state(changes)
        sql_acls.sqlite_apply(conn, changes)
        granted = []
        for lease in changes.leases_granted:
            lease_id = conn.execute(
                "INSERT INTO txn_leases (partition_id, producer_id, producer_epoch, expires_ms,"
                " broker_id, broker_epoch) VALUES (?, ?, ?, ?, ?, ?)",
                (
                    lease.partition_key,
                    lease.producer_id,
                    lease.producer_epoch,
                    lease.expires_ms,
                    lease.broker_id,
                    lease.broker_epoch,
                ),
            ).lastrowid
            assert lease_id is not None
            granted.append(lease_id)
        if changes.ongoing_opened:
            conn.executemany("INSERT INTO ongoing_txns VALUES (?, ?, ?)", changes.ongoing_opened)
        if changes.ongoing_closed:
            conn.executemany(
                "DELETE FROM ongoing_txns WHERE partition_id = ? AND first_offset = ?",
                changes.ongoing_closed,
            )
        if changes.aborted:
            conn.executemany(
                "INSERT INTO aborted_txns VALUES (?, ?, ?, ?, ?)",
                [
                    (key, a.last_offset, a.producer_id, a.first_offset, a.last_stable_offset)
                    for key, a in changes.aborted
                ],
            )
        return granted

    def _apply_scram(self, changes: Changes) -> None:
        deleted = [key for key, credential in changes.scram.items() if credential is None]
        self._conn.executemany(
            "DELETE FROM scram_credentials WHERE user_name = ? AND mechanism = ?",
            [(user, int(mechanism)) for user, mechanism in deleted],
        )
        self._conn.executemany(
            "INSERT OR REPLACE INTO scram_credentials VALUES (?, ?, ?, ?, ?, ?)",
            [scram_to_row(k, c) for k, c in changes.scram.items() if c is not None],
        )

    def _apply_files(self, changes: Changes) -> dict[str, int]:
        """Store the file changes; returns the ids of the files the new batches refer to."""
        conn = self._conn
        file_ids: dict[str, int] = {}
        for key, file in changes.files.items():
            if file is None:
                conn.execute("DELETE FROM files WHERE key = ?", (key,))
                continue
            (file_ids[key],) = conn.execute(
                "INSERT INTO files (key, state, size, since_ms, live_batches)"
                " VALUES (?, ?, ?, ?, ?) ON CONFLICT (key) DO UPDATE SET state = excluded.state,"
                " size = excluded.size, since_ms = excluded.since_ms,"
                " live_batches = excluded.live_batches RETURNING file_id",
                (key, FILE_STATE_CODES[file.state], file.size, file.since_ms, file.live_batches),
            ).fetchone()
        for batch in changes.batches:
            key = batch.object_key
            if key and key not in file_ids:
                (file_ids[key],) = conn.execute(
                    "SELECT file_id FROM files WHERE key = ?", (key,)
                ).fetchone()
        return file_ids

    def _apply_txn_state(self, changes: Changes) -> None:
        conn = self._conn
        if changes.group_offsets:
            conn.executemany(
                "INSERT OR REPLACE INTO group_offsets VALUES (?, ?, ?, ?, ?, ?)",
                [
                    (group_id, tp.topic, tp.partition, *committed)
                    for (group_id, tp), committed in changes.group_offsets.items()
                ],
            )
        if deleted := changes.group_offsets_deleted:
            conn.executemany(
                "DELETE FROM group_offsets WHERE group_id = ? AND topic = ? AND partition = ?",
                [(group_id, tp.topic, tp.partition) for group_id, tp in deleted],
            )
        for group_id in changes.group_offsets_cleared:
            conn.execute("DELETE FROM group_offsets WHERE group_id = ?", (group_id,))
        if changes.txns:
            conn.executemany(
                "INSERT OR REPLACE INTO txn_records VALUES (?, ?, ?)",
                [txn_to_row(record) for record in changes.txns.values()],
            )
        if changes.registrations:
            conn.executemany(
                "INSERT OR REPLACE INTO txn_registrations VALUES (?, ?, ?, ?, ?, ?)",
                [
                    (key, pid, r.producer_epoch, int(r.ending), r.client_epoch, r.sequence_base)
                    for (key, pid), r in changes.registrations.items()
                ],
            )
        if changes.registrations_dropped:
            conn.executemany(
                "DELETE FROM txn_registrations WHERE partition_id = ? AND producer_id = ?"
                " AND producer_epoch <= ?",
                [(key, pid, epoch) for (key, pid), epoch in changes.registrations_dropped],
            )
        if changes.leases_released:
            conn.executemany(
                "DELETE FROM txn_leases WHERE lease_id = ?",
                [(lease_id,) for lease_id in changes.leases_released],
            )
        if changes.broker_leases_dropped:
            conn.executemany(
                "DELETE FROM txn_leases WHERE broker_id = ? AND broker_epoch < ?",
                changes.broker_leases_dropped.items(),
            )
        for (key, pid), epoch in changes.leases_dropped:
            if epoch is None:
                conn.execute(
                    "DELETE FROM txn_leases WHERE partition_id = ? AND producer_id = ?", (key, pid)
                )
            else:
                conn.execute(
                    "DELETE FROM txn_leases WHERE partition_id = ? AND producer_id = ?"
                    " AND producer_epoch <= ?",
                    (key, pid, epoch),
                )

    def _grow(self, topic_id: int, current: int, total: int) -> None:
        # Ids are never reused (as rowids of deleted rows would be): a partition deleted and
        # re-created is another partition (an extent swap of the old one must fail on it).
        (used,) = self._conn.execute(
            "SELECT max(coalesce((SELECT max(partition_id) FROM partitions), 0),"
            " coalesce((SELECT value FROM meta WHERE name = 'partition_ids_used'), 0))"
        ).fetchone()
        count = total - current
        self._conn.executemany(
            "INSERT INTO partitions (partition_id, topic_id, partition) VALUES (?, ?, ?)",
            [(used + 1 + i, topic_id, current + i) for i in range(count)],
        )
        self._conn.execute(
            "INSERT OR REPLACE INTO meta VALUES ('partition_ids_used', ?)", (used + count,)
        )
        self._conn.execute(
            "UPDATE topics SET partition_count = ? WHERE topic_id = ?", (total, topic_id)
        )

    def _delete_topic(self, name: str) -> None:
        conn = self._conn
        (topic_id,) = conn.execute("SELECT topic_id FROM topics WHERE name = ?", (name,)).fetchone()
        partition_ids = [
            (r[0],)
            for r in conn.execute(
                "SELECT partition_id FROM partitions WHERE topic_id = ?", (topic_id,)
            )
        ]
        for table in ("batches", "extents", "producers", *TXN_TABLES):
            conn.executemany(f"DELETE FROM {table} WHERE partition_id = ?", partition_ids)
        conn.execute("DELETE FROM group_offsets WHERE topic = ?", (name,))
        conn.execute("DELETE FROM share_states WHERE topic = ?", (name,))
        conn.execute("DELETE FROM partitions WHERE topic_id = ?", (topic_id,))
        conn.execute("DELETE FROM topics WHERE topic_id = ?", (topic_id,))


def _keys(
    wanted: Collection[tuple[TopicPartition, int]], partitions: dict[TopicPartition, PartitionState]
) -> list[tuple[int, int]]:
    """(partition key, producer id) of the wanted pairs whose partition exists, sorted."""
    return sorted(
        (state.key, pid) for tp, pid in wanted if (state := partitions.get(tp)) is not None
    )
