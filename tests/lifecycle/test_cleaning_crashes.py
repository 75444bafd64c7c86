"""Crash tests of the cleaner: its process killed by SIGKILL at random points of its passes.

A compacted topic gets keyed updates, tombstones and transactions (committed and aborted) from
real clients; then, round after round, a lifecycle process (`_cleaner_child`) cleans it over a
small map (several passes per run) and is killed at one of its steps: before or after an object
store call or a coordinator call, or a random delay after one (inside a coordinator transaction,
an upload, the filter). Every kill point comes once over the two stages' rounds, in a seeded
order (the long variant, among the slow tests, goes through them twice). More updates arrive
between rounds. After each kill, a read from offset 0 with kafka-python finds:
- only records that were acknowledged, each at its own offset (nothing invented or moved);
- the latest record of every key (nothing acknowledged lost; tombstones within their horizon);
- every record past the cleanable point exactly as produced (no half-cleaned state);
- the high watermark, the LSO and the log start offset unchanged.
In the first rounds the records of the latest updates are too young to clean, in the later
ones everything is cleanable. A last run without a kill leaves exactly the latest record of each
key, read so by kafka-python and confluent-kafka. Then a file manager runs past its graces: the
store holds exactly the objects the coordinator knows as live (each uploaded object whose swap
the kill prevented was reclaimed). SQLite with moto's S3 server, PostgreSQL with local files;
the seed is printed first (DISKLESS_SEED reruns the same kill points).
"""

from __future__ import annotations

import asyncio
import collections
import os
import random
import signal
import sys
from pathlib import Path
from typing import Any

import msgspec
import pytest
from confluent_kafka import Producer

from diskless import ManualClock, SystemClock
from diskless.compaction import MAP_BYTES_MIN
from diskless.coordinator import BatchCoordinator, FileState
from diskless.kafka_server import KafkaCluster
from diskless.lifecycle import FileManager
from diskless.storage import LocalObjectStore, ObjectStore
from testkit.backends import open_coordinator
from testkit.cluster import local_cluster, server_config
from testkit.postgres import database_dsn
from testkit.s3server import create_bucket, s3_store
from tests.lifecycle._cleaner_child import ChildSpec
from tests.lifecycle._cleaning import (
    TIMEOUT_S,
    TOPIC,
    Row,
    create_compacted,
    latest_by_key,
    partition_offsets,
    produce_round,
    read_confluent,
    read_kafka_python,
)

KINDS = [
    pytest.param(("sqlite", "s3"), id="sqlite-s3"),
    pytest.param(("postgres", "local"), id="postgres-local", marks=pytest.mark.slow),
]
"""The kill points are the cleaner's, the same over either backend: one runs by default."""
KEYS = 100
MAP_BYTES = MAP_BYTES_MIN
"""Room for 54 keys: a run makes several passes."""
STEPS = ["get", "put", "cleaning_range", "commit_cleaned"]
KILL_POINTS = [f"{when} {step}" for when in ("before", "after") for step in STEPS]
ROUNDS = len(KILL_POINTS) // 2
"""Killed rounds of each of the two stages: every kill point once over both."""
ROUNDS_LONG = 2 * len(KILL_POINTS)


def _seed() -> int:
    seed = int(os.environ.get("DISKLESS_SEED", random.randrange(2**32)))
    print(f"seed={seed} (rerun with DISKLESS_SEED={seed})")
    return seed


def _updates(bootstrap: str, rng: random.Random, records: int) -> list[Row]:
    """`records` updates of random keys (one in ten a tombstone), in batches of random sizes."""
    committed: list[Row] = []

    def report(error: Any, message: Any) -> None:
        assert error is None, error
        committed.append((message.offset(), message.key(), message.value()))

    producer = Producer(
        {
            "bootstrap.servers": bootstrap,
            "linger.ms": 100,
            "batch.num.messages": rng.randint(1, 20),
            "compression.type": rng.choice(["none", "lz4", "zstd", "gzip", "snappy"]),
        }
    )
    for n in range(records):
        key = b"k%d" % rng.randrange(KEYS)
        value = None if rng.random() < 0.1 else b"v%d-%d" % (n, rng.randrange(1 << 30))
        producer.produce(TOPIC, key=key, value=value, partition=0, on_delivery=report)
        if rng.random() < 0.1:
            assert producer.flush(TIMEOUT_S) == 0
    assert producer.flush(TIMEOUT_S) == 0
    return committed


class Crashes:
    """The rounds of one test: the store and coordinator the children open, and where they
    were killed."""

    def __init__(self, spec: ChildSpec, rng: random.Random) -> None:
        self.spec = spec
        self.rng = rng
        self.kills: collections.Counter[str] = collections.Counter()
        self._points: list[str] = []

    def _next_point(self) -> str:
        """The kill points in a seeded order, each once before any comes again."""
        if not self._points:
            self._points = self.rng.sample(KILL_POINTS, len(KILL_POINTS))
        return self._points.pop()

    async def run(self, uncleanable_from_ms: int, kill: bool) -> None:
        rng = self.rng
        where = self._next_point() if kill else ""
        spec = msgspec.structs.replace(
            self.spec,
            uncleanable_from_ms=uncleanable_from_ms,
            kill_at=where,
            nth=rng.randint(1, 3),
            delay_ms=rng.choice([0, 0, rng.randint(1, 40)]),
        )
        child = await asyncio.create_subprocess_exec(
            sys.executable,
            "-m",
            "tests.lifecycle._cleaner_child",
            msgspec.json.encode(spec).decode(),
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
        )
        _, err = await asyncio.wait_for(child.communicate(), 120)
        if child.returncode == -signal.SIGKILL:
            delay = f" +{spec.delay_ms} ms" if spec.delay_ms else ""
            self.kills[f"{where}{delay}"] += 1
            return
        assert child.returncode == 0, err.decode()[-3000:]


