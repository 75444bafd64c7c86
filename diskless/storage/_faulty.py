"""Fault injection around any store, for tests, the simulator and latency benchmarks."""

from __future__ import annotations

import collections
import enum
import random
from collections.abc import Sequence

from diskless._fault_dice import Latency, Roll, roll
from diskless.clock import Clock, SystemClock
from diskless.errors import StorageError
from diskless.storage._base import ListPage, ObjectStore
from diskless.storage._forwarding import ForwardingObjectStore


class StoreOp(enum.Enum):
    """The operations faults can target; ranged reads count as GET."""

    PUT = "put"
    GET = "get"
    LIST = "list"
    DELETE = "delete"


class Fault(enum.Enum):
    """What happens to one operation."""

    NONE = "none"  # runs normally (use in a schedule to let one call through)
    FAIL = "fail"  # raises StorageError; the inner store is not called (nothing stored)
    LOST_ACK = "lost_ack"  # the inner call succeeds, then StorageError is raised (PUT, DELETE)
    SLOW = "slow"  # waits `slow_latency_s` more before running normally


class InjectedFaultError(StorageError):
    """A failure injected on purpose; retriable like any storage failure."""


_ROLLED = {
    Roll.NONE: Fault.NONE,
    Roll.FAIL: Fault.FAIL,
    Roll.LOST: Fault.LOST_ACK,
    Roll.SLOW: Fault.SLOW,
}


class FaultyObjectStore(ForwardingObjectStore):
    """Wraps `inner` and makes chosen operations fail, lose their ack or run slow.

    Faults come first from an explicit per-operation schedule (`schedule`), then from the
    configured probabilities. Each operation draws from `rng` a fixed number of times, at call
    time, so the same seed and the same call order give the same faults. Every operation waits
    `latency_s` (a number, or a function of the rng) on `clock` first, so a benchmark can add
    e.g. 100 ms of store latency, and a virtual clock decides when it ends.
    """

    def __init__(
        self,
        inner: ObjectStore,
        rng: random.Random,
        *,
        clock: Clock | None = None,
        latency_s: Latency = 0.0,
        put_fail_rate: float = 0.0,
        put_lost_ack_rate: float = 0.0,
        get_fail_rate: float = 0.0,
        list_fail_rate: float = 0.0,
        delete_fail_rate: float = 0.0,
        slow_rate: float = 0.0,
        slow_latency_s: Latency = 1.0,
    ) -> None:
        rates = (put_fail_rate, put_lost_ack_rate, get_fail_rate, list_fail_rate, delete_fail_rate)
        if not all(0.0 <= r <= 1.0 for r in (*rates, slow_rate)):
            raise ValueError("fault rates must be probabilities in [0, 1]")
        if put_fail_rate + put_lost_ack_rate > 1.0:
            raise ValueError("put_fail_rate + put_lost_ack_rate must not exceed 1")
        super().__init__(inner)
        self._rng = rng
        self._clock: Clock = clock if clock is not None else SystemClock()
        self._latency_s = latency_s
        self._slow_latency_s = slow_latency_s
        self._slow_rate = slow_rate
        self._fail_rate = {
            StoreOp.PUT: put_fail_rate,
            StoreOp.GET: get_fail_rate,
            StoreOp.LIST: list_fail_rate,
            StoreOp.DELETE: delete_fail_rate,
        }
        self._lost_ack_rate = {StoreOp.PUT: put_lost_ack_rate}
        self._schedule: dict[StoreOp, collections.deque[Fault]] = {
            op: collections.deque() for op in StoreOp
        }
        self.injected: collections.Counter[tuple[StoreOp, Fault]] = collections.Counter()

    def schedule(self, op: StoreOp, *faults: Fault) -> None:
        """The next calls of `op` get these faults, in order, before probabilities apply again."""
        if Fault.LOST_ACK in faults and op not in (StoreOp.PUT, StoreOp.DELETE):
            raise ValueError("a lost ack only makes sense for PUT and DELETE")
        self._schedule[op].extend(faults)

    async def put(self, key: str, data: bytes | bytearray | memoryview) -> None:
        fault = await self._before(StoreOp.PUT, key)
        await self._inner.put(key, data)
        self._after(StoreOp.PUT, key, fault)

    async def get(self, key: str) -> bytes:
        await self._before(StoreOp.GET, key)
        return await self._inner.get(key)

    async def get_range(self, key: str, start: int, end: int) -> bytes:
        await self._before(StoreOp.GET, key)
        return await self._inner.get_range(key, start, end)

    async def get_range_view(self, key: str, start: int, end: int) -> memoryview:
        await self._before(StoreOp.GET, key)
        return await self._inner.get_range_view(key, start, end)

    async def list_page(
        self,
        prefix: str,
        token: str | None = None,
        limit: int = 1000,
        start_after: str | None = None,
    ) -> ListPage:
        await self._before(StoreOp.LIST, prefix)
        return await self._inner.list_page(prefix, token, limit, start_after)

    async def delete_many(self, keys: Sequence[str]) -> list[str]:
        fault = await self._before(StoreOp.DELETE, f"{len(keys)} keys")
        deleted = await self._inner.delete_many(keys)
        self._after(StoreOp.DELETE, f"{len(keys)} keys", fault)
        return deleted

    def _choose(self, op: StoreOp) -> tuple[Fault, float]:
        """Draw this call's fault and latency; always the same number of rng draws per call."""
        rolled, latency, slow_latency = roll(
            self._rng,
            fail_rate=self._fail_rate[op],
            lost_rate=self._lost_ack_rate.get(op, 0.0),
            slow_rate=self._slow_rate,
            latency_s=self._latency_s,
            slow_latency_s=self._slow_latency_s,
        )
        fault = self._schedule[op].popleft() if self._schedule[op] else _ROLLED[rolled]
        if fault is Fault.SLOW:
            latency += slow_latency
        return fault, latency

    async def _before(self, op: StoreOp, key: str) -> Fault:
        fault, latency = self._choose(op)
        if fault is not Fault.NONE:
            self.injected[op, fault] += 1
        if latency > 0:
            await self._clock.sleep(latency)
        if fault is Fault.FAIL:
            raise InjectedFaultError(f"injected failure: {op.value} {key!r}")
        return fault

    @staticmethod
    def _after(op: StoreOp, key: str, fault: Fault) -> None:
        if fault is Fault.LOST_ACK:
            raise InjectedFaultError(f"injected lost ack: {op.value} {key!r} succeeded")
