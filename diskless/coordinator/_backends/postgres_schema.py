"""The PostgreSQL coordinator's schema, as numbered migrations applied in order.

`diskless_schema.version` holds how many migrations a database has seen. Migrations only ever
get appended: a released one is never edited (`postgres_migrations`), so any older database can
be brought up to date.
Many broker processes may start at once against a fresh database: each migrates inside one
transaction holding a transaction-scoped advisory lock, so exactly one of them applies each
migration and the others find it done.
"""

from __future__ import annotations

from typing import Final

import asyncpg

from diskless.coordinator._backends.postgres_migrations import MIGRATIONS

MIGRATION_LOCK_KEY: Final = 0x6469736B6C657373  # "diskless"
"""The advisory lock serializing migrations (advisory locks are per database)."""

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
