"""PostgreSQL coordinator under backend terminations and server crashes, with many operations
in flight: every failure is the library's retriable error, and everything works once the
server is back.

A server of its own (`testkit.postgres.PostgresServer`), since this test SIGKILLs it.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import signal
import time
from collections import Counter
from collections.abc import AsyncIterator, Callable, Iterator
from pathlib import Path
from typing import Any

import asyncpg
import pytest

from diskless._scram import ITERATIONS_MIN, ScramMechanism, salted_password
from diskless._types import ErrorCode, TopicPartition
from diskless.coordinator import (
    FindBatchesRequest,
    PartitionChanges,
    PostgresBatchCoordinator,
    ScramUpsertion,
)
from diskless.errors import DisklessError
from testkit.commits import batch, new_key
from testkit.postgres import PostgresServer, bindir_or_skip

TOPIC = "outages"
PARTITIONS = 4
WORKERS_PER_KIND = 4
TERMINATIONS = 6
"""Rounds of `pg_terminate_backend` of every coordinator connection, then one SIGKILL."""
HANG_GUARD_S = 120
"""Only against a hang: nothing here asserts how long anything takes."""
SHA256 = ScramMechanism.SCRAM_SHA_256


@pytest.fixture
def own_server() -> Iterator[PostgresServer]:
    pg = PostgresServer(bindir_or_skip())
    try:
        yield pg
    finally:
        pg.close()


def _kill_postmaster(pg: PostgresServer) -> None:
    pid = int((pg.data / "postmaster.pid").read_text().split()[0])
    os.kill(pid, signal.SIGKILL)


async def _restart(pg: PostgresServer) -> None:
    """Start the killed server again, once its orphaned backends have left."""
    for _ in range(HANG_GUARD_S * 5):
        try:
            await asyncio.to_thread(pg.start)
            return
        except RuntimeError:  # its old backends still hold the shared memory
            await asyncio.sleep(0.2)
    raise AssertionError("the server did not start again")


def _asyncpg_tls_probe_leak(context: dict[str, Any]) -> bool:
    """asyncpg's own unretrieved future: a connect cancelled by its timeout while asyncpg waits
    for the answer to its TLS request (`sslmode=prefer`) leaves it, and asyncio reports it when
    it is collected. Nothing of ours ever held that future."""
    error = context.get("exception")
    return context.get("message") == "Future exception was never retrieved" and (
        type(error) is ConnectionError
    )


@contextlib.asynccontextmanager
async def _loop_reports() -> AsyncIterator[list[dict[str, Any]]]:
    """What reaches the event loop's exception handler meanwhile (unhandled task errors)."""
    loop = asyncio.get_running_loop()
    reports: list[dict[str, Any]] = []
    previous = loop.get_exception_handler()
    loop.set_exception_handler(lambda _, context: reports.append(context))
    try:
        yield reports
    finally:
        loop.set_exception_handler(previous)


async def test_terminated_backends_and_a_killed_server_fail_operations_retriably_only(
    own_server: PostgresServer, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """Commits, reads (some cut short by a caller's timeout), SCRAM credential lookups and the
    change feed run at once while every coordinator connection is terminated, round after
    round, and then the server is SIGKILLed and restarted: each failure is a retriable
    `DisklessError` (no asyncpg error, no "another operation is in progress"), nothing reaches
    the event loop unhandled or is logged at ERROR, and every kind of operation succeeds
    afterwards, the change feed included."""
    pg = own_server
    dsn = pg.dsn(pg.database(tmp_path, "c"))
    admin_dsn = pg.dsn("postgres")
    caplog.set_level(logging.INFO)
    coordinator = PostgresBatchCoordinator(
        dsn, connect_timeout_ms=1_000, command_timeout_ms=2_000, resolve_timeout_ms=3_000
    )
    other = PostgresBatchCoordinator(dsn, connect_timeout_ms=1_000, command_timeout_ms=2_000)
    heard: list[PartitionChanges] = []
    try:
        await coordinator.create_topic(TOPIC, PARTITIONS)
        epoch = await coordinator.register_broker(1)
        salted = salted_password(SHA256, b"secret", b"salt", ITERATIONS_MIN)
        upsert = ScramUpsertion("alice", SHA256, ITERATIONS_MIN, b"salt", salted)
        (altered,) = await coordinator.alter_scram_credentials([], [upsert])
        assert altered.error is ErrorCode.NONE
        stop_watching = other.watch_changes(heard.append)
        tps = [TopicPartition(TOPIC, p) for p in range(PARTITIONS)]

        async def commit(i: int) -> None:
            await coordinator.commit_file(new_key(), 1, epoch, 100, [batch(tps[i % PARTITIONS])])

        async def read(_: int) -> None:
            await coordinator.find_batches([FindBatchesRequest(tp, 0, 1 << 20) for tp in tps], 1)

        async def cut_read(_: int) -> None:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(read(0), 0.003)

        async def scram(_: int) -> None:
            assert await other.scram_credential("alice", SHA256) is not None

        kinds: dict[str, Callable[[int], Any]] = {
            "commit": commit,
            "read": read,
            "cut_read": cut_read,
            "scram": scram,
        }
        failures: Counter[str] = Counter()
        successes: Counter[str] = Counter()
        unexpected: list[BaseException] = []
        done = asyncio.Event()

        async def worker(kind: str, i: int) -> None:
            while not done.is_set():
                try:
                    await kinds[kind](i)
                    successes[kind] += 1
                except DisklessError as error:
                    if not error.retriable:
                        unexpected.append(error)
                    failures[kind] += 1
                    await asyncio.sleep(0.01)
                except Exception as error:  # what must never happen
                    unexpected.append(error)
                    await asyncio.sleep(0.01)

        async def until_each_succeeds() -> None:
            before = successes.copy()
            while any(successes[kind] <= before[kind] for kind in kinds):
                await asyncio.sleep(0.05)

        async with _loop_reports() as reports:
            workers = [
                asyncio.create_task(worker(kind, i))
                for kind in kinds
                for i in range(WORKERS_PER_KIND)
            ]
            try:
                await asyncio.wait_for(until_each_succeeds(), HANG_GUARD_S)
                admin = await asyncpg.connect(admin_dsn)
                try:
                    for _ in range(TERMINATIONS):
                        await admin.execute(
                            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity"
                            " WHERE application_name LIKE 'diskless-%'"
                        )
                        await asyncio.sleep(0.3)
                finally:
                    await admin.close()
                _kill_postmaster(pg)
                await asyncio.sleep(0.5)
                await _restart(pg)
                failed_before_recovery = sum(failures.values())
                await asyncio.wait_for(until_each_succeeds(), HANG_GUARD_S)
            finally:
                done.set()
                await asyncio.gather(*workers)
            assert not unexpected, [repr(error) for error in unexpected[:5]]
            assert failed_before_recovery > 0, "no operation saw the outages"
            # The feed reconnected and hears the other coordinator's commits again.
            heard.clear()
            deadline = time.monotonic() + HANG_GUARD_S
            while not any(tps[1] in changes.partitions for changes in heard):
                assert time.monotonic() < deadline, "the change feed never came back"
                await commit(1)
                await asyncio.sleep(0.1)
            stop_watching()
            await asyncio.sleep(0.1)  # let the connections closed meanwhile be reported
        assert [c for c in reports if not _asyncpg_tls_probe_leak(c)] == []
        errors = [r.getMessage() for r in caplog.records if r.levelno >= logging.ERROR]
        assert errors == []
    finally:
        await other.close()
        await coordinator.close()
