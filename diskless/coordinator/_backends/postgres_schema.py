"""The PostgreSQL coordinator's schema, as numbered migrations applied in order.

`diskless_schema.version` holds how many migrations a database has seen. Migrations only ever
get appended: a released one is never edited, so any older database can be brought up to date.
Many broker processes may start at once against a fresh database: each migrates inside one
transaction holding a transaction-scoped advisory lock, so exactly one of them applies each
migration and the others find it done.
"""

from __future__ import annotations

from typing import Final

import asyncpg

from diskless.coordinator._backends.postgres_extents import MIGRATION as EXTENTS
from diskless.coordinator._backends.postgres_functions import (
    APPLY_COMMIT_FUNCTION,
    APPLY_COMMITS_FUNCTION,
    APPLY_REBASED_FUNCTION,
    GATED_LOAD_FUNCTION,
    LOAD_FUNCTION,
    PEEK_COMMIT_FUNCTION,
)
from diskless.coordinator._backends.sqlite_rows import TIME_MARK_INDEX

MIGRATION_LOCK_KEY: Final = 0x6469736B6C657373  # "diskless"
"""The advisory lock serializing migrations (advisory locks are per database)."""

MIGRATIONS: Final[list[list[str]]] = [
    # 1: topics, partitions, files, batches (markers included: file_id 0, no file), producer
    # state, broker epochs, counters, transaction registrations, leases (the commit barrier),
    # the ongoing (LSO) and aborted indexes, transaction records, committed group offsets.
    [
        """CREATE TABLE topics (
            topic_id BIGSERIAL PRIMARY KEY,
            name TEXT NOT NULL UNIQUE,
            partition_count INTEGER NOT NULL,
            timestamp_type INTEGER NOT NULL,
            retention_ms BIGINT NOT NULL,
            retention_bytes BIGINT NOT NULL,
            max_message_bytes BIGINT NOT NULL,
            timestamp_before_max_ms BIGINT NOT NULL,
            timestamp_after_max_ms BIGINT NOT NULL
        )""",
        """CREATE TABLE partitions (
            partition_id BIGSERIAL PRIMARY KEY,
            topic_id BIGINT NOT NULL,
            partition INTEGER NOT NULL,
            high_watermark BIGINT NOT NULL DEFAULT 0,
            log_start_offset BIGINT NOT NULL DEFAULT 0,
            size_bytes BIGINT NOT NULL DEFAULT 0,
            ts_running_max BIGINT NOT NULL DEFAULT -1,
            UNIQUE (topic_id, partition)
        )""",
        # state: 0 live, 1 unreferenced, 2 condemned.
        """CREATE TABLE files (
            file_id BIGSERIAL PRIMARY KEY,
            key TEXT NOT NULL UNIQUE,
            state SMALLINT NOT NULL,
            size BIGINT NOT NULL,
            since_ms BIGINT NOT NULL,
            live_batches BIGINT NOT NULL
        )""",
        "CREATE INDEX files_dead ON files (since_ms, key) WHERE state <> 0",
        """CREATE TABLE batches (
            partition_id BIGINT NOT NULL,
            base_offset BIGINT NOT NULL,
            last_offset BIGINT NOT NULL,
            file_id BIGINT NOT NULL,
            byte_offset BIGINT NOT NULL,
            size BIGINT NOT NULL,
            max_timestamp BIGINT NOT NULL,
            log_append_time BIGINT NOT NULL,
            timestamp BIGINT NOT NULL,
            ts_running_max BIGINT NOT NULL,
            producer_id BIGINT NOT NULL,
            producer_epoch INTEGER NOT NULL,
            control INTEGER NOT NULL,
            coordinator_epoch INTEGER NOT NULL,
            PRIMARY KEY (partition_id, base_offset)
        )""",
        # MAX_TIMESTAMP: the first batch among those with the largest timestamp.
        "CREATE INDEX batches_by_timestamp ON batches (partition_id, timestamp DESC, base_offset)",
        # By timestamp: the running max grows with the offset, so the first entry >= ts answers.
        "CREATE INDEX batches_by_running_max"
        " ON batches (partition_id, ts_running_max, base_offset)",
        """CREATE TABLE producers (
            partition_id BIGINT NOT NULL,
            producer_id BIGINT NOT NULL,
            producer_epoch INTEGER NOT NULL,
            last_timestamp BIGINT NOT NULL,
            last_update_ms BIGINT NOT NULL,
            coordinator_epoch INTEGER NOT NULL,
            txn_first_offset BIGINT,
            batches BYTEA NOT NULL,
            PRIMARY KEY (partition_id, producer_id)
        )""",
        "CREATE INDEX producers_idle ON producers (last_update_ms) WHERE txn_first_offset IS NULL",
        "CREATE TABLE brokers (broker_id BIGINT PRIMARY KEY, epoch BIGINT NOT NULL)",
        "CREATE TABLE meta (name TEXT PRIMARY KEY, value BIGINT NOT NULL)",
        """CREATE TABLE txn_registrations (
            partition_id BIGINT NOT NULL,
            producer_id BIGINT NOT NULL,
            producer_epoch INTEGER NOT NULL,
            ending BOOLEAN NOT NULL,
            PRIMARY KEY (partition_id, producer_id)
        )""",
        """CREATE TABLE txn_leases (
            lease_id BIGSERIAL PRIMARY KEY,
            partition_id BIGINT NOT NULL,
            producer_id BIGINT NOT NULL,
            producer_epoch INTEGER NOT NULL,
            expires_ms BIGINT NOT NULL
        )""",
        "CREATE INDEX txn_leases_by_producer ON txn_leases (partition_id, producer_id)",
        """CREATE TABLE ongoing_txns (
            partition_id BIGINT NOT NULL,
            first_offset BIGINT NOT NULL,
            producer_id BIGINT NOT NULL,
            PRIMARY KEY (partition_id, first_offset)
        )""",
        """CREATE TABLE aborted_txns (
            partition_id BIGINT NOT NULL,
            last_offset BIGINT NOT NULL,
            producer_id BIGINT NOT NULL,
            first_offset BIGINT NOT NULL,
            lso BIGINT NOT NULL,
            PRIMARY KEY (partition_id, last_offset)
        )""",
        """CREATE TABLE txn_records (
            transactional_id TEXT PRIMARY KEY,
            record BYTEA NOT NULL,
            due_ms BIGINT
        )""",
        "CREATE INDEX txn_records_due ON txn_records (due_ms) WHERE due_ms IS NOT NULL",
        """CREATE TABLE group_offsets (
            group_id TEXT NOT NULL,
            topic TEXT NOT NULL,
            partition INTEGER NOT NULL,
            committed_offset BIGINT NOT NULL,
            metadata TEXT,
            PRIMARY KEY (group_id, topic, partition)
        )""",
        "CREATE INDEX group_offsets_by_topic ON group_offsets (topic)",
        """CREATE TABLE broker_registrations (
            broker_id INTEGER PRIMARY KEY,
            broker_epoch INTEGER NOT NULL,
            host TEXT NOT NULL,
            port INTEGER NOT NULL,
            rack TEXT,
            expires_ms BIGINT NOT NULL
        )""",
    ],
    # 2: extents, each the metadata of a run of batches consolidated into one object.
    EXTENTS,
    # 3: what a broker needs to rewrite a transaction version 1 producer's batches.
    [
        "ALTER TABLE txn_registrations ADD COLUMN client_epoch INTEGER NOT NULL DEFAULT -1",
        "ALTER TABLE txn_registrations ADD COLUMN sequence_base INTEGER NOT NULL DEFAULT 0",
    ],
    # 4: a commit's load and apply as server-side functions, one round trip each.
    [LOAD_FUNCTION, APPLY_COMMIT_FUNCTION],
    # 5: the commit gate in front of wide loads.
    [GATED_LOAD_FUNCTION],
    # 6: no index on producers' last update. Every commit changes that column, so the index
    # cost each producer upsert new index entries (no HOT update), about 6% of a commit; the
    # expiry it served runs with the retention checks, minutes apart, and scans instead.
    ["DROP INDEX producers_idle"],
    # 7: a sparse time index (the time marks) for the two per-batch timestamp indexes.
    ["DROP INDEX batches_by_timestamp", "DROP INDEX batches_by_running_max", TIME_MARK_INDEX],
    # 8: the apply of a commit for several files at once (group commits), instead of one.
    [APPLY_COMMITS_FUNCTION, "DROP FUNCTION diskless_apply_commit"],
    # 9: optimistic commits, planned on an unlocked peek and moved onto the state they land on.
    [PEEK_COMMIT_FUNCTION, APPLY_REBASED_FUNCTION],
    # 10: leases held by a broker incarnation (they die with it), and consumer groups' owners.
    [
        "ALTER TABLE txn_leases ADD COLUMN broker_id INTEGER NOT NULL DEFAULT -1",
        "ALTER TABLE txn_leases ADD COLUMN broker_epoch BIGINT NOT NULL DEFAULT -1",
        "CREATE INDEX txn_leases_by_broker ON txn_leases (broker_id, broker_epoch)",
        """CREATE TABLE group_owners (
            group_id TEXT PRIMARY KEY,
            broker_id INTEGER NOT NULL,
            broker_epoch BIGINT NOT NULL,
            generation INTEGER NOT NULL
        )""",
    ],
]

SCHEMA_VERSION: Final = len(MIGRATIONS)


class SchemaTooNewError(Exception):
    """The database was written by a newer version of this library."""


async def migrate(conn: asyncpg.Connection) -> int:
    """Bring the schema up to SCHEMA_VERSION in one transaction; returns the old version."""
    async with conn.transaction():
        await conn.execute("SELECT pg_advisory_xact_lock($1)", MIGRATION_LOCK_KEY)
        await conn.execute("CREATE TABLE IF NOT EXISTS diskless_schema (version INTEGER NOT NULL)")
        version = await conn.fetchval("SELECT max(version) FROM diskless_schema")
        version = 0 if version is None else int(version)
        if version > SCHEMA_VERSION:
            raise SchemaTooNewError(f"schema version {version} is newer than {SCHEMA_VERSION}")
        for index in range(version, SCHEMA_VERSION):
            for statement in MIGRATIONS[index]:
                await conn.execute(statement)
        if version < SCHEMA_VERSION:
            await conn.execute("DELETE FROM diskless_schema")
            await conn.execute("INSERT INTO diskless_schema VALUES ($1)", SCHEMA_VERSION)
    return version
