"""A child process for the cleaner's crash tests: a lifecycle process that runs the cleaner until
it has nothing left to clean, and dies by SIGKILL at a chosen point.

    python -m tests.lifecycle._cleaner_child SPEC

SPEC is a JSON `ChildSpec`: the coordinator (a SQLite file or a PostgreSQL DSN), the store (a
local directory or a bucket of an S3 endpoint), the cleaner's map size, the oldest time whose
records it may not clean yet, and where to die: at the `nth` start or end of a kind of step
(an object store GET or PUT, the coordinator's `cleaning_range` or `commit_cleaned`), at once
or `delay_ms` later (from there, anywhere: in a coordinator transaction, an upload, the
filter). Exit 0: nothing was due any more, before the step was reached (the steps taken,
counted by kind, printed last).
"""

from __future__ import annotations

import asyncio
import collections
import os
import signal
import sys
import threading
from collections.abc import Awaitable, Callable
from typing import Any

import msgspec

from diskless import SystemClock
from diskless.coordinator import (
    BatchCoordinator,
    PostgresBatchCoordinator,
    SqliteBatchCoordinator,
)
from diskless.lifecycle import Cleaner, CleanerConfig
from diskless.storage import ForwardingObjectStore, LocalObjectStore, ObjectStore, S3ObjectStore
from testkit.s3server import S3_CREDENTIALS

PASSES_MAX = 200


class ChildSpec(msgspec.Struct, frozen=True):
    sqlite: str | None
    postgres: str | None
    objects: str | None
    s3_endpoint: str | None
    bucket: str | None
    map_bytes: int
    uncleanable_from_ms: int
    """Records at or after this time are not cleaned yet (the cleaner's age reaches here)."""
    kill_at: str
    """Where to die: "before " or "after " a step ("get", "put", "cleaning_range",
    "commit_cleaned"); "" never."""
    nth: int
    """At the nth such step of the run."""
    delay_ms: int


class Steps:
    """Counts the steps of each kind; kills this process at the chosen one."""

    def __init__(self, kill_at: str, nth: int, delay_ms: int) -> None:
        self.kill_at = kill_at
        self.nth = nth
        self.delay_ms = delay_ms
        self.counts: collections.Counter[str] = collections.Counter()

    def step(self, where: str) -> None:
        self.counts[where] += 1
        if where != self.kill_at or self.counts[where] != self.nth:
            return
        if self.delay_ms == 0:
            os.kill(os.getpid(), signal.SIGKILL)
        timer = threading.Timer(self.delay_ms / 1000, os.kill, (os.getpid(), signal.SIGKILL))
        timer.daemon = True
        timer.start()

    async def around(self, name: str, call: Awaitable[Any]) -> Any:
        self.step(f"before {name}")
        result = await call
        self.step(f"after {name}")
        return result


class KilledStore(ForwardingObjectStore):
    def __init__(self, inner: ObjectStore, steps: Steps) -> None:
        super().__init__(inner)
        self.steps = steps

    async def put(self, key: str, data: bytes | bytearray | memoryview) -> None:
        await self.steps.around("put", super().put(key, data))

    async def get(self, key: str) -> bytes:
        data: bytes = await self.steps.around("get", super().get(key))
        return data

    async def get_range(self, key: str, start: int, end: int) -> bytes:
        data: bytes = await self.steps.around("get", super().get_range(key, start, end))
        return data


def _counted(steps: Steps, name: str, call: Callable[..., Awaitable[Any]]) -> Any:
    async def counted(*args: Any) -> Any:
        return await steps.around(name, call(*args))

    return counted


def _coordinator(spec: ChildSpec) -> BatchCoordinator:
    if spec.sqlite is not None:
        return SqliteBatchCoordinator(spec.sqlite)
    assert spec.postgres is not None
    return PostgresBatchCoordinator(spec.postgres)


def _store(spec: ChildSpec) -> ObjectStore:
    if spec.objects is not None:
        return LocalObjectStore(spec.objects)
    assert spec.s3_endpoint is not None and spec.bucket is not None
    return S3ObjectStore(spec.bucket, endpoint_url=spec.s3_endpoint, **S3_CREDENTIALS)


async def main(spec: ChildSpec) -> None:
    steps = Steps(spec.kill_at, spec.nth, spec.delay_ms)
    coordinator = _coordinator(spec)
    for name in ("cleaning_range", "commit_cleaned"):
        setattr(coordinator, name, _counted(steps, name, getattr(coordinator, name)))
    store = KilledStore(_store(spec), steps)
    clock = SystemClock()
    try:
        for _ in range(PASSES_MAX):
            # The age reaching back to `uncleanable_from_ms` now: each run's own, as time passes.
            age_ms = max(0, clock.now_ms() - spec.uncleanable_from_ms)
            config = CleanerConfig(age_ms=age_ms, map_bytes=spec.map_bytes)
            run = await Cleaner(store, coordinator, config, clock).run_once()
            assert run.failures == 0, run
            if not run.cleaned:
                print(msgspec.json.encode(steps.counts).decode())
                return
        raise SystemExit(f"still cleaning after {PASSES_MAX} runs")
    finally:
        await coordinator.close()
        await store.close()


if __name__ == "__main__":
    asyncio.run(main(msgspec.json.decode(sys.argv[1], type=ChildSpec)))
