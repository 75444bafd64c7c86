"""A WalWriter on a virtual clock with the real in-memory store and coordinator, plus probes."""

from __future__ import annotations

import asyncio
import random
from collections.abc import Sequence
from typing import Any

from diskless import ManualClock, TopicPartition
from diskless.coordinator import (
    BatchCoordinator,
    CallFaults,
    CommitFileResult,
    FaultyBatchCoordinator,
    FileCommit,
    FindBatchesRequest,
    InMemoryBatchCoordinator,
)
from diskless.records import set_base_offset
from diskless.storage import ForwardingObjectStore, MemoryObjectStore, ObjectStore
from diskless.wal import WalConfig, WalWriter
from testkit.wal import decode_values


class RecordingCoordinator(FaultyBatchCoordinator):
    """`inner`'s engine over its store (faults off by default): records the objects committed,
    in commit order, and how many were sent to be committed."""

    def __init__(self, inner: BatchCoordinator, commits: CallFaults | None = None) -> None:
        super().__init__(inner, random.Random(0), commits=commits or CallFaults())
        self.committed_keys: list[str] = []
        self.commit_calls = 0
        """Objects sent to be committed, whether their step succeeded or not."""

    async def commit_files(
        self, broker_id: int, broker_epoch: int, files: Sequence[FileCommit]
    ) -> list[CommitFileResult]:
        self.commit_calls += len(files)
        results = await super().commit_files(broker_id, broker_epoch, files)
        self.committed_keys.extend(f.object_key for f in files)
        return results


class GatedStore(ForwardingObjectStore):
    """Delegates to `inner`; while `gated`, every PUT waits until the test opens its gate."""

    def __init__(self, inner: ObjectStore) -> None:
        super().__init__(inner)
        self.gated = True
        self.waiting: list[tuple[str, asyncio.Event]] = []
        self.put_keys: list[str] = []
        self.stuck: set[str] = set()
        """Keys whose PUTs hang even when the store is no longer gated."""

    async def put(self, key: str, data: bytes | bytearray | memoryview) -> None:
        self.put_keys.append(key)
        if self.gated or key in self.stuck:
            gate = asyncio.Event()
            self.waiting.append((key, gate))
            await gate.wait()
        await self.inner.put(key, data)

    def open(self, key: str) -> None:
        for waiting_key, gate in self.waiting:
            if waiting_key == key:
                gate.set()
                return
        raise AssertionError(f"no PUT of {key} is waiting")


class Rig:
    """A broker's writer over a shared store and coordinator."""

    def __init__(
        self,
        config: WalConfig | None = None,
        *,
        store: ObjectStore | None = None,
        coordinator: BatchCoordinator | None = None,
        clock: ManualClock | None = None,
    ) -> None:
        self.clock = clock or ManualClock()
        self.memory = MemoryObjectStore(self.clock)
        self.store = store if store is not None else self.memory
        inner = coordinator if coordinator is not None else InMemoryBatchCoordinator(self.clock)
        self.coordinator = (
            inner if isinstance(inner, RecordingCoordinator) else RecordingCoordinator(inner)
        )
        self.config = config or WalConfig()
        self.writers: list[WalWriter] = []

    async def topic(self, name: str = "t", partitions: int = 4) -> None:
        await self.coordinator.create_topic(name, partitions)

    async def writer(self, broker_id: int = 1, **overrides: Any) -> WalWriter:
        epoch = await self.coordinator.register_broker(broker_id)
        writer = WalWriter(
            broker_id=broker_id,
            broker_epoch=epoch,
            store=overrides.pop("store", self.store),
            coordinator=overrides.pop("coordinator", self.coordinator),
            config=overrides.pop("config", self.config),
            clock=self.clock,
            **overrides,
        )
        await writer.start()
        self.writers.append(writer)
        return writer

    async def close(self) -> None:
        for writer in self.writers:
            await writer.close(flush=False)

    async def read_partition(
        self, tp: TopicPartition, store: ObjectStore | None = None
    ) -> list[tuple[int, list[bytes | None]]]:
        """Every batch of `tp` as (base offset, values), read back through coordinator + store."""
        source = store if store is not None else self.store
        (response,) = await self.coordinator.find_batches(
            [FindBatchesRequest(tp, 0, 1 << 40)], 1 << 40
        )
        out = []
        for info in response.batches:
            data = bytearray(
                await source.get_range(
                    info.object_key, info.byte_offset, info.byte_offset + info.size
                )
            )
            set_base_offset(data, info.base_offset)
            base, values = decode_values(bytes(data))
            assert base == info.base_offset
            assert base + len(values) - 1 == info.last_offset
            out.append((base, values))
        return out
