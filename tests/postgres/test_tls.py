"""The PostgreSQL coordinator over TLS, configured through libpq's DSN parameters (`sslmode`,
`sslrootcert`), against a throwaway server of its own with `ssl = on` and a certificate of a
test CA (made by `openssl`).

verify-full with the CA: the coordinator works, over a TLS connection (the server's
`pg_stat_ssl` says so). With another CA, or `sslmode=require` to a server without TLS, every
operation fails with the retriable CoordinatorUnavailableError, never a hang.
"""

from __future__ import annotations

import os
import pwd
import shutil
from collections.abc import Iterator
from pathlib import Path

import asyncpg
import pytest

from diskless._types import ErrorCode
from diskless.coordinator import PostgresBatchCoordinator
from diskless.errors import CoordinatorUnavailableError
from diskless.kafka_server._server.process.cli import postgresql_url
from testkit.postgres import PostgresServer, bindir_or_skip, database_dsn
from testkit.tls import Certs


@pytest.fixture(scope="module")
def tls_server(certs: Certs) -> Iterator[PostgresServer]:
    server = PostgresServer(bindir_or_skip())
    try:
        for name, source in (("server.crt", certs.server_cert), ("server.key", certs.server_key)):
            target = server.root / name
            shutil.copyfile(source, target)
            target.chmod(0o600)
            if os.geteuid() == 0:  # the server runs as another user, who must own its key
                owner = pwd.getpwnam("nobody")
                os.chown(target, owner.pw_uid, owner.pw_gid)
        server.sql(f"ALTER SYSTEM SET ssl_cert_file = '{server.root / 'server.crt'}'")
        server.sql(f"ALTER SYSTEM SET ssl_key_file = '{server.root / 'server.key'}'")
        server.sql("ALTER SYSTEM SET ssl = on")
        server.sql("SELECT pg_reload_conf()")
        yield server
    finally:
        server.close()


def _tls_dsn(server: PostgresServer, directory: Path, ca: Path, mode: str = "verify-full") -> str:
    database = server.database(directory, "tls")
    return f"{server.dsn(database)}?sslmode={mode}&sslrootcert={ca}"


async def test_the_coordinator_works_over_a_verified_tls_connection(
    tls_server: PostgresServer, certs: Certs, tmp_path: Path
) -> None:
    dsn = _tls_dsn(tls_server, tmp_path, certs.ca)
    assert postgresql_url(dsn) == dsn  # the command line takes it as it is
    coordinator = PostgresBatchCoordinator(dsn, connect_timeout_ms=5_000)
    try:
        assert await coordinator.create_topic("secure", 3) is ErrorCode.NONE
        (described,) = await coordinator.describe_topics(["secure"])
        assert described.partitions == 3
    finally:
        await coordinator.close()
    connection = await asyncpg.connect(dsn)
    try:
        row = await connection.fetchrow(
            "SELECT ssl, version FROM pg_stat_ssl WHERE pid = pg_backend_pid()"
        )
        assert row is not None and row["ssl"] and row["version"] in ("TLSv1.2", "TLSv1.3")
    finally:
        await connection.close()


async def test_a_server_the_ca_does_not_vouch_for_is_unavailable(
    tls_server: PostgresServer, certs: Certs, tmp_path: Path
) -> None:
    other_ca = certs.stranger_cert.parent / "other-ca.pem"
    dsn = _tls_dsn(tls_server, tmp_path, other_ca)
    coordinator = PostgresBatchCoordinator(dsn, connect_timeout_ms=5_000)
    try:
        with pytest.raises(CoordinatorUnavailableError, match="certificate verify failed"):
            await coordinator.create_topic("refused", 1)
    finally:
        await coordinator.close()
    # the control: the same server and database, verified with the right CA
    coordinator = PostgresBatchCoordinator(_tls_dsn(tls_server, tmp_path, certs.ca))
    try:
        assert await coordinator.describe_topics(["refused"]) == []
    finally:
        await coordinator.close()


async def test_tls_required_of_a_server_without_it_is_unavailable(tmp_path: Path) -> None:
    dsn = f"{database_dsn(tmp_path, 'plain')}?sslmode=require"  # the run's server: no TLS
    coordinator = PostgresBatchCoordinator(dsn, connect_timeout_ms=5_000)
    try:
        with pytest.raises(CoordinatorUnavailableError):
            await coordinator.create_topic("refused", 1)
    finally:
        await coordinator.close()
