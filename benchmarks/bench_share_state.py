"""How to store a share-partition's state (KIP-932): one encoded value, or one row per range.

    .venv/bin/python -m benchmarks.bench_share_state [--steps N] [--postgres DSN | --no-postgres]

Three members take turns on one share-partition while records keep arriving: each acquires up
to 500 new or released records (1 KiB each, so a step acquires about half a MB), then
acknowledges what it acquired the turn before, one type per offset, releasing one record in
fifty, which comes back to the next acquisition (so the state holds some tens of ranges). Every
step is one transaction: load the state (locked, on PostgreSQL), decide with the same rules
(`_rules.share`), store what changed, commit (SQLite: WAL, synchronous=FULL, as the store).

- **value**: the state is one msgpack value per share-partition, replaced by each step (what
  the coordinator stores).
- **rows**: one row per range beside a row for the start, end and epoch; a step deletes the
  ranges it changed and inserts their successors.

Also the coordinator itself (value), end to end; and 16 members acquiring and acknowledging at
once through one process, each request a step of its own or batched by a `ShareStepQueue`
(steps per acquired MB is what batching saves). Printed: ms per step, ms and bytes written per
acquired MB. Ratios, not absolute times, carry over between machines.
"""

from __future__ import annotations

import argparse
import asyncio
import sqlite3
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any, Final, Protocol

from benchmarks._fresh_coordinator import fresh_coordinator
from diskless import TopicPartition
from diskless.coordinator import ShareStepQueue
from diskless.coordinator._rules.share import (
    NEW_STATE,
    AcknowledgeBatch,
    AcknowledgeType,
    AcquiredRange,
    RecordState,
    ShareAcknowledge,
    ShareAcquire,
    ShareAnswer,
    ShareFetchPartition,
    ShareLimits,
    SharePartitionState,
    ShareRange,
    ShareRequest,
    acknowledge,
    acquire,
    decode_state,
    encode_state,
    initialized,
)

RECORD_BYTES: Final = 1024
ACQUIRE_MAX: Final = 500
MEMBERS: Final = ("m0", "m1", "m2")
RELEASE_EVERY: Final = 50
LIMITS: Final = ShareLimits(max_record_locks=2000)
TP: Final = TopicPartition("bench", 0)
CONCURRENT_MEMBERS: Final = 16

Step = Callable[[str, int, list[AcknowledgeBatch] | None], Awaitable[tuple[AcquiredRange, ...]]]
"""(member, fetchable end, acknowledgements of the member's last acquisition) -> acquired."""


def _acks(acquired: tuple[AcquiredRange, ...], salt: int) -> list[AcknowledgeBatch]:
    out = []
    for r in acquired:
        kinds = tuple(
            AcknowledgeType.RELEASE if (o + salt) % RELEASE_EVERY == 0 else AcknowledgeType.ACCEPT
            for o in range(r.first, r.last + 1)
        )
        out.append(AcknowledgeBatch(r.first, r.last, kinds))
    return out


async def _drive(step: Step, steps: int) -> tuple[float, int]:
    """Runs `steps` acquisitions (each acknowledging the member's previous one in a step of its
    own); returns (seconds, records acquired)."""
    held: dict[str, tuple[AcquiredRange, ...]] = {}
    end = 0
    acquired_records = 0
    started = time.perf_counter()
    for n in range(steps):
        member = MEMBERS[n % len(MEMBERS)]
        if member in held:
            await step(member, end, _acks(held.pop(member), n))
        end += ACQUIRE_MAX
        got = await step(member, end, None)
        held[member] = got
        acquired_records += sum(r.last - r.first + 1 for r in got)
    return time.perf_counter() - started, acquired_records


def _decide(
    state: SharePartitionState, member: str, end: int, acks: list[AcknowledgeBatch] | None
) -> tuple[SharePartitionState, tuple[AcquiredRange, ...]]:
    state = initialized(state, 0)
    if acks is not None:
        done = acknowledge(state, member, acks, now_ms=0, limits=LIMITS)
        assert done.error == 0
        return done.state, ()
    got = acquire(
        state, member, max_records=ACQUIRE_MAX, fetchable_end=end, now_ms=0, limits=LIMITS
    )
    return got.state, got.acquired


class Form(Protocol):
    written: int

    async def step(
        self, member: str, end: int, acks: list[AcknowledgeBatch] | None
    ) -> tuple[AcquiredRange, ...]: ...


def _range_row(r: ShareRange) -> tuple[Any, ...]:
    return (r.first, r.last, int(r.state), r.delivery_count, r.member, r.deadline_ms)


def _from_rows(head: Any, rows: list[Any]) -> SharePartitionState:
    if head is None:
        return NEW_STATE
    ranges = tuple(ShareRange(f, la, RecordState(s), c, m, d) for f, la, s, c, m, d in rows)
    return SharePartitionState(head[0], head[1], head[2], ranges)


def _diff(
    before: SharePartitionState, after: SharePartitionState
) -> tuple[list[ShareRange], list[ShareRange]]:
    old, new = set(before.ranges), set(after.ranges)
    return sorted(old - new, key=lambda r: r.first), sorted(new - old, key=lambda r: r.first)


