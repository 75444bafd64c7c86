"""PostgreSQL coordinator: many processes at once, a server restart, connections killed.

All against the test run's real server (`testkit.postgres`), no mocks.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import random
import signal
import struct
import subprocess
import sys
import time
from collections import defaultdict
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import asyncpg
import msgspec
import pytest

from diskless._types import ErrorCode, TopicPartition
from diskless.coordinator import (
    CommitBatch,
    CommitRefusal,
    CommittedOffset,
    FileState,
    FindBatchesRequest,
    PostgresBatchCoordinator,
)
from diskless.coordinator._backends.postgres import (
    COMMAND_TIMEOUT_MS_DEFAULT,
    PostgresStore,
    _CommitLost,
    idle_in_transaction_ms,
)
from diskless.coordinator._backends.postgres_schema import MIGRATIONS, SCHEMA_VERSION
from diskless.coordinator._backends.postgres_step import GATE_LOCK_KEY
from diskless.coordinator._store import ReadView
from diskless.errors import (
    CommitOutcomeUnknownError,
    CoordinatorUnavailableError,
)
from diskless.txn import RetainedBatch
from testkit.commits import BASE_TS, batch, new_key
from testkit.postgres import PostgresServer, database_dsn, server

from ._postgres_child import PARTITIONS, TOPIC

PID = 7
HANG_GUARD_S = 120
"""Only against a hang: no test here asserts how long anything takes."""


@pytest.fixture
def pg() -> PostgresServer:
    return server()


def _database(pg: PostgresServer, dsn: str) -> str:
    return dsn.rsplit("/", 1)[1]


def _assert_tiles(acked: dict[int, list[tuple[int, int]]], high_watermarks: dict[int, int]) -> None:
    """Each partition's acknowledged (base offset, count) cover [0, HW) once, without gaps."""
    for partition, ranges in acked.items():
        offset = 0
        for base, count in sorted(ranges):
            assert base == offset, f"partition {partition}: gap or overlap at {base} ({offset})"
            offset += count
        assert offset == high_watermarks[partition], (partition, offset)


async def _high_watermarks(coordinator: PostgresBatchCoordinator) -> dict[int, int]:
    responses = await coordinator.find_batches(
        [FindBatchesRequest(TopicPartition(TOPIC, p), 0, 1) for p in range(PARTITIONS)], 1
    )
    return {p: r.high_watermark for p, r in enumerate(responses)}


def test_processes_committing_to_overlapping_partitions_get_unique_contiguous_offsets(
    pg: PostgresServer, tmp_path: Path
) -> None:
    """Four processes start at once on an empty database (each migrates and creates the topic)
    and commit to the same partitions: no deadlock, every offset assigned once, no gap."""
    dsn = database_dsn(tmp_path)
    children = [
        subprocess.Popen(
            [sys.executable, "-m", "tests.coordinator._postgres_child", dsn, str(i), str(i), "60"],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env={**os.environ, "PYTHONPATH": os.getcwd()},
        )
        for i in range(1, 5)
    ]
    acked: dict[int, list[tuple[int, int]]] = defaultdict(list)
    for child in children:
        out, err = child.communicate(timeout=HANG_GUARD_S)
        assert child.returncode == 0, err
        for line in out.splitlines():
            partition, base, count, error = json.loads(line)
            assert error == ErrorCode.NONE, line
            acked[partition].append((base, count))
    assert sum(len(r) for r in acked.values()) > 4 * 60  # several batches per commit

    async def check() -> None:
        coordinator = PostgresBatchCoordinator(dsn)
        try:
            _assert_tiles(acked, await _high_watermarks(coordinator))
        finally:
            await coordinator.close()

    asyncio.run(check())


