"""ACL bindings as rows of both SQL stores (`acls`: one row per binding, its fields the key).

A change of ACLs loads them whole after locking the `acl_version` counter (`Needs.acls`), so
deletions and insertions here never race another change: an insert of a stored binding cannot
happen (the engine drops those), and a deleted one is known to exist.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Iterable, Sequence
from typing import Any, Final

import asyncpg

from diskless.coordinator._rules.acls import (
    ACL_VERSION_COUNTER,
    AclBinding,
    AclOperation,
    AclPermissionType,
    PatternType,
    ResourceType,
)
from diskless.coordinator._store import Changes

SELECT_ACLS: Final = (
    "SELECT resource_type, resource_name, pattern_type, principal, host, operation, permission"
    " FROM acls ORDER BY resource_type, resource_name, pattern_type, principal, host,"
    " operation, permission"
)
_KEY: Final = (
    "resource_type = {0} AND resource_name = {1} AND pattern_type = {2} AND principal = {3}"
    " AND host = {4} AND operation = {5} AND permission = {6}"
)


def binding_from_row(row: Sequence[Any]) -> AclBinding:
    return AclBinding(
        ResourceType(row[0]),
        row[1],
        PatternType(row[2]),
        row[3],
        row[4],
        AclOperation(row[5]),
        AclPermissionType(row[6]),
    )


def _rows(bindings: Iterable[AclBinding]) -> list[tuple[Any, ...]]:
    return [(int(b[0]), b[1], int(b[2]), b[3], b[4], int(b[5]), int(b[6])) for b in bindings]


def sqlite_version(conn: sqlite3.Connection) -> int:
    row = conn.execute("SELECT value FROM meta WHERE name = ?", (ACL_VERSION_COUNTER,)).fetchone()
    return 0 if row is None else int(row[0])


def sqlite_acls(conn: sqlite3.Connection) -> list[AclBinding]:
    return [binding_from_row(row) for row in conn.execute(SELECT_ACLS)]


def sqlite_apply(conn: sqlite3.Connection, changes: Changes) -> None:
    if changes.acls_deleted:
        marks = _KEY.format(*["?"] * 7)
        conn.executemany(f"DELETE FROM acls WHERE {marks}", _rows(changes.acls_deleted))
    if changes.acls_created:
        conn.executemany(
            "INSERT INTO acls VALUES (?, ?, ?, ?, ?, ?, ?)", _rows(changes.acls_created)
        )


async def postgres_version(conn: asyncpg.Connection) -> int:
    value = await conn.fetchval("SELECT value FROM meta WHERE name = $1", ACL_VERSION_COUNTER)
    return 0 if value is None else int(value)


async def postgres_acls(conn: asyncpg.Connection) -> list[AclBinding]:
    return [binding_from_row(row) for row in await conn.fetch(SELECT_ACLS)]


async def postgres_apply(conn: asyncpg.Connection, changes: Changes) -> None:
    if changes.acls_deleted:
        marks = _KEY.format(*[f"${n}" for n in range(1, 8)])
        await conn.executemany(f"DELETE FROM acls WHERE {marks}", _rows(changes.acls_deleted))
    if changes.acls_created:
        await conn.executemany(
            "INSERT INTO acls VALUES ($1, $2, $3, $4, $5, $6, $7)", _rows(changes.acls_created)
        )
