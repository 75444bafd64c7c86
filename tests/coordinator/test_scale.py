"""Scale: SQLite lookups stay index-bound and memory stays bounded with millions of batches.

10,000 partitions; the first 10,000 batches go through the coordinator's commit path, the rest
through a bulk loader that writes the very rows a commit writes (file rows, batch rows and the
partition counters) with large `executemany` calls, which is what makes 5,000,000 batches fit in
a test run. find_batches latency is measured at 10K, 1M and 5M batches; the test asserts a ratio
of p99 CPU times per lookup (never an absolute time) and the peak RSS of the process.
"""

from __future__ import annotations

import random
import sqlite3
import statistics
import time
from collections.abc import Iterator
from pathlib import Path
from typing import NamedTuple

import pytest

from diskless._types import ErrorCode, TopicPartition
from diskless.coordinator import (
    CommitBatch,
    FindBatchesRequest,
    ListOffsetsRequest,
    SqliteBatchCoordinator,
)

PARTITIONS = 10_000
BATCHES_PER_OBJECT = 1000
CHECKPOINTS = (10_000, 1_000_000, 5_000_000)
LOOKUPS = 3000
RSS_BYTES_MAX = 300 * 1024 * 1024
P99_GROWTH_MAX = 5.0
BATCH_SIZE = 1000
RECORDS_PER_BATCH = 10
TOPIC = "scale"


# The batch columns every schema version has (later migrations add columns with defaults).
_INSERT_BATCH_ROW = (
    "INSERT INTO batches (partition_id, base_offset, last_offset, file_id, byte_offset, size,"
    " max_timestamp, log_append_time, timestamp, ts_running_max, producer_id, producer_epoch)"
    " VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)"
)


def _reset_peak_rss() -> None:
    """Start the peak over (Linux >= 4.0): earlier tests of the same process must not count."""
    Path("/proc/self/clear_refs").write_text("5")


def _peak_rss_bytes() -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) * 1024
    raise AssertionError("no VmHWM in /proc/self/status")


class BulkLoader:
    """Writes what commits of BATCHES_PER_OBJECT batches would write, without the rules."""

    def __init__(self, path: Path, high_watermarks: list[int], first_object: int) -> None:
        self.conn = sqlite3.connect(path, isolation_level=None)
        self.conn.execute("PRAGMA synchronous = NORMAL")  # loader only; the coordinator uses FULL
        self.conn.execute("PRAGMA cache_size = -65536")
        self.high_watermarks = high_watermarks
        self.partition_ids = dict(
            self.conn.execute(
                "SELECT p.partition, p.partition_id FROM partitions p JOIN topics t"
                " ON t.topic_id = p.topic_id WHERE t.name = ?",
                (TOPIC,),
            ).fetchall()
        )
        self.next_object = first_object
        self.rng = random.Random(7)

    def _objects(self, count: int) -> Iterator[tuple[int, list[tuple[int, ...]]]]:
        for _ in range(count):
            (file_id,) = self.conn.execute(
                "INSERT INTO files (key, state, size, since_ms, live_batches)"
                " VALUES (?, 0, ?, 0, ?) RETURNING file_id",
                (
                    f"bulk/{self.next_object:09d}",
                    BATCH_SIZE * BATCHES_PER_OBJECT,
                    BATCHES_PER_OBJECT,
                ),
            ).fetchone()
            self.next_object += 1
            rows: list[tuple[int, ...]] = []
            for i in range(BATCHES_PER_OBJECT):
                partition = self.rng.randrange(PARTITIONS)
                base = self.high_watermarks[partition]
                self.high_watermarks[partition] = base + RECORDS_PER_BATCH
                ts = 1_700_000_000_000 + self.next_object
                rows.append(
                    (
                        self.partition_ids[partition],
                        base,
                        base + RECORDS_PER_BATCH - 1,
                        file_id,
                        i * BATCH_SIZE,
                        BATCH_SIZE,
                        ts,
                        -1,
                        ts,
                        ts,
                        -1,
                        -1,
                    )
                )
            yield file_id, rows

    def load(self, batches: int) -> None:
        assert batches % BATCHES_PER_OBJECT == 0
        objects_per_txn = 100
        remaining = batches // BATCHES_PER_OBJECT
        while remaining:
            step = min(objects_per_txn, remaining)
            self.conn.execute("BEGIN IMMEDIATE")
            rows = [row for _, object_rows in self._objects(step) for row in object_rows]
            # In index order: every index of `batches` leads with the partition, so sorted rows
            # touch each page once per transaction instead of at random.
            rows.sort()
            self.conn.executemany(_INSERT_BATCH_ROW, rows)
            self.conn.executemany(
                "UPDATE partitions SET high_watermark = ?,"
                " size_bytes = ? * ?, ts_running_max = ? WHERE partition_id = ?",
                [
                    (
                        hwm,
                        hwm // RECORDS_PER_BATCH,
                        BATCH_SIZE,
                        1_700_000_000_000 + self.next_object,
                        self.partition_ids[p],
                    )
                    for p, hwm in enumerate(self.high_watermarks)
                ],
            )
            self.conn.execute("COMMIT")
            remaining -= step

    def close(self) -> None:
        self.conn.close()