async def test_a_server_restart_is_retriable_and_then_recovers(
    pg: PostgresServer, tmp_path: Path
) -> None:
    """The server stops (`-m immediate`, as a crash) mid-run and starts again: commits fail with
    retriable errors meanwhile, then succeed; every acknowledged batch is stored exactly once
    and every failed commit left nothing."""
    coordinator = PostgresBatchCoordinator(
        database_dsn(tmp_path), connect_timeout_ms=2_000, resolve_timeout_ms=30_000
    )
    try:
        await coordinator.create_topic(TOPIC, PARTITIONS)
        epoch = await coordinator.register_broker(1)
        acked: dict[int, list[tuple[int, int]]] = defaultdict(list)
        failed: list[str] = []
        down = asyncio.Event()

        async def restart() -> None:
            await asyncio.sleep(0.2)
            await asyncio.to_thread(pg.stop)
            down.set()
            await asyncio.sleep(1.0)
            await asyncio.to_thread(pg.start)

        restarting = asyncio.create_task(restart())
        n = 0
        successes_after_restart = 0
        while successes_after_restart < 20:
            key = f"r/{n:06d}"
            batches = [
                batch(TopicPartition(TOPIC, (n + i) % PARTITIONS), count=2) for i in range(3)
            ]
            n += 1
            try:
                outcome = await asyncio.wait_for(
                    coordinator.commit_file(key, 1, epoch, 300, batches), HANG_GUARD_S
                )
                results = outcome.batches
            except CoordinatorUnavailableError as error:
                assert error.retriable
                failed.append(key)
                await asyncio.sleep(0.05)
                continue
            for b, r in zip(batches, results, strict=True):
                assert r.error is ErrorCode.NONE
                acked[b.topic_partition.partition].append((r.base_offset, b.record_count))
            if restarting.done():
                successes_after_restart += 1
        await restarting
        assert down.is_set()
        assert failed, "no commit saw the server down"
        _assert_tiles(acked, await _high_watermarks(coordinator))
        assert await coordinator.file_info(failed) == [None] * len(failed)
    finally:
        await coordinator.close()


async def _backend_waiting(admin: asyncpg.Connection, database: str, wait_event: str) -> int:
    """The pid of the coordinator's backend once it waits on `wait_event`."""
    for _ in range(HANG_GUARD_S * 20):
        pid = await admin.fetchval(
            "SELECT pid FROM pg_stat_activity WHERE datname = $1 AND wait_event = $2"
            " AND application_name = 'diskless-coordinator'",
            database,
            wait_event,
        )
        if pid is not None:
            return int(pid)
        await asyncio.sleep(0.05)
    raise AssertionError(f"no backend waited on {wait_event}")


async def test_a_connection_killed_during_commit_is_resolved_as_committed(
    pg: PostgresServer, tmp_path: Path
) -> None:
    """The COMMIT is in flight (committed on the server, waiting for a synchronous standby that
    never comes) when its connection is killed: the store asks the server and answers with the
    commit's real result; nothing is lost or doubled."""
    dsn = database_dsn(tmp_path)
    setup = PostgresBatchCoordinator(dsn)
    admin = await asyncpg.connect(pg.dsn("postgres"))
    try:
        await setup.create_topic(TOPIC, 1)
        epoch = await setup.register_broker(1)
        tp = TopicPartition(TOPIC, 0)
        await setup.commit_file("k/0", 1, epoch, 100, [batch(tp, count=3)])
        # This coordinator's sessions wait for the standby at every COMMIT (see SYNC_STANDBY).
        waiting = PostgresBatchCoordinator(f"{dsn}?synchronous_commit=on")
        try:
            commit = asyncio.create_task(
                waiting.commit_file("k/1", 1, epoch, 100, [batch(tp, count=5)])
            )
            pid = await _backend_waiting(admin, _database(pg, dsn), "SyncRep")
            await admin.execute("SELECT pg_terminate_backend($1)", pid)
            (result,) = (await asyncio.wait_for(commit, HANG_GUARD_S)).batches
        finally:
            await waiting.close()
        assert (result.error, result.base_offset) == (ErrorCode.NONE, 3)
        (info,) = await setup.file_info(["k/1"])
        assert info is not None and info.state is FileState.LIVE
        (found,) = await setup.find_batches([FindBatchesRequest(tp, 0, 1 << 20)], 1 << 20)
        assert [(b.object_key, b.base_offset) for b in found.batches] == [("k/0", 0), ("k/1", 3)]
        again = await setup.commit_file("k/1", 1, epoch, 100, [batch(tp, count=5)])
        assert again.refused is CommitRefusal.OBJECT_KEY_CONFLICT
    finally:
        await admin.close()
        await setup.close()


