"""Small fixtures for lifecycle tests: a virtual-time cluster, uploads and commits by hand."""

from __future__ import annotations

import asyncio
import random
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Any

import pytest
from kafka.record.default_records import DefaultRecordBatch

from diskless import BrokerConfig, Clock, DisklessBroker, ManualClock, TopicPartition
from diskless._object_keys import DEFAULT_OBJECT_PREFIX, new_object_key
from diskless.coordinator import (
    BatchCoordinator,
    CommitBatch,
    CommitBatchResult,
    CommitFileResult,
    DeleteRecordsRequest,
    FaultyBatchCoordinator,
    FileCommit,
    FileState,
)
from diskless.lifecycle import FileManager, FileManagerConfig
from diskless.storage import (
    ForwardingObjectStore,
    ListPage,
    MemoryObjectStore,
    ObjectStore,
)
from testkit.wal import decode_values

PREFIX = DEFAULT_OBJECT_PREFIX
TOPIC = "events"
TP = TopicPartition(TOPIC, 0)
BROKER = 1

# Small graces so tests move virtual time in seconds; the relation the config checks still holds.
GRACE_MS = 10_000
UNREFERENCED_GRACE_MS = 5_000
COORDINATOR_OPTIONS: dict[str, object] = {"commit_age_max_ms": None}
"""Coordinators without a commit-age bound: the suite tests the manager's own guards (the grace,
condemned records), which must hold alone; test_late_commit covers the bound itself."""


def config(**overrides: object) -> FileManagerConfig:
    settings: dict[str, object] = {
        "period_ms": 1_000,
        "orphan_grace_ms": GRACE_MS,
        "commit_deadline_ms": 4_000,
        "clock_skew_max_ms": 1_000,
        "unreferenced_grace_ms": UNREFERENCED_GRACE_MS,
        "rescan_interval_ms": None,
    }
    settings.update(overrides)
    return FileManagerConfig(**settings)  # type: ignore[arg-type]


def count_calls(monkeypatch: pytest.MonkeyPatch, target: object, method: str) -> list[int]:
    """From now on, `[n]`: how often the real `target.method` was called."""
    calls = [0]
    real: Callable[..., Awaitable[Any]] = getattr(target, method)

    async def counted(*args: Any, **kwargs: Any) -> Any:
        calls[0] += 1
        return await real(*args, **kwargs)

    monkeypatch.setattr(target, method, counted)
    return calls


class CommitRefused(Exception):
    """A test commit the coordinator refused (`CommitFileResult.refused`)."""

    def __init__(self, outcome: CommitFileResult) -> None:
        super().__init__(f"{outcome.refused}: {outcome.reason}")
        self.outcome = outcome


@dataclass
class Cluster:
    clock: ManualClock
    store: ObjectStore
    coordinator: BatchCoordinator
    epoch: int

    async def upload(self, size: int = 100, *, age_ms: int = 0, broker: int = BROKER) -> str:
        """Put an object named `age_ms` ago, as a broker does before committing it."""
        key = new_object_key(PREFIX, self.clock.now_ms() - age_ms, broker)
        await self.store.put(key, bytes(size))
        return key

    async def commit(self, key: str, size: int = 100, records: int = 1) -> CommitBatchResult:
        now = self.clock.now_ms()
        batch = CommitBatch(
            topic_partition=TP,
            byte_offset=0,
            size=size,
            record_count=records,
            base_timestamp=now,
            max_timestamp=now,
            producer_id=-1,
            producer_epoch=-1,
            base_sequence=-1,
        )
        outcome = await self.coordinator.commit_file(key, BROKER, self.epoch, size, [batch])
        if outcome.refused is not None:
            raise CommitRefused(outcome)
        (result,) = outcome.batches
        return result

    async def committed(self, size: int = 100) -> str:
        key = await self.upload(size)
        result = await self.commit(key, size)
        assert result.error == 0, result
        return key

    async def unreference_all(self) -> None:
        """Delete every record of the partition, leaving its files UNREFERENCED."""
        responses = await self.coordinator.delete_records([DeleteRecordsRequest(TP, -1)])
        assert responses[0].error == 0, responses

    async def keys(self) -> list[str]:
        return [info.key async for info in self.store.list_all(PREFIX)]

    async def state(self, key: str) -> FileState | None:
        [info] = await self.coordinator.file_info([key])
        return None if info is None else info.state

    def manager(self, **overrides: object) -> FileManager:
        return FileManager(self.store, self.coordinator, config(**overrides), self.clock)