class SqliteValue:
    def __init__(self, path: Path) -> None:
        self.conn = _sqlite(path)
        self.conn.execute("CREATE TABLE s (k INTEGER PRIMARY KEY, state BLOB NOT NULL)")
        self.written = 0

    async def step(
        self, member: str, end: int, acks: list[AcknowledgeBatch] | None
    ) -> tuple[AcquiredRange, ...]:
        c = self.conn
        c.execute("BEGIN IMMEDIATE")
        row = c.execute("SELECT state FROM s WHERE k = 1").fetchone()
        state = NEW_STATE if row is None else decode_state(row[0])
        after, got = _decide(state, member, end, acks)
        blob = encode_state(after)
        c.execute("INSERT OR REPLACE INTO s VALUES (1, ?)", (blob,))
        self.written += len(blob)
        c.execute("COMMIT")
        return got


class SqliteRows:
    def __init__(self, path: Path) -> None:
        self.conn = _sqlite(path)
        self.conn.execute("CREATE TABLE h (k INTEGER PRIMARY KEY, e, s, n)")
        self.conn.execute(
            "CREATE TABLE r (k INTEGER, f INTEGER, l, st, c, m, d, PRIMARY KEY (k, f))"
            " WITHOUT ROWID"
        )
        self.written = 0

    async def step(
        self, member: str, end: int, acks: list[AcknowledgeBatch] | None
    ) -> tuple[AcquiredRange, ...]:
        c = self.conn
        c.execute("BEGIN IMMEDIATE")
        head = c.execute("SELECT e, s, n FROM h WHERE k = 1").fetchone()
        rows = c.execute("SELECT f, l, st, c, m, d FROM r WHERE k = 1 ORDER BY f").fetchall()
        before = _from_rows(head, rows)
        after, got = _decide(before, member, end, acks)
        gone, added = _diff(before, after)
        c.executemany("DELETE FROM r WHERE k = 1 AND f = ?", [(r.first,) for r in gone])
        c.executemany("INSERT INTO r VALUES (1, ?, ?, ?, ?, ?, ?)", [_range_row(r) for r in added])
        c.execute(
            "INSERT OR REPLACE INTO h VALUES (1, ?, ?, ?)",
            (after.state_epoch, after.start, after.end),
        )
        self.written += 24 + 8 * len(gone) + sum(40 + len(r.member) for r in added)
        c.execute("COMMIT")
        return got


def _sqlite(path: Path) -> sqlite3.Connection:
    conn = sqlite3.connect(path, isolation_level=None)
    conn.execute("PRAGMA journal_mode = WAL")
    conn.execute("PRAGMA synchronous = FULL")
    return conn


class PostgresValue:
    def __init__(self, conn: Any) -> None:
        self.conn = conn
        self.written = 0

    async def setup(self) -> None:
        await self.conn.execute("CREATE TABLE s (k INT PRIMARY KEY, state BYTEA NOT NULL)")
        await self.conn.execute("INSERT INTO s VALUES (1, $1)", encode_state(NEW_STATE))

    async def step(
        self, member: str, end: int, acks: list[AcknowledgeBatch] | None
    ) -> tuple[AcquiredRange, ...]:
        async with self.conn.transaction():
            blob = await self.conn.fetchval("SELECT state FROM s WHERE k = 1 FOR UPDATE")
            after, got = _decide(decode_state(blob), member, end, acks)
            new = encode_state(after)
            await self.conn.execute("UPDATE s SET state = $1 WHERE k = 1", new)
            self.written += len(new)
        return got


class PostgresRows:
    def __init__(self, conn: Any) -> None:
        self.conn = conn
        self.written = 0

    async def setup(self) -> None:
        await self.conn.execute("CREATE TABLE h (k INT PRIMARY KEY, e INT, s BIGINT, n BIGINT)")
        await self.conn.execute(
            "CREATE TABLE r (k INT, f BIGINT, l BIGINT, st SMALLINT, c INT, m TEXT, d BIGINT,"
            " PRIMARY KEY (k, f))"
        )
        await self.conn.execute("INSERT INTO h VALUES (1, 0, -1, -1)")

    async def step(
        self, member: str, end: int, acks: list[AcknowledgeBatch] | None
    ) -> tuple[AcquiredRange, ...]:
        conn = self.conn
        async with conn.transaction():
            head = await conn.fetchrow("SELECT e, s, n FROM h WHERE k = 1 FOR UPDATE")
            rows = await conn.fetch("SELECT f, l, st, c, m, d FROM r WHERE k = 1 ORDER BY f")
            before = _from_rows(head, [tuple(row) for row in rows])
            after, got = _decide(before, member, end, acks)
            gone, added = _diff(before, after)
            if gone:
                await conn.execute(
                    "DELETE FROM r WHERE k = 1 AND f = ANY($1::bigint[])", [r.first for r in gone]
                )
            if added:
                await conn.executemany(
                    "INSERT INTO r VALUES (1, $1, $2, $3, $4, $5, $6)",
                    [_range_row(r) for r in added],
                )
            await conn.execute(
                "UPDATE h SET e = $1, s = $2, n = $3 WHERE k = 1",
                after.state_epoch,
                after.start,
                after.end,
            )
            self.written += 24 + 8 * len(gone) + sum(40 + len(r.member) for r in added)
        return got


