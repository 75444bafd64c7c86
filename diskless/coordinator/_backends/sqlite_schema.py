"""The SQLite coordinator's schema, as numbered migrations applied in order.

`PRAGMA user_version` holds how many migrations a database file has seen. Migrations only ever
get appended: a released one is never edited, so any older file can be brought up to date.
"""

from __future__ import annotations

import sqlite3

MIGRATIONS: list[list[str]] = [
    # 1: topics, partitions, files, batches, producer state, broker epochs.
    [
        """CREATE TABLE topics (
            topic_id INTEGER PRIMARY KEY,
            name TEXT NOT NULL UNIQUE,
            partition_count INTEGER NOT NULL,
            timestamp_type INTEGER NOT NULL,
            retention_ms INTEGER NOT NULL,
            retention_bytes INTEGER NOT NULL,
            max_message_bytes INTEGER NOT NULL
        )""",
        """CREATE TABLE partitions (
            partition_id INTEGER PRIMARY KEY,
            topic_id INTEGER NOT NULL,
            partition INTEGER NOT NULL,
            high_watermark INTEGER NOT NULL DEFAULT 0,
            log_start_offset INTEGER NOT NULL DEFAULT 0,
            size_bytes INTEGER NOT NULL DEFAULT 0,
            ts_running_max INTEGER NOT NULL DEFAULT -1,
            UNIQUE (topic_id, partition)
        )""",
        # state: 0 live, 1 unreferenced, 2 condemned.
        """CREATE TABLE files (
            file_id INTEGER PRIMARY KEY,
            key TEXT NOT NULL UNIQUE,
            state INTEGER NOT NULL,
            size INTEGER NOT NULL,
            since_ms INTEGER NOT NULL,
            live_batches INTEGER NOT NULL
        )""",
        "CREATE INDEX files_dead ON files (since_ms, key) WHERE state <> 0",
        """CREATE TABLE batches (
            partition_id INTEGER NOT NULL,
            base_offset INTEGER NOT NULL,
            last_offset INTEGER NOT NULL,
            file_id INTEGER NOT NULL,
            byte_offset INTEGER NOT NULL,
            size INTEGER NOT NULL,
            max_timestamp INTEGER NOT NULL,
            log_append_time INTEGER NOT NULL,
            timestamp INTEGER NOT NULL,
            ts_running_max INTEGER NOT NULL,
            producer_id INTEGER NOT NULL,
            producer_epoch INTEGER NOT NULL,
            PRIMARY KEY (partition_id, base_offset)
        ) WITHOUT ROWID""",
        # MAX_TIMESTAMP: the first batch among those with the largest timestamp.
        "CREATE INDEX batches_by_timestamp ON batches (partition_id, timestamp DESC, base_offset)",
        # By timestamp: the running max grows with the offset, so the first entry >= ts answers.
        "CREATE INDEX batches_by_running_max"
        " ON batches (partition_id, ts_running_max, base_offset)",
        """CREATE TABLE producers (
            partition_id INTEGER NOT NULL,
            producer_id INTEGER NOT NULL,
            producer_epoch INTEGER NOT NULL,
            last_timestamp INTEGER NOT NULL,
            last_update_ms INTEGER NOT NULL,
            coordinator_epoch INTEGER NOT NULL,
            txn_first_offset INTEGER,
            batches BLOB NOT NULL,
            PRIMARY KEY (partition_id, producer_id)
        ) WITHOUT ROWID""",
        "CREATE INDEX producers_idle ON producers (last_update_ms) WHERE txn_first_offset IS NULL",
        "CREATE TABLE brokers (broker_id INTEGER PRIMARY KEY, epoch INTEGER NOT NULL)",
    ],
    # 2: transactions: markers as batch rows (file_id 0: no file), producer ids, KIP-890
    # registrations, leases (the commit barrier), the ongoing (LSO) and aborted indexes.
    [
        "ALTER TABLE batches ADD COLUMN control INTEGER NOT NULL DEFAULT -1",
        "ALTER TABLE batches ADD COLUMN coordinator_epoch INTEGER NOT NULL DEFAULT 0",
        "CREATE TABLE meta (name TEXT PRIMARY KEY, value INTEGER NOT NULL) WITHOUT ROWID",
        """CREATE TABLE txn_registrations (
            partition_id INTEGER NOT NULL,
            producer_id INTEGER NOT NULL,
            producer_epoch INTEGER NOT NULL,
            ending INTEGER NOT NULL,
            PRIMARY KEY (partition_id, producer_id)
        ) WITHOUT ROWID""",
        """CREATE TABLE txn_leases (
            lease_id INTEGER PRIMARY KEY AUTOINCREMENT,
            partition_id INTEGER NOT NULL,
            producer_id INTEGER NOT NULL,
            producer_epoch INTEGER NOT NULL,
            expires_ms INTEGER NOT NULL
        )""",
        "CREATE INDEX txn_leases_by_producer ON txn_leases (partition_id, producer_id)",
        """CREATE TABLE ongoing_txns (
            partition_id INTEGER NOT NULL,
            first_offset INTEGER NOT NULL,
            producer_id INTEGER NOT NULL,
            PRIMARY KEY (partition_id, first_offset)
        ) WITHOUT ROWID""",
        """CREATE TABLE aborted_txns (
            partition_id INTEGER NOT NULL,
            last_offset INTEGER NOT NULL,
            producer_id INTEGER NOT NULL,
            first_offset INTEGER NOT NULL,
            lso INTEGER NOT NULL,
            PRIMARY KEY (partition_id, last_offset)
        ) WITHOUT ROWID""",
    ],
    # 3: per-topic timestamp bounds (message.timestamp.before/after.max.ms, Kafka's defaults).
    [
        "ALTER TABLE topics ADD COLUMN timestamp_before_max_ms INTEGER NOT NULL"
        " DEFAULT 9223372036854775807",
        "ALTER TABLE topics ADD COLUMN timestamp_after_max_ms INTEGER NOT NULL DEFAULT 3600000",
    ],
    # 4: transaction records (the transactional-id state), due_ms indexed for the sweepers.
    [
        """CREATE TABLE txn_records (
            transactional_id TEXT PRIMARY KEY,
            record BLOB NOT NULL,
            due_ms INTEGER
        ) WITHOUT ROWID""",
        "CREATE INDEX txn_records_due ON txn_records (due_ms) WHERE due_ms IS NOT NULL",
    ],
    # 5: committed consumer-group offsets (Kafka's __consumer_offsets).
    [
        """CREATE TABLE group_offsets (
            group_id TEXT NOT NULL,
            topic TEXT NOT NULL,
            partition INTEGER NOT NULL,
            committed_offset INTEGER NOT NULL,
            metadata TEXT,
            PRIMARY KEY (group_id, topic, partition)
        ) WITHOUT ROWID""",
        "CREATE INDEX group_offsets_by_topic ON group_offsets (topic)",
    ],
    # 6: where each broker incarnation listens, with a liveness deadline (cluster membership).
    [
        """CREATE TABLE broker_registrations (
            broker_id INTEGER PRIMARY KEY,
            broker_epoch INTEGER NOT NULL,
            host TEXT NOT NULL,
            port INTEGER NOT NULL,
            rack TEXT,
            expires_ms INTEGER NOT NULL
        )""",
    ],
    # 7: extents, each the metadata of a run of batches consolidated into one object.
    [
        """CREATE TABLE extents (
        partition_id INTEGER NOT NULL,
        base_offset INTEGER NOT NULL,
        last_offset INTEGER NOT NULL,
        file_id INTEGER NOT NULL,
        byte_offset INTEGER NOT NULL,
        size INTEGER NOT NULL,
        max_timestamp INTEGER NOT NULL,
        log_append_time INTEGER NOT NULL,
        timestamp INTEGER NOT NULL,
        ts_running_max INTEGER NOT NULL,
        index_byte_offset INTEGER NOT NULL,
        index_size INTEGER NOT NULL,
        PRIMARY KEY (partition_id, base_offset)
    ) WITHOUT ROWID""",
    ],
    # 8: what a broker needs to rewrite a transaction version 1 producer's batches.
    [
        "ALTER TABLE txn_registrations ADD COLUMN client_epoch INTEGER NOT NULL DEFAULT -1",
        "ALTER TABLE txn_registrations ADD COLUMN sequence_base INTEGER NOT NULL DEFAULT 0",
    ],
    # 9: a sparse time index (the time marks) for the two per-batch timestamp indexes, which
    # made each commit write two more index pages per partition than its batch rows did.
    [
        "DROP INDEX batches_by_timestamp",
        "DROP INDEX batches_by_running_max",
        "CREATE INDEX batches_time_marks ON batches (partition_id, ts_running_max,"
        " base_offset) WHERE (base_offset + 1023) / 1024 <= last_offset / 1024",
    ],
    # 10: leases held by a broker incarnation (they die with it), and consumer groups' owners.
    [
        "ALTER TABLE txn_leases ADD COLUMN broker_id INTEGER NOT NULL DEFAULT -1",
        "ALTER TABLE txn_leases ADD COLUMN broker_epoch INTEGER NOT NULL DEFAULT -1",
        "CREATE INDEX txn_leases_by_broker ON txn_leases (broker_id, broker_epoch)",
        """CREATE TABLE group_owners (
            group_id TEXT PRIMARY KEY,
            broker_id INTEGER NOT NULL,
            broker_epoch INTEGER NOT NULL,
            generation INTEGER NOT NULL
        ) WITHOUT ROWID""",
    ],
    # 11: SCRAM credentials (KIP-554), salted and iterated: never a password.
    [
        """CREATE TABLE scram_credentials (
            user_name TEXT NOT NULL,
            mechanism INTEGER NOT NULL,
            salt BLOB NOT NULL,
            stored_key BLOB NOT NULL,
            server_key BLOB NOT NULL,
            iterations INTEGER NOT NULL,
            PRIMARY KEY (user_name, mechanism)
        ) WITHOUT ROWID""",
    ],
    # 12: ACL bindings (Kafka's authorizer), and the counter every change of them increments.
    [
        """CREATE TABLE acls (
            resource_type INTEGER NOT NULL,
            resource_name TEXT NOT NULL,
            pattern_type INTEGER NOT NULL,
            principal TEXT NOT NULL,
            host TEXT NOT NULL,
            operation INTEGER NOT NULL,
            permission INTEGER NOT NULL,
            PRIMARY KEY (resource_type, resource_name, pattern_type, principal, host, operation,
                permission)
        ) WITHOUT ROWID""",
        "INSERT OR IGNORE INTO meta VALUES ('acl_version', 0)",
    ],
    # 13: per-topic compression (compression.type, -1 for "producer", and the codecs' levels).
    [
        "ALTER TABLE topics ADD COLUMN compression_type INTEGER NOT NULL DEFAULT -1",
        "ALTER TABLE topics ADD COLUMN compression_gzip_level INTEGER NOT NULL DEFAULT -1",
        "ALTER TABLE topics ADD COLUMN compression_lz4_level INTEGER NOT NULL DEFAULT 9",
        "ALTER TABLE topics ADD COLUMN compression_zstd_level INTEGER NOT NULL DEFAULT 3",
    ],
    # 14: the leader epoch committed with each group offset (KIP-320).
    [
        "ALTER TABLE group_offsets ADD COLUMN leader_epoch INTEGER NOT NULL DEFAULT -1",
    ],
    # 15: each topic's id (KIP-516), random at creation (32 hex digits); existing topics get one.
    [
        "ALTER TABLE topics ADD COLUMN topic_uuid TEXT",
        "UPDATE topics SET topic_uuid = lower(hex(randomblob(16))) WHERE topic_uuid IS NULL",
    ],
    # 16: Kafka topic configs a diskless topic accepts and does not apply, kept as given.
    [
        "ALTER TABLE topics ADD COLUMN inapplicable_configs TEXT NOT NULL DEFAULT ''",
    ],
]

SCHEMA_VERSION = len(MIGRATIONS)


class SchemaTooNewError(Exception):
    """The file was written by a newer version of this library."""


def migrate(conn: sqlite3.Connection) -> int:
    """Bring the schema up to SCHEMA_VERSION inside one write transaction; returns the old version.

    Safe when several processes open the same file at once: the version is read under the write
    lock, so exactly one of them applies each migration.
    """
    conn.execute("BEGIN IMMEDIATE")
    try:
        (version,) = conn.execute("PRAGMA user_version").fetchone()
        if version > SCHEMA_VERSION:
            raise SchemaTooNewError(f"schema version {version} is newer than {SCHEMA_VERSION}")
        for index in range(version, SCHEMA_VERSION):
            for statement in MIGRATIONS[index]:
                conn.execute(statement)
        conn.execute(f"PRAGMA user_version = {SCHEMA_VERSION}")
        conn.execute("COMMIT")
    except BaseException:
        if conn.in_transaction:
            conn.execute("ROLLBACK")
        raise
    return int(version)