TP0 = TopicPartition(TOPIC, 0)


@contextlib.asynccontextmanager
async def _committed_then_locked(
    pg: PostgresServer, tmp_path: Path, lock_statement: str
) -> AsyncIterator[tuple[PostgresBatchCoordinator, int, asyncpg.Connection, Any]]:
    """A coordinator with one object committed to TP0 (3 records, as "k/0") by broker 1 (its
    epoch), an admin connection, and another connection's transaction holding what
    `lock_statement` locks."""
    dsn = database_dsn(tmp_path)
    coordinator = PostgresBatchCoordinator(dsn)
    holder = await asyncpg.connect(dsn)
    admin = await asyncpg.connect(pg.dsn("postgres"))
    try:
        await coordinator.create_topic(TOPIC, 1)
        epoch = await coordinator.register_broker(1)
        await coordinator.commit_file("k/0", 1, epoch, 100, [batch(TP0, count=3)])
        lock = holder.transaction()
        await lock.start()
        await holder.execute(lock_statement)
        yield coordinator, epoch, admin, lock
    finally:
        await admin.close()
        await holder.close()
        await coordinator.close()


async def test_a_connection_killed_before_commit_applies_nothing(
    pg: PostgresServer, tmp_path: Path
) -> None:
    """The commit waits for a partition's row lock when its connection is killed: a retriable
    error, nothing applied, and the next commit takes the very next offsets."""
    locking = "SELECT * FROM partitions FOR UPDATE"
    async with _committed_then_locked(pg, tmp_path, locking) as (coordinator, epoch, admin, lock):
        commit = asyncio.create_task(
            coordinator.commit_file("k/1", 1, epoch, 100, [batch(TP0, count=5)])
        )
        pid = await _backend_waiting(admin, _database(pg, database_dsn(tmp_path)), "transactionid")
        await admin.execute("SELECT pg_terminate_backend($1)", pid)
        with pytest.raises(CoordinatorUnavailableError) as raised:
            await asyncio.wait_for(commit, HANG_GUARD_S)
        assert not isinstance(raised.value, CommitOutcomeUnknownError)
        await lock.rollback()
        assert await coordinator.file_info(["k/1"]) == [None]
        (result,) = (
            await coordinator.commit_file("k/2", 1, epoch, 100, [batch(TP0, count=5)])
        ).batches
        assert (result.error, result.base_offset) == (ErrorCode.NONE, 3)


FROZEN_COMMAND_TIMEOUT_MS = 4_000
"""The frozen broker's command timeout: its sessions idle in a transaction for half of it at most
(`idle_in_transaction_ms`), well inside the other coordinator's (the default)."""


async def _backend_idle_in_transaction(admin: asyncpg.Connection, database: str) -> int:
    """The pid of the coordinator's backend once one is idle in a transaction."""
    for _ in range(HANG_GUARD_S * 20):
        pid = await admin.fetchval(
            "SELECT pid FROM pg_stat_activity WHERE datname = $1"
            " AND state = 'idle in transaction' AND application_name = 'diskless-coordinator'",
            database,
        )
        if pid is not None:
            return int(pid)
        await asyncio.sleep(0.05)
    raise AssertionError("no backend idle in a transaction")


