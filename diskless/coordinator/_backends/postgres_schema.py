"""The PostgreSQL coordinator's schema, as numbered migrations applied in order.

`diskless_schema.version` holds how many migrations a database has seen. Migrations only ever
get appended: a released one is never edited (`sql_migrations`; the texts are
`migrations/postgres/V<n>__*.sql`), so any older database can be brought up to date.
Many broker processes may start at once against a fresh database: each migrates inside one
transaction holding a transaction-scoped advisory lock, so exactly one of them applies each
migration and the others find it done.
"""

from __future__ import annotations

import struct
from collections.abc import Awaitable, Callable
from typing import Final

import asyncpg
import msgspec

from diskless.coordinator._backends.sql_migrations import migrations
from diskless.txn import RetainedBatch

MIGRATION_LOCK_KEY: Final = 0x6469736B6C657373  # "diskless"
"""The advisory lock serializing migrations (advisory locks are per database)."""

MIGRATIONS: Final = migrations("postgres")
SCHEMA_VERSION: Final = len(MIGRATIONS)

_SHIFTED_MARK: Final = 0xC1
"""The first byte of the retained batches that migration 9's `diskless_apply_rebased` moved after
planning (msgpack never starts with it). Two big-endian int64 follow, the high watermark the
commit planned on and its shift, then the batches as planned: those from that high watermark on
take the shift."""
_SHIFTED_HEADER: Final = struct.Struct(">qq")
_RETAINED = msgspec.msgpack.Decoder(tuple[RetainedBatch, ...])


def unshifted(blob: bytes) -> bytes:
    """Retained batches in the marked format of migration 9 (`_SHIFTED_MARK`), in the plain one."""
    planned_on, shift = _SHIFTED_HEADER.unpack_from(blob, 1)
    batches = _RETAINED.decode(memoryview(blob)[1 + _SHIFTED_HEADER.size :])
    return msgspec.msgpack.encode(
        tuple(
            b
            if b.first_offset < planned_on
            else RetainedBatch(
                b.first_seq, b.last_seq, b.first_offset + shift, b.last_offset + shift, b.timestamp
            )
            for b in batches
        )
    )


async def _unshift_retained(conn: asyncpg.Connection) -> None:
    """Rewrite every producer entry whose retained batches are in the marked format."""
    rows = await conn.fetch(
        "SELECT partition_id, producer_id, batches FROM producers WHERE substr(batches, 1, 1) = $1",
        bytes((_SHIFTED_MARK,)),
    )
    await conn.executemany(
        "UPDATE producers SET batches = $3 WHERE partition_id = $1 AND producer_id = $2",
        [(partition_id, producer_id, unshifted(blob)) for partition_id, producer_id, blob in rows],
    )


AFTER_MIGRATION: Final[dict[int, Callable[[asyncpg.Connection], Awaitable[None]]]] = {
    11: _unshift_retained,
}
"""What runs after the statements of a migration (by number), in the same transaction: data
that SQL alone cannot rewrite."""


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
        for number in range(version + 1, SCHEMA_VERSION + 1):
            for statement in MIGRATIONS[number - 1]:
                await conn.execute(statement)
            after = AFTER_MIGRATION.get(number)
            if after is not None:
                await after(conn)
        if version < SCHEMA_VERSION:
            await conn.execute("DELETE FROM diskless_schema")
            await conn.execute("INSERT INTO diskless_schema VALUES ($1)", SCHEMA_VERSION)
    return version