class Latencies(NamedTuple):
    """p50 and p99 of single-partition find_batches, in seconds of wall and of CPU time."""

    wall_p50: float
    wall_p99: float
    cpu_p50: float
    cpu_p99: float


async def _latencies(
    coordinator: SqliteBatchCoordinator, high_watermarks: list[int], rng: random.Random
) -> Latencies:
    """Lookups at random offsets of random partitions.

    CPU time (of this process: the event loop and the coordinator's worker thread) measures the
    work a lookup does, which is what must not grow with history; wall time on a shared machine
    also holds every preemption by other processes, so its tail says more about the machine.
    """
    wall, cpu = [], []
    for _ in range(LOOKUPS):
        partition = rng.randrange(PARTITIONS)
        hwm = high_watermarks[partition]
        offset = rng.randrange(hwm) if hwm else 0
        request = FindBatchesRequest(TopicPartition(TOPIC, partition), offset, 4 * BATCH_SIZE)
        started, started_cpu = time.perf_counter(), time.process_time()
        (response,) = await coordinator.find_batches([request], 1 << 20)
        cpu.append(time.process_time() - started_cpu)
        wall.append(time.perf_counter() - started)
        assert response.error == ErrorCode.NONE
        assert response.high_watermark == hwm
        if hwm:
            assert response.batches[0].base_offset <= offset <= response.batches[0].last_offset
    wall.sort()
    cpu.sort()
    p99 = int(LOOKUPS * 0.99)
    return Latencies(statistics.median(wall), wall[p99], statistics.median(cpu), cpu[p99])


@pytest.mark.slow
@pytest.mark.timeout(3600)
async def test_five_million_batches(tmp_path: Path) -> None:
    _reset_peak_rss()
    path = tmp_path / "scale.db"
    coordinator = SqliteBatchCoordinator(path)
    loader: BulkLoader | None = None
    try:
        await coordinator.create_topic(TOPIC, PARTITIONS)
        epoch = await coordinator.register_broker(1)
        high_watermarks = [0] * PARTITIONS
        rng = random.Random(11)
        # The first objects go through the real commit path.
        for index in range(CHECKPOINTS[0] // BATCHES_PER_OBJECT):
            batches = []
            for i in range(BATCHES_PER_OBJECT):
                partition = rng.randrange(PARTITIONS)
                batches.append(
                    CommitBatch(
                        TopicPartition(TOPIC, partition),
                        i * BATCH_SIZE,
                        BATCH_SIZE,
                        RECORDS_PER_BATCH,
                        1_700_000_000_000,
                        1_700_000_000_000,
                        -1,
                        -1,
                        -1,
                    )
                )
            results = (
                await coordinator.commit_file(
                    f"commit/{index:06d}", 1, epoch, BATCH_SIZE * BATCHES_PER_OBJECT, batches
                )
            ).batches
            for b, r in zip(batches, results, strict=True):
                assert r.base_offset == high_watermarks[b.topic_partition.partition]
                high_watermarks[b.topic_partition.partition] += RECORDS_PER_BATCH
        loader = BulkLoader(path, high_watermarks, CHECKPOINTS[0] // BATCHES_PER_OBJECT)
        total = CHECKPOINTS[0]
        p99s = []
        for checkpoint in CHECKPOINTS:
            loader.load(checkpoint - total)
            total = checkpoint
            # Best of three passes: a burst of load elsewhere on the machine is not the index.
            passes = [await _latencies(coordinator, high_watermarks, rng) for _ in range(3)]
            best = min(passes, key=lambda latencies: latencies.cpu_p99)
            p99s.append(best.cpu_p99)
            print(
                f"{total:>9,} batches: find_batches wall p50 {best.wall_p50 * 1e6:,.0f} us"
                f" p99 {best.wall_p99 * 1e6:,.0f} us; CPU p50 {best.cpu_p50 * 1e6:,.0f} us"
                f" p99 {best.cpu_p99 * 1e6:,.0f} us; peak RSS {_peak_rss_bytes() / 2**20:,.0f} MiB"
            )
        (latest,) = await coordinator.list_offsets(
            [ListOffsetsRequest(TopicPartition(TOPIC, 0), -1)]
        )
        assert latest.offset == high_watermarks[0]
        assert p99s[-1] <= P99_GROWTH_MAX * p99s[0], p99s
        assert _peak_rss_bytes() < RSS_BYTES_MAX
    finally:
        if loader is not None:
            loader.close()
        await coordinator.close()
