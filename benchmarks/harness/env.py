"""The library objects a Spark task builds: object store, coordinator, brokers, timing wrappers.

Every task opens its own store client and its own coordinator handle on the shared SQLite file;
brokers are in-process objects of the task that runs their rack.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Any

import msgspec

from benchmarks.harness.coordinators import open_coordinator_type
from benchmarks.harness.spec import RunSpec, StoreSpec, WorkloadSpec
from benchmarks.harness.workload import all_partitions, topic_name
from diskless import BrokerConfig, DisklessBroker
from diskless.coordinator import (
    BatchCoordinator,
    CommitFileResult,
    FileCommit,
    TopicConfig,
)
from diskless.storage import LocalObjectStore, ObjectStore, S3ObjectStore
from diskless.wal import WalConfig


class LatencyLog:
    """Durations of one operation kind, in milliseconds, with the bytes each one moved."""

    def __init__(self) -> None:
        self.ms: list[float] = []
        self.sizes: list[int] = []

    def add(self, started: float, size: int) -> None:
        self.ms.append((time.perf_counter() - started) * 1000.0)
        self.sizes.append(size)


def open_store(spec: StoreSpec, puts: LatencyLog | None = None) -> ObjectStore:
    """The store named by `spec`; when `puts` is given, every put's latency is logged in it."""
    base: type[ObjectStore]
    args: tuple[Any, ...]
    kwargs: dict[str, Any]
    if spec.kind == "local":
        base, args, kwargs = LocalObjectStore, (spec.root,), {"durable": spec.durable}
    else:
        base, args = S3ObjectStore, (spec.bucket, spec.prefix)
        kwargs = {"endpoint_url": spec.endpoint_url, "region": spec.region}
    if puts is None:
        return base(*args, **kwargs)

    async def put(self: Any, key: str, data: bytes | bytearray | memoryview) -> None:
        started = time.perf_counter()
        await base.put(self, key, data)
        puts.add(started, memoryview(data).nbytes)

    timed = type(f"Timed{base.__name__}", (base,), {"put": put})
    store: ObjectStore = timed(*args, **kwargs)
    return store


def open_coordinator(run: RunSpec, commits: LatencyLog | None = None) -> BatchCoordinator:
    """The run's coordinator (shared SQLite file, or in-memory); commits timed into `commits`."""
    base, args = open_coordinator_type(run.coordinator)
    if commits is None:
        return base(*args)

    async def commit_files(
        self: Any, broker_id: int, broker_epoch: int, files: Sequence[FileCommit]
    ) -> list[CommitFileResult]:
        started = time.perf_counter()
        results = await base.commit_files(self, broker_id, broker_epoch, files)
        commits.add(started, sum(len(f.batches) for f in files))
        return results

    # The engine's commit_file is a group of one: timing commit_files times every commit step.
    timed = type(f"Timed{base.__name__}", (base,), {"commit_files": commit_files})
    coordinator: BatchCoordinator = timed(*args)
    return coordinator


async def create_topics(coordinator: BatchCoordinator, spec: WorkloadSpec) -> None:
    """Create the workload's topics (the driver does this once, before any task starts)."""
    for topic in range(spec.topics):
        await coordinator.create_topic(topic_name(topic), spec.partitions, TopicConfig())
    assert len(all_partitions(spec)) == spec.topics * spec.partitions


def wal_config(run: RunSpec) -> WalConfig:
    """The library's WAL defaults with the run's overrides."""
    return msgspec.convert(run.wal, WalConfig)


def open_broker(
    broker_id: int, rack: str, store: ObjectStore, coordinator: BatchCoordinator, run: RunSpec
) -> DisklessBroker:
    """A broker with the run's WAL overrides (not started: use it with `async with`)."""
    config = BrokerConfig(wal=wal_config(run))
    return DisklessBroker(broker_id, store, coordinator, config, rack=rack)
