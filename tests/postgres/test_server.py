"""The throwaway PostgreSQL server the PostgreSQL coordinator's tests run on.

Two tests create the same table: each must get an empty database of its own. The order of the
two does not matter; whichever runs second would fail on CREATE TABLE in a shared database.
"""

from __future__ import annotations

import asyncpg
import pytest


@pytest.mark.parametrize("writer", ["first", "second"])
async def test_each_test_gets_a_fresh_database(postgres_dsn: str, writer: str) -> None:
    connection = await asyncpg.connect(postgres_dsn)
    try:
        tables = await connection.fetchval(
            "SELECT count(*) FROM information_schema.tables WHERE table_schema = 'public'"
        )
        assert tables == 0
        await connection.execute("CREATE TABLE batches (object_key text PRIMARY KEY, n int)")
        await connection.executemany(
            "INSERT INTO batches VALUES ($1, $2)", [(f"{writer}-{i}", i) for i in range(100)]
        )
        rows = await connection.fetch("SELECT object_key, n FROM batches ORDER BY n")
        assert [(r["object_key"], r["n"]) for r in rows] == [
            (f"{writer}-{i}", i) for i in range(100)
        ]
    finally:
        await connection.close()
