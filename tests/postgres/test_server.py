"""The throwaway PostgreSQL server the PostgreSQL coordinator's tests will run on.

Two tests create the same table: each must get an empty database of its own. The order of the
two does not matter; whichever runs second would fail on CREATE TABLE in a shared database.
"""

from __future__ import annotations

import asyncpg
import pytest

from tests._postgres import PostgresServer


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


async def test_the_server_answers_on_tcp_and_on_its_unix_socket(
    postgres_server: PostgresServer, postgres_dsn: str
) -> None:
    database = postgres_dsn.rsplit("/", 1)[1]
    by_tcp = await asyncpg.connect(postgres_dsn)
    by_socket = await asyncpg.connect(postgres_server.socket_dsn(database))
    try:
        await by_tcp.execute("CREATE TABLE t (x int)")
        await by_tcp.execute("INSERT INTO t VALUES (7)")
        assert await by_socket.fetchval("SELECT x FROM t") == 7
        assert await by_socket.fetchval("SELECT current_database()") == database
        assert await by_tcp.fetchval("SHOW fsync") == "off"
        address = await by_tcp.fetchval("SELECT host(inet_server_addr())")
        assert address == "127.0.0.1"
        assert await by_socket.fetchval("SELECT inet_server_addr()") is None  # a unix socket
    finally:
        await by_tcp.close()
        await by_socket.close()