CoordinatorFactory = Callable[[Clock], BatchCoordinator]


async def cluster(
    new_coordinator: CoordinatorFactory,
    store: ObjectStore | None = None,
    clock: ManualClock | None = None,
) -> Cluster:
    clock = clock if clock is not None else ManualClock()
    coordinator = new_coordinator(clock)
    await coordinator.create_topic(TOPIC, 1)
    epoch = await coordinator.register_broker(BROKER)
    return Cluster(
        clock, store if store is not None else MemoryObjectStore(clock), coordinator, epoch
    )


class YieldingStore(ForwardingObjectStore):
    """Delegates to `inner`, yielding to the event loop around every call so that concurrent
    managers interleave at each await; `fail_deletes_of` makes chosen keys' deletes not happen."""

    def __init__(self, inner: ObjectStore) -> None:
        super().__init__(inner)
        self.fail_deletes_of: set[str] = set()

    async def put(self, key: str, data: bytes | bytearray | memoryview) -> None:
        await asyncio.sleep(0)
        await self.inner.put(key, data)

    async def get(self, key: str) -> bytes:
        await asyncio.sleep(0)
        return await self.inner.get(key)

    async def get_range(self, key: str, start: int, end: int) -> bytes:
        await asyncio.sleep(0)
        return await self.inner.get_range(key, start, end)

    async def list_page(
        self,
        prefix: str,
        token: str | None = None,
        limit: int = 1000,
        start_after: str | None = None,
    ) -> ListPage:
        await asyncio.sleep(0)
        page = await self.inner.list_page(prefix, token, limit, start_after)
        await asyncio.sleep(0)
        return page

    async def delete_many(self, keys: Sequence[str]) -> list[str]:
        await asyncio.sleep(0)
        allowed = [key for key in keys if key not in self.fail_deletes_of]
        deleted = await self.inner.delete_many(allowed)
        await asyncio.sleep(0)
        return deleted


async def settle(clock: ManualClock, timeout_s: float = 10.0) -> None:
    """Wait (in real time) until some task sleeps on `clock` again: a backend that works in
    threads (SQLite) finishes its calls before virtual time may move on."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout_s
    while clock.next_deadline() is None:
        assert loop.time() < deadline, "nothing went back to sleep on the virtual clock"
        await asyncio.sleep(0.001)


async def run_virtual(clock: ManualClock, seconds: float, step_s: float) -> None:
    """Move virtual time forward `seconds` in steps, letting sleepers finish their work."""
    steps = round(seconds / step_s)
    for _ in range(steps):
        await settle(clock)
        await clock.advance(step_s)
    await settle(clock)


READER_BROKER = 99  # reads through its own broker: a cold cache, so bytes come from the store


class GatedCoordinator(FaultyBatchCoordinator):
    """Holds every commit at a gate until the test opens it; records how commits ended."""

    def __init__(self, inner: BatchCoordinator) -> None:
        super().__init__(inner, random.Random(0))
        self.gate = asyncio.Event()
        self.arrived = asyncio.Event()
        self.outcomes: list[CommitFileResult | BaseException] = []

    async def commit_files(
        self, broker_id: int, broker_epoch: int, files: Sequence[FileCommit]
    ) -> list[CommitFileResult]:
        self.arrived.set()
        await self.gate.wait()
        try:
            results = await super().commit_files(broker_id, broker_epoch, files)
        except BaseException as error:
            self.outcomes.append(error)
            raise
        self.outcomes.extend(results)
        return results


async def read_all(c: Cluster, config: BrokerConfig | None = None) -> list[bytes | None]:
    async with DisklessBroker(
        READER_BROKER, c.store, c.coordinator, config, clock=c.clock
    ) as reader:
        fetched = await reader.fetch({TP: 0})
    values: list[bytes | None] = []
    data = fetched[TP].records
    position = 0
    while position < len(data):
        length = int.from_bytes(data[position + 8 : position + 12], "big", signed=True)
        batch = data[position : position + 12 + length]
        _, batch_values = decode_values(batch)
        assert DefaultRecordBatch(batch).validate_crc()
        values.extend(batch_values)
        position += 12 + length
    return values


async def clock_advance(c: Cluster, seconds: float) -> None:
    await settle_quietly(c)
    await c.clock.advance(seconds)


async def settle_quietly(c: Cluster) -> None:
    """Let thread-backed coordinator calls finish; the broker's timers keep something asleep."""
    for _ in range(20):
        await asyncio.sleep(0.001)