def _report(name: str, seconds: float, records: int, steps: int, written: int | None) -> None:
    mb = records * RECORD_BYTES / (1 << 20)
    per_mb = f"{written / mb / 1024:8.1f} KiB written/MB" if written is not None else ""
    print(
        f"{name:24s} {seconds / steps * 1000:7.3f} ms/step  {seconds / mb * 1000:8.2f} ms/MB"
        f"  {steps / mb:5.2f} steps/MB  {per_mb}"
    )


async def _coordinator_form(backend: str, dsn: str | None, steps: int) -> None:
    async with fresh_coordinator(backend, dsn) as coordinator:
        await coordinator.create_topic(TP.topic, 1)

        async def step(
            member: str, end: int, acks: list[AcknowledgeBatch] | None
        ) -> tuple[AcquiredRange, ...]:
            if acks is not None:
                answers = await coordinator.acknowledge_share_records(
                    "g", member, {TP: acks}, LIMITS
                )
                assert answers[TP] == 0
                return ()
            fetch = ShareFetchPartition(TP, ACQUIRE_MAX, end, 0, 0)
            got = await coordinator.acquire_share_records("g", member, [fetch], LIMITS)
            return got[TP].acquired

        seconds, records = await _drive(step, steps)
        _report(f"{backend} coordinator", seconds, records, 2 * steps, None)


async def _concurrent(backend: str, dsn: str | None, steps: int, queued: bool) -> None:
    """`CONCURRENT_MEMBERS` members of one group, each on a partition of its own, acquiring and
    acknowledging at once through one process: a step each, or through its `ShareStepQueue`."""
    async with fresh_coordinator(backend, dsn) as coordinator:
        await coordinator.create_topic(TP.topic, CONCURRENT_MEMBERS)
        queue = ShareStepQueue(coordinator)
        sent = 0

        async def run(request: ShareRequest) -> ShareAnswer:
            nonlocal sent
            if queued:
                return await queue.run(request)
            sent += 1
            (answer,) = await coordinator.share_steps([request])
            return answer

        async def member(index: int) -> int:
            tp = TopicPartition(TP.topic, index)
            name = f"m{index}"
            records = 0
            for n in range(steps // CONCURRENT_MEMBERS):
                fetch = ShareFetchPartition(tp, ACQUIRE_MAX, (n + 1) * ACQUIRE_MAX, 0, 0)
                got = await run(ShareAcquire("g", name, [fetch], LIMITS))
                assert isinstance(got, dict)
                acquired = tuple(got[tp].acquired)  # type: ignore[union-attr]
                records += sum(r.last - r.first + 1 for r in acquired)
                acks = {tp: _acks(acquired, n)}
                await run(ShareAcknowledge("g", name, acks, LIMITS))
            return records

        started = time.perf_counter()
        records = sum(await asyncio.gather(*(member(i) for i in range(CONCURRENT_MEMBERS))))
        seconds = time.perf_counter() - started
        count = queue.steps if queued else sent
        how = "queued" if queued else "a step each"
        _report(f"{backend} {CONCURRENT_MEMBERS} members, {how}", seconds, records, count, None)


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--steps", type=int, default=600)
    parser.add_argument(
        "--postgres", default=None, help="an admin DSN (default: a throwaway server)"
    )
    parser.add_argument("--no-postgres", action="store_true")
    args = parser.parse_args()
    steps = args.steps
    with tempfile.TemporaryDirectory(prefix="diskless-bench-") as directory:
        for name, form_type in (("sqlite value", SqliteValue), ("sqlite rows", SqliteRows)):
            form: Form = form_type(Path(directory) / f"{name.replace(' ', '_')}.db")
            seconds, records = await _drive(form.step, steps)
            _report(name, seconds, records, 2 * steps, form.written)
    await _coordinator_form("sqlite", None, steps)
    for queued in (False, True):
        await _concurrent("sqlite", None, steps, queued)
    if args.no_postgres:
        return
    import asyncpg

    from benchmarks._coordinator_postgres import fresh_database_async, server

    with server(args.postgres) as admin_dsn:
        for name, pg_type in (("postgres value", PostgresValue), ("postgres rows", PostgresRows)):
            async with fresh_database_async(admin_dsn) as database:
                conn = await asyncpg.connect(database)
                try:
                    pg_form = pg_type(conn)
                    await pg_form.setup()
                    seconds, records = await _drive(pg_form.step, steps)
                    _report(name, seconds, records, 2 * steps, pg_form.written)
                finally:
                    await conn.close()
        await _coordinator_form("postgres", admin_dsn, steps)
        for queued in (False, True):
            await _concurrent("postgres", admin_dsn, steps, queued)


if __name__ == "__main__":
    asyncio.run(main())
