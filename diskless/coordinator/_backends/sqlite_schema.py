"""The SQLite coordinator's schema, as numbered migrations applied in order.

`PRAGMA user_version` holds how many migrations a database file has seen. Migrations only ever
get appended: a released one is never edited (`sql_migrations`; the texts are
`migrations/sqlite/V<n>__*.sql`), so any older file can be brought up to date.
"""

from __future__ import annotations

import sqlite3
from typing import Final

from diskless.coordinator._backends.sql_migrations import migrations

MIGRATIONS: Final = migrations("sqlite")
SCHEMA_VERSION: Final = len(MIGRATIONS)


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
