"""What idle long-polling consumers cost one broker process: CPU and coordinator queries.

    .venv/bin/python -m benchmarks.bench_fetch_idle [--sessions 0,100,1000] [--seconds S]
        [--backend sqlite|postgres|all] [--postgres DSN] [--quick]

One broker process (`python -m diskless.kafka_server --brokers 1 --no-lifecycle`, started through
this module's `serve` mode, which only adds a statement counter) serves one topic of one empty
partition. This process opens N connections and keeps one raw Fetch (v4: max_wait 500 ms,
min_bytes 1, offset 0) outstanding on each, sending the next as soon as the answer arrives, as an
idle consumer does; raw frames keep client-library cost out of the figure, and the clients run
in this process, not the broker's. For each N (0 first: the baseline of the same run) it measures,
over one window after a warm-up:

- broker CPU: the broker process's user + system time (`/proc/PID/stat`, all its threads) per
  second of wall time, as a share of one core; beyond the baseline, per fetch answered;
- fetches answered per second (each answer checked: error code NONE);
- coordinator queries per second. PostgreSQL: committed transactions of the broker's database
  (`pg_stat_database.xact_commit`, the server's own count, read from another database; the
  server publishes it up to a second late, within a window of several). SQLite: statements
  the broker process ran on any SQLite connection, counted by a trace callback that `serve`
  installs (`sqlite3.Connection.set_trace_callback`), and transactions among them (statements
  starting with BEGIN). Both include the broker's own background traffic (its registration
  renewal), which the 0 row shows.

`--quick` runs a short window with few sessions: a smoke run for tests, not a measurement.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import signal
import sqlite3
import struct
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

TOPIC: Final = "idle"
MAX_WAIT_MS: Final = 500
FETCH_VERSION: Final = 4
START_TIMEOUT_S: Final = 60.0
COUNTS_ENV: Final = "DISKLESS_BENCH_COUNTS"
"""Where `serve` writes its statement counts when it receives SIGUSR1."""
PROFILE_ENV: Final = "DISKLESS_BENCH_PROFILE"
"""When set, `serve` runs the broker under cProfile and writes the profile there on exit."""
_CLOCK_TICKS: Final = os.sysconf("SC_CLK_TCK")
_SIZE = struct.Struct(">i")


# --- the broker process --------------------------------------------------------------------------
class _Counts:
    statements = 0
    transactions = 0
    answered = 0


def _trace(statement: str) -> None:
    _Counts.statements += 1
    if statement.lstrip()[:5].upper() == "BEGIN":
        _Counts.transactions += 1


def serve(argv: Sequence[str]) -> None:
    """`python -m diskless.kafka_server ARGV`, with every SQLite statement counted; SIGUSR1
    writes `SEQ STATEMENTS TRANSACTIONS` to the file named by `COUNTS_ENV`."""
    connect = sqlite3.connect

    def counted_connect(*args: Any, **kwargs: Any) -> sqlite3.Connection:
        conn = connect(*args, **kwargs)
        conn.set_trace_callback(_trace)
        return conn

    sqlite3.connect = counted_connect  # type: ignore[assignment]
    path = os.environ[COUNTS_ENV]

    def dump(signum: int, frame: object) -> None:
        _Counts.answered += 1
        with open(path + ".tmp", "w") as out:
            out.write(f"{_Counts.answered} {_Counts.statements} {_Counts.transactions}\n")
        os.replace(path + ".tmp", path)

    signal.signal(signal.SIGUSR1, dump)
    from diskless.kafka_server.__main__ import main

    profile = os.environ.get(PROFILE_ENV)
    if profile is None:
        main(list(argv))
        return
    import cProfile

    cProfile.runctx("main(list(argv))", globals(), {"main": main, "argv": argv}, profile)


class Broker:
    """The broker process, its address, and its counters."""

    def __init__(self, data_dir: Path, coordinator: str | None) -> None:
        self.counts_path = data_dir / "counts"
        argv = [
            sys.executable, "-m", "benchmarks.bench_fetch_idle", "serve", "--",
            "--brokers", "1", "--racks", "1", "--no-lifecycle", "--log-level", "WARNING",
            "--data-dir", str(data_dir), "--topic", f"{TOPIC}:1",
        ]  # fmt: skip
        if coordinator is not None:
            argv += ["--coordinator", coordinator]
        self.process = subprocess.Popen(
            argv,
            stdout=subprocess.PIPE,
            text=True,
            env={**os.environ, COUNTS_ENV: str(self.counts_path)},
        )
        self.address = self._bootstrap()
        self._seq = 0

    def _bootstrap(self) -> tuple[str, int]:
        assert self.process.stdout is not None
        found: list[str] = []
        ready = threading.Event()
        stdout = self.process.stdout

        def read() -> None:
            for line in stdout:
                if line.startswith("bootstrap.servers="):
                    found.append(line.split("=", 1)[1].strip().split(",")[0])
                    ready.set()

        threading.Thread(target=read, daemon=True).start()
        if not ready.wait(START_TIMEOUT_S):
            self.close()
            raise SystemExit("the broker process did not start")
        host, _, port = found[0].rpartition(":")
        return host, int(port)

    def cpu_s(self) -> float:
        """User + system seconds of the broker process so far (all threads)."""
        fields = Path(f"/proc/{self.process.pid}/stat").read_text().rpartition(")")[2].split()
        return (int(fields[11]) + int(fields[12])) / _CLOCK_TICKS  # utime, stime

    async def statements(self) -> tuple[int, int]:
        """(statements, transactions) the broker has run on SQLite so far."""
        self._seq += 1
        self.process.send_signal(signal.SIGUSR1)
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            with contextlib.suppress(FileNotFoundError, ValueError):
                seq, statements, transactions = map(int, self.counts_path.read_text().split())
                if seq == self._seq:
                    return statements, transactions
            await asyncio.sleep(0.005)
        raise SystemExit("the broker process did not report its counts")

    def close(self) -> None:
        self.process.send_signal(signal.SIGTERM)
        try:
            self.process.wait(30)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()


# --- the idle sessions ------------------------------------------------------------------------
def fetch_frame(correlation_id: int) -> bytes:
    """A Fetch v4 request (header v1): partition 0 of TOPIC from offset 0, min_bytes 1."""
    client = b"bench-idle"
    topic = TOPIC.encode()
    body = struct.pack(">hhih", 1, FETCH_VERSION, correlation_id, len(client)) + client
    body += struct.pack(">iiiibi", -1, MAX_WAIT_MS, 1, 1 << 20, 0, 1)
    body += struct.pack(">h", len(topic)) + topic
    body += struct.pack(">iiqi", 1, 0, 0, 1 << 20)
    return _SIZE.pack(len(body)) + body


def answer_error(frame: bytes) -> int:
    """The error code of the one partition of a Fetch v4 response."""
    (name_length,) = struct.unpack_from(">h", frame, 12)
    position = 14 + name_length + 4 + 4  # the topic name, the partition count, the index
    (error,) = struct.unpack_from(">h", frame, position)
    return int(error)


class Sessions:
    """N connections, each with one Fetch outstanding at all times."""

    def __init__(self) -> None:
        self.answered = 0
        self.failed = 0
        self._tasks: list[asyncio.Task[None]] = []

    async def open(self, address: tuple[str, int], count: int) -> None:
        ready = [asyncio.get_running_loop().create_future() for _ in range(count)]
        self._tasks = [asyncio.create_task(self._session(address, f)) for f in ready]
        if ready:
            await asyncio.wait_for(asyncio.gather(*ready), START_TIMEOUT_S)

    async def _session(self, address: tuple[str, int], ready: asyncio.Future[None]) -> None:
        reader, writer = await asyncio.open_connection(*address)
        try:
            correlation = 0
            while True:
                correlation += 1
                writer.write(fetch_frame(correlation))
                (size,) = _SIZE.unpack(await reader.readexactly(4))
                frame = await reader.readexactly(size)
                assert _SIZE.unpack_from(frame)[0] == correlation
                if answer_error(frame) == 0:
                    self.answered += 1
                else:
                    self.failed += 1
                if not ready.done():
                    ready.set_result(None)
        finally:
            writer.close()

    async def close(self) -> None:
        for task in self._tasks:
            task.cancel()
        results = await asyncio.gather(*self._tasks, return_exceptions=True)
        errors = [r for r in results if not isinstance(r, asyncio.CancelledError | None)]
        if errors:
            raise SystemExit(f"{len(errors)} sessions failed, e.g. {errors[0]!r}")


# --- measuring ----------------------------------------------------------------------------------
@dataclass
class Row:
    sessions: int
    cpu_share: float
    fetches_per_s: float
    failed: int
    queries_per_s: float
    transactions_per_s: float
    client_cpu_share: float


async def _xact_commits(admin_dsn: str, database: str) -> int:
    import asyncpg

    conn = await asyncpg.connect(admin_dsn)
    try:
        value = await conn.fetchval(
            "SELECT xact_commit FROM pg_stat_database WHERE datname = $1", database
        )
        return int(value)
    finally:
        await conn.close()


async def measure_level(
    broker: Broker,
    sessions: int,
    warmup_s: float,
    window_s: float,
    postgres: tuple[str, str] | None,
) -> Row:
    clients = Sessions()
    await clients.open(broker.address, sessions)
    try:
        await asyncio.sleep(warmup_s)

        async def sample() -> tuple[float, float, int, int, int, float]:
            statements, transactions = await broker.statements()
            commits = await _xact_commits(*postgres) if postgres is not None else 0
            return (
                time.monotonic(),
                broker.cpu_s(),
                clients.answered,
                statements if postgres is None else commits,
                transactions if postgres is None else commits,
                time.process_time(),
            )

        before = await sample()
        failed_before = clients.failed
        await asyncio.sleep(window_s)
        after = await sample()
    finally:
        await clients.close()
    seconds = after[0] - before[0]
    return Row(
        sessions,
        (after[1] - before[1]) / seconds,
        (after[2] - before[2]) / seconds,
        clients.failed - failed_before,
        (after[3] - before[3]) / seconds,
        (after[4] - before[4]) / seconds,
        (after[5] - before[5]) / seconds,
    )


def report(backend: str, rows: Sequence[Row]) -> None:
    queries = "xact/s" if backend == "postgres" else "stmts/s"
    print(f"\n{backend}: one broker process, one empty partition, Fetch v{FETCH_VERSION} "
          f"max_wait {MAX_WAIT_MS} ms")  # fmt: skip
    print(
        f"{'sessions':>8} {'broker CPU':>10} {'beyond 0':>9} {'fetches/s':>10} {'µs/fetch':>9}"
        f" {queries:>9} {'txn/s':>8} {'client CPU':>10} {'failed':>6}"
    )
    base = rows[0].cpu_share if rows and rows[0].sessions == 0 else 0.0
    for row in rows:
        beyond = row.cpu_share - base
        per_fetch = beyond / row.fetches_per_s * 1e6 if row.fetches_per_s else 0.0
        print(
            f"{row.sessions:>8} {row.cpu_share:>10.1%} {beyond:>9.1%} {row.fetches_per_s:>10.0f}"
            f" {per_fetch:>9.0f} {row.queries_per_s:>9.1f} {row.transactions_per_s:>8.1f}"
            f" {row.client_cpu_share:>10.1%} {row.failed:>6}"
        )


@contextlib.asynccontextmanager
async def postgres_database(dsn: str | None) -> AsyncIterator[tuple[str, str]]:
    """(admin DSN, a fresh database's name) on `dsn`'s server or a throwaway one."""
    from benchmarks._coordinator_postgres import fresh_database_async, server

    with server(dsn) as admin:
        async with fresh_database_async(admin) as database:
            yield admin, database.rsplit("/", 1)[1]


async def run_backend(
    backend: str, levels: Sequence[int], warmup_s: float, window_s: float, dsn: str | None
) -> list[Row]:
    async with contextlib.AsyncExitStack() as stack:
        data_dir = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="fetch-idle-")))
        postgres = None
        coordinator = None
        if backend == "postgres":
            postgres = await stack.enter_async_context(postgres_database(dsn))
            coordinator = postgres[0].rsplit("/", 1)[0] + "/" + postgres[1]
        broker = Broker(data_dir, coordinator)
        stack.callback(broker.close)
        await asyncio.sleep(warmup_s)  # registration and topic creation settle
        return [
            await measure_level(broker, level, warmup_s, window_s, postgres) for level in levels
        ]
    raise AssertionError("unreachable")


async def main(
    backends: Sequence[str],
    levels: Sequence[int],
    warmup_s: float,
    window_s: float,
    dsn: str | None,
) -> dict[str, list[Row]]:
    results = {}
    for backend in backends:
        rows = await run_backend(backend, levels, warmup_s, window_s, dsn)
        report(backend, rows)
        results[backend] = rows
    return results


def _levels(spec: str) -> list[int]:
    return [int(n) for n in spec.split(",")]


if __name__ == "__main__":
    if sys.argv[1:2] == ["serve"]:
        serve(sys.argv[3:] if sys.argv[2:3] == ["--"] else sys.argv[2:])
        raise SystemExit(0)
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sessions", type=_levels, default=[0, 100, 1000])
    parser.add_argument("--seconds", type=float, default=10.0, help="the measured window")
    parser.add_argument("--warmup", type=float, default=3.0)
    parser.add_argument("--backend", choices=("sqlite", "postgres", "all"), default="all")
    parser.add_argument(
        "--postgres", default=None, help="an admin DSN (default: a throwaway server)"
    )
    parser.add_argument("--quick", action="store_true", help="a smoke run: 0 and 5 sessions, 1 s")
    args = parser.parse_args()
    if args.quick:
        args.sessions, args.seconds, args.warmup = [0, 5], 1.0, 1.0
    chosen = ["sqlite", "postgres"] if args.backend == "all" else [args.backend]
    asyncio.run(main(chosen, args.sessions, args.warmup, args.seconds, args.postgres))