async def test_a_broker_frozen_inside_a_commit_step_holds_its_locks_only_for_the_idle_bound(
    pg: PostgresServer, tmp_path: Path
) -> None:
    """A broker process stops inside a commit step, its partition's row locked (SIGSTOP: like a
    host whose link to PostgreSQL was cut without a reset, it sends nothing and answers
    nothing). The server ends its session once it has been idle in its transaction for the
    bound the store sets, so another broker's commit to that partition, waiting for the lock,
    goes through within its own statement timeout. The frozen broker's step, continued, fails
    retriably and applies nothing; its next commit succeeds."""
    assert idle_in_transaction_ms(FROZEN_COMMAND_TIMEOUT_MS) < COMMAND_TIMEOUT_MS_DEFAULT
    dsn = database_dsn(tmp_path)
    coordinator = PostgresBatchCoordinator(dsn)
    admin = await asyncpg.connect(pg.dsn("postgres"))
    child: subprocess.Popen[str] | None = None
    try:
        await coordinator.create_topic(TOPIC, 1)
        epoch = await coordinator.register_broker(1)
        child = subprocess.Popen(
            [
                *[sys.executable, "-m", "tests.coordinator._postgres_frozen_child"],
                *[dsn, str(epoch), str(FROZEN_COMMAND_TIMEOUT_MS)],
            ],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env={**os.environ, "PYTHONPATH": os.getcwd()},
        )
        assert child.stdout is not None
        frozen = await asyncio.wait_for(asyncio.to_thread(child.stdout.readline), HANG_GUARD_S)
        assert frozen == "frozen\n", child.communicate(timeout=HANG_GUARD_S)
        stuck = await _backend_idle_in_transaction(admin, _database(pg, dsn))

        (result,) = (
            await asyncio.wait_for(
                coordinator.commit_file("k/0", 1, epoch, 100, [batch(TP0, count=3)]),
                HANG_GUARD_S,
            )
        ).batches
        assert (result.error, result.base_offset) == (ErrorCode.NONE, 0)
        # The child is still stopped: only the server can have ended its session.
        for _ in range(HANG_GUARD_S * 20):
            if not await admin.fetchval("SELECT 1 FROM pg_stat_activity WHERE pid = $1", stuck):
                break
            await asyncio.sleep(0.05)
        else:
            raise AssertionError("the frozen broker's session is still there")
        assert child.poll() is None

        child.send_signal(signal.SIGCONT)
        out, err = child.communicate(timeout=HANG_GUARD_S)
        assert child.returncode == 0, err
        outcomes = [json.loads(line) for line in out.splitlines()]
        assert outcomes == [["failed", "CoordinatorUnavailableError"], ["committed", 3]], err
        assert await coordinator.file_info(["c/0"]) == [None]
    finally:
        if child is not None and child.poll() is None:
            child.kill()
            child.communicate()
        await admin.close()
        await coordinator.close()