def _check(rows: list[Row], committed: list[Row], cleanable_end: int) -> None:
    """What a read from offset 0 may show, cleaned or not, up to `cleanable_end`."""
    by_offset = {row[0]: row for row in committed}
    invented = [row for row in rows if by_offset.get(row[0]) != row]
    assert not invented, invented
    lost = set(latest_by_key(committed).values()) - set(rows)
    assert not lost, sorted(lost)
    past = [row for row in rows if row[0] >= cleanable_end]
    assert past == sorted(row for row in committed if row[0] >= cleanable_end)


@pytest.mark.timeout(900)
@pytest.mark.parametrize("kind", KINDS)
async def test_a_cleaner_killed_anywhere_loses_nothing_and_leaves_no_orphan(
    kind: tuple[str, str], tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    await _run(kind, tmp_path, request, ROUNDS)


@pytest.mark.slow
@pytest.mark.timeout(1800)
@pytest.mark.parametrize("kind", [pytest.param(("sqlite", "s3"), id="sqlite-s3"), KINDS[1]])
async def test_a_cleaner_killed_anywhere_loses_nothing_long(
    kind: tuple[str, str], tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    await _run(kind, tmp_path, request, ROUNDS_LONG)


async def _run(
    kind: tuple[str, str], tmp_path: Path, request: pytest.FixtureRequest, rounds: int
) -> None:
    rng = random.Random(_seed())
    backend, store_kind = kind
    coordinator = open_coordinator(backend, tmp_path, SystemClock())
    store: ObjectStore
    spec = ChildSpec(None, None, None, None, None, MAP_BYTES, 0, "", 0, 0)
    if store_kind == "s3":
        endpoint: str = request.getfixturevalue("s3_endpoint")
        bucket = await create_bucket(endpoint)
        store = s3_store(endpoint, bucket)
        spec = msgspec.structs.replace(spec, s3_endpoint=endpoint, bucket=bucket)
    else:
        store = LocalObjectStore(tmp_path / "objects")
        spec = msgspec.structs.replace(spec, objects=str(tmp_path / "objects"))
    if backend == "sqlite":
        spec = msgspec.structs.replace(spec, sqlite=str(tmp_path / "coordinator.db"))
    else:
        spec = msgspec.structs.replace(spec, postgres=database_dsn(tmp_path))
    try:
        async with local_cluster(
            coordinator, store=store, brokers=1, server_config=server_config()
        ) as cluster:
            await _crash_rounds(cluster, store, coordinator, Crashes(spec, rng), rounds)
    finally:
        await coordinator.close()
        await store.close()


async def _crash_rounds(
    cluster: KafkaCluster,
    store: ObjectStore,
    coordinator: BatchCoordinator,
    crashes: Crashes,
    rounds: int,
) -> None:
    bootstrap = cluster.bootstrap()
    rng = crashes.rng
    await asyncio.to_thread(create_compacted, bootstrap, **{"min.cleanable.dirty.ratio": "0"})
    committed, _aborted = await asyncio.to_thread(produce_round, bootstrap, 0)
    committed += await asyncio.to_thread(_updates, bootstrap, rng, 300)
    young_from = SystemClock().now_ms() + 1
    await asyncio.sleep(0.05)
    cleanable_end = (await partition_offsets(coordinator))[0]
    for stage in ("young records", "all cleanable"):
        for _ in range(rounds):
            committed += await asyncio.to_thread(_updates, bootstrap, rng, rng.randint(0, 40))
            await crashes.run(young_from, kill=True)
            end, lso, log_start = before = await partition_offsets(coordinator)
            assert (lso, log_start) == (end, 0), before
            rows = await asyncio.to_thread(read_kafka_python, bootstrap, end)
            _check(rows, committed, cleanable_end if stage == "young records" else end)
            assert await partition_offsets(coordinator) == before
        young_from = SystemClock().now_ms() + 86_400_000
    print(f"killed {sum(crashes.kills.values())} times: {dict(crashes.kills)}")
    assert crashes.kills
    await crashes.run(young_from, kill=False)
    end = (await partition_offsets(coordinator))[0]
    latest = sorted(latest_by_key(committed).values())
    for read in (read_kafka_python, read_confluent):
        assert await asyncio.to_thread(read, bootstrap, end) == latest, read.__name__

    listed = sorted({info.key async for info in store.list_all("wal/")})
    orphans = [k for k, i in zip(listed, await coordinator.file_info(listed), strict=True) if not i]
    if {"after put", "before commit_cleaned"} & crashes.kills.keys():  # killed there at once
        assert orphans, "a kill between upload and swap leaves an orphan"
    later = ManualClock(SystemClock().now_ms() + 3_600_000)
    manager = FileManager(store, coordinator, clock=later)
    await manager.run_cycle()
    await later.advance(600)
    await manager.run_cycle()
    left = sorted({info.key async for info in store.list_all("wal/")})
    states = [info.state if info else None for info in await coordinator.file_info(left)]
    assert states == [FileState.LIVE] * len(left), list(zip(left, states, strict=True))
    for read in (read_kafka_python, read_confluent):
        assert await asyncio.to_thread(read, bootstrap, end) == latest, read.__name__