async def test_a_read_cancelled_mid_statement_is_cancelled_and_leaves_the_pool_sound(
    pg: PostgresServer, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """A read is cancelled while its statement waits (behind a table lock): the caller gets
    CancelledError, not a retriable CoordinatorError (which a periodic job would log and go
    on from, never ending), and the connection is back in the pool in a sound state."""
    async with _committed_then_locked(
        pg, tmp_path, "LOCK TABLE files IN ACCESS EXCLUSIVE MODE"
    ) as (coordinator, _, admin, lock):
        read = asyncio.create_task(coordinator.file_info(["k/0"]))
        await _backend_waiting(admin, _database(pg, database_dsn(tmp_path)), "relation")
        read.cancel()
        await asyncio.sleep(0.1)
        await lock.rollback()
        with pytest.raises(asyncio.CancelledError):
            await asyncio.wait_for(read, HANG_GUARD_S)
        (info,) = await coordinator.file_info(["k/0"])
        assert info is not None and info.state is FileState.LIVE
        assert not [r.getMessage() for r in caplog.records if r.levelno >= logging.ERROR]


async def _zero(view: ReadView) -> int:
    return 0


async def test_a_lost_commit_the_restarted_server_never_heard_of_applied_nothing(
    pg: PostgresServer, tmp_path: Path
) -> None:
    """After a crash the server may come back without the lost transaction's WAL: it then calls
    the transaction ID "in the future". Such a transaction never committed, so resolving it must
    answer "nothing applied" at once instead of waiting out the resolve timeout as unknown."""
    store = PostgresStore(database_dsn(tmp_path), resolve_timeout_ms=60_000)
    try:
        current = await store.read(_zero)  # creates the pool and the schema
        assert current == 0
        conn = await asyncpg.connect(database_dsn(tmp_path))
        try:
            never_assigned = int(await conn.fetchval("SELECT txid_current()")) + 1_000_000
        finally:
            await conn.close()
        lost = _CommitLost(never_assigned, "result", ConnectionResetError("lost with the server"))
        with pytest.raises(CoordinatorUnavailableError) as raised:
            await asyncio.wait_for(store._resolve(lost), HANG_GUARD_S)
        assert not isinstance(raised.value, CommitOutcomeUnknownError)
    finally:
        await store.close()


async def test_a_database_of_an_older_schema_is_migrated_and_keeps_its_state(
    tmp_path: Path,
) -> None:
    """A database written at schema version 1 (before the server-side functions) is brought
    up to date by the first coordinator that opens it, with its state intact."""
    dsn = database_dsn(tmp_path)
    conn = await asyncpg.connect(dsn)
    try:
        async with conn.transaction():
            await conn.execute("CREATE TABLE diskless_schema (version INTEGER NOT NULL)")
            for statement in MIGRATIONS[0]:
                await conn.execute(statement)
            await conn.execute("INSERT INTO diskless_schema VALUES (1)")
            await conn.execute(
                "INSERT INTO topics (name, partition_count, timestamp_type, retention_ms,"
                " retention_bytes, max_message_bytes, timestamp_before_max_ms,"
                " timestamp_after_max_ms) VALUES ($1, 1, 0, -1, -1, 1048588, 0, 0)",
                TOPIC,
            )
            await conn.execute(
                "INSERT INTO topics (name, partition_count, timestamp_type, retention_ms,"
                " retention_bytes, max_message_bytes, timestamp_before_max_ms,"
                " timestamp_after_max_ms) VALUES ('other', 0, 0, -1, -1, 1048588, 0, 0)"
            )
            await conn.execute(
                "INSERT INTO partitions (topic_id, partition, high_watermark) VALUES (1, 0, 7)"
            )
            await conn.execute("INSERT INTO brokers VALUES (1, 3)")
            await conn.execute("INSERT INTO group_offsets VALUES ('g', $1, 0, 5, 'm')", TOPIC)
    finally:
        await conn.close()
    coordinator = PostgresBatchCoordinator(dsn)
    try:
        tp = TopicPartition(TOPIC, 0)
        # An offset committed before leader epochs were kept reads back with none (-1).
        assert await coordinator.fetch_offsets("g") == {tp: CommittedOffset(5, "m", -1)}
        outcome = await coordinator.commit_file("m/0", 1, 3, 100, [batch(tp, count=2)])
        assert [(r.error, r.base_offset) for r in outcome.batches] == [(ErrorCode.NONE, 7)]
        conn = await asyncpg.connect(dsn)
        try:
            assert await conn.fetchval("SELECT version FROM diskless_schema") == SCHEMA_VERSION
        finally:
            await conn.close()
        # Existing topics got an id each, which every process reads alike.
        ids = {d.name: d.topic_id for d in await coordinator.describe_topics()}
        assert len(set(ids.values())) == 2
        other = PostgresBatchCoordinator(dsn)
        try:
            assert {d.name: d.topic_id for d in await other.describe_topics()} == ids
        finally:
            await other.close()
    finally:
        await coordinator.close()


async def test_retained_batches_moved_by_an_optimistic_commit_of_schema_9_are_rewritten(
    tmp_path: Path,
) -> None:
    """Schema 9 to 10 stored the retained batches of a producer entry that an optimistic commit
    had moved in a marked format: the batches as planned, with the high watermark planned on and
    the shift. Migration 11 rewrites them where they landed: a retry of the moved batch is a
    duplicate at its moved offsets, an earlier one at its own, and the next batch follows."""
    dsn = database_dsn(tmp_path)
    planned = (RetainedBatch(0, 1, 0, 1, BASE_TS), RetainedBatch(2, 5, 2, 5, BASE_TS))
    marked = b"\xc1" + struct.pack(">qq", 2, 3) + msgspec.msgpack.encode(planned)
    conn = await asyncpg.connect(dsn)
    try:
        async with conn.transaction():
            await conn.execute("CREATE TABLE diskless_schema (version INTEGER NOT NULL)")
            for migration in MIGRATIONS[:10]:
                for statement in migration:
                    await conn.execute(statement)
            await conn.execute("INSERT INTO diskless_schema VALUES (10)")
            await conn.execute(
                "INSERT INTO topics (name, partition_count, timestamp_type, retention_ms,"
                " retention_bytes, max_message_bytes, timestamp_before_max_ms,"
                " timestamp_after_max_ms) VALUES ($1, 1, 0, -1, -1, 1048588, 0, 0)",
                TOPIC,
            )
            await conn.execute(
                "INSERT INTO partitions (topic_id, partition, high_watermark) VALUES (1, 0, 9)"
            )
            await conn.execute("INSERT INTO brokers VALUES (1, 3)")
            await conn.execute(
                "INSERT INTO producers VALUES (1, $1, 0, $2, $3, -1, NULL, $4)",
                PID,
                BASE_TS,
                int(time.time() * 1000),
                marked,
            )
    finally:
        await conn.close()
    coordinator = PostgresBatchCoordinator(dsn)
    try:
        tp = TopicPartition(TOPIC, 0)
        (entry,) = await coordinator.describe_producers(tp)
        assert [b[2:] for b in entry.retained_batches] == [(0, 1), (5, 8)]
        retries = [
            batch(tp, pid=PID, epoch=0, seq=2, count=4),
            batch(tp, pid=PID, epoch=0, seq=0, count=2),
        ]
        again = await coordinator.commit_file("m/0", 1, 3, 100, retries)
        assert [(r.base_offset, r.duplicate) for r in again.batches] == [(5, True), (0, True)]
        next_batch = batch(tp, pid=PID, epoch=0, seq=6)
        after = await coordinator.commit_file("m/1", 1, 3, 100, [next_batch])
        assert [(r.error, r.base_offset) for r in after.batches] == [(ErrorCode.NONE, 9)]
    finally:
        await coordinator.close()


async def test_keys_with_array_literal_syntax_round_trip(tmp_path: Path) -> None:
    """Keys travel to the server inside array literals: quotes, backslashes, commas, braces
    and NULL-like text arrive as they were sent."""
    coordinator = PostgresBatchCoordinator(database_dsn(tmp_path))
    try:
        await coordinator.create_topic(TOPIC, 1)
        epoch = await coordinator.register_broker(1)
        tp = TopicPartition(TOPIC, 0)
        keys = ['a"b', "c\\d", "e,f", "{g}", "NULL", " h ", "\\x00"]
        for n, key in enumerate(keys):
            outcome = await coordinator.commit_file(key, 1, epoch, 100, [batch(tp, count=1)])
            assert [(r.error, r.base_offset) for r in outcome.batches] == [(ErrorCode.NONE, n)]
        (found,) = await coordinator.find_batches([FindBatchesRequest(tp, 0, 1 << 20)], 1 << 20)
        assert [b.object_key for b in found.batches] == keys
        again = await coordinator.commit_file(keys[0], 1, epoch, 100, [batch(tp, count=1)])
        assert again.refused is CommitRefusal.OBJECT_KEY_CONFLICT
    finally:
        await coordinator.close()


async def test_wide_commits_queue_at_the_gate_and_narrow_ones_pass_it(
    pg: PostgresServer, tmp_path: Path
) -> None:
    """While another session holds the gate: a commit of all 10 partitions of a 10-partition
    cluster waits for it (at the gate, holding no row lock, so a narrow commit to the same
    partitions still goes through), and commits once it is free. With 1,000 more partitions
    in the cluster, the same commit is not wide any more and passes."""
    dsn = database_dsn(tmp_path)
    coordinator = PostgresBatchCoordinator(dsn)
    admin = await asyncpg.connect(pg.dsn("postgres"))
    holder = await asyncpg.connect(dsn)
    try:
        await coordinator.create_topic(TOPIC, 10)
        epoch = await coordinator.register_broker(1)
        everything = [batch(TopicPartition(TOPIC, p)) for p in range(10)]
        await holder.execute("SELECT pg_advisory_lock($1)", GATE_LOCK_KEY)
        wide = asyncio.create_task(coordinator.commit_file("w/0", 1, epoch, 1000, everything))
        await _backend_waiting(admin, _database(pg, dsn), "advisory")
        narrow = await asyncio.wait_for(
            coordinator.commit_file("n/0", 1, epoch, 100, everything[:1]), HANG_GUARD_S
        )
        assert [(r.error, r.base_offset) for r in narrow.batches] == [(ErrorCode.NONE, 0)]
        assert not wide.done()
        await holder.execute("SELECT pg_advisory_unlock($1)", GATE_LOCK_KEY)
        committed = await asyncio.wait_for(wide, HANG_GUARD_S)
        assert [r.base_offset for r in committed.batches] == [1] + [0] * 9

        await coordinator.create_topic("many", 1000)
        await holder.execute("SELECT pg_advisory_lock($1)", GATE_LOCK_KEY)
        again = await asyncio.wait_for(
            coordinator.commit_file("w/1", 1, epoch, 1000, everything), HANG_GUARD_S
        )
        assert [r.base_offset for r in again.batches] == [2] + [1] * 9
    finally:
        await holder.close()
        await admin.close()
        await coordinator.close()


SEED = int(os.environ.get("RACING_SEED", random.randrange(1 << 30)))


async def test_brokers_racing_on_shared_producers_and_partitions_agree_with_kafka(
    tmp_path: Path,
) -> None:
    """Two brokers commit at once, over and over, to the same partitions for the same
    producers, each batch sent to one broker and its retry to the other: every commit lands on
    state the other just changed. Every new batch must be appended once, every retry answered
    as its duplicate at the same offsets, and each partition's log must tile its offsets. The
    seed is printed (RACING_SEED replays it)."""
    print(f"RACING_SEED={SEED}")
    rng = random.Random(SEED)
    dsn = database_dsn(tmp_path)
    brokers = [PostgresBatchCoordinator(dsn), PostgresBatchCoordinator(dsn)]
    try:
        await brokers[0].create_topic(TOPIC, 4)
        epochs = [await b.register_broker(i + 1) for i, b in enumerate(brokers)]
        pairs = [(TopicPartition(TOPIC, p), pid) for p in range(4) for pid in (1, 2, 3)]
        next_seq = dict.fromkeys(pairs, 0)
        sent: dict[tuple[TopicPartition, int, int], int] = {}  # (tp, pid, seq) -> base offset
        last: dict[tuple[TopicPartition, int], CommitBatch] = {}

        async def commit(side: int, batches: list[CommitBatch]) -> list[Any]:
            result = await brokers[side].commit_file(
                new_key(), side + 1, epochs[side], 100, batches
            )
            assert result.refused is None, result
            return list(zip(batches, result.batches, strict=True))

        for _ in range(40):
            objects: list[list[CommitBatch]] = [[] for _ in range(4)]
            retries: list[list[CommitBatch]] = [[] for _ in range(4)]
            for tp, pid in rng.sample(pairs, 8):
                count = rng.randint(1, 3)
                new = batch(tp, pid=pid, epoch=0, seq=next_seq[(tp, pid)], count=count)
                next_seq[(tp, pid)] += count
                objects[rng.randrange(4)].append(new)
                if (tp, pid) in last and rng.random() < 0.5:
                    retries[rng.randrange(4)].append(last[(tp, pid)])
                last[(tp, pid)] = new
            rounds = await asyncio.gather(
                *(commit(i % 2, o) for i, o in enumerate(objects) if o),
                *(commit(1 - i % 2, r) for i, r in enumerate(retries) if r),
            )
            answers = [pair for answered in rounds for pair in answered]
            for b, answer in answers:
                key = (b.topic_partition, b.producer_id, b.base_sequence)
                assert answer.error is ErrorCode.NONE, (SEED, b, answer)
                if key in sent:
                    assert (answer.duplicate, answer.base_offset) == (True, sent[key]), SEED
                else:
                    assert not answer.duplicate, (SEED, b, answer)
                    sent[key] = answer.base_offset

        for p in range(4):
            (found,) = await brokers[1].find_batches(
                [FindBatchesRequest(TopicPartition(TOPIC, p), 0, 1 << 30)], 1 << 30
            )
            offset = 0
            for info in found.batches:
                assert info.base_offset == offset, (SEED, p, found.batches)
                offset = info.last_offset + 1
            assert offset == found.high_watermark, SEED
            appended = sorted(o for (tp, _, _), o in sent.items() if tp.partition == p)
            assert appended == [info.base_offset for info in found.batches], SEED
    finally:
        for b in brokers:
            await b.close()
