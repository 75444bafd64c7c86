"""Bounded retries with backoff and per-attempt deadlines, on the injected clock."""

from __future__ import annotations

import asyncio
import logging
import random
from collections.abc import Awaitable, Callable, Sequence
from typing import TypeVar

from diskless.clock import Clock, SystemClock
from diskless.errors import StorageError, StorageTimeoutError
from diskless.storage._base import ListPage, ObjectStore
from diskless.storage._forwarding import ForwardingObjectStore

logger = logging.getLogger(__name__)

T = TypeVar("T")

ATTEMPTS_MAX = 20  # more than this hides an outage behind minutes of backoff


class RetryingObjectStore(ForwardingObjectStore):
    """Retries retriable StorageErrors of `inner`; the last attempt's typed error is re-raised.

    Not retried: ObjectNotFoundError and InvalidRangeError (retrying cannot change the answer),
    and ValueError from bad arguments. Backoff doubles from `base_delay_s` up to `max_delay_s`,
    each delay drawn in [d/2, d] from `rng` so that a seeded simulation replays the same waits.
    A per-attempt deadline (measured and slept on `clock`, so a virtual clock drives it) turns a
    hung call into StorageTimeoutError, which is retriable. A PUT retried after a lost ack writes
    the same bytes again: objects are immutable once named, so that is safe.
    """

    def __init__(
        self,
        inner: ObjectStore,
        attempts: int = 3,
        base_delay_s: float = 0.05,
        max_delay_s: float = 2.0,
        clock: Clock | None = None,
        timeout_per_attempt_s: float | None = 30.0,
        rng: random.Random | None = None,
    ) -> None:
        if not 1 <= attempts <= ATTEMPTS_MAX:
            raise ValueError(f"attempts must be in [1, {ATTEMPTS_MAX}], got {attempts}")
        if base_delay_s < 0 or max_delay_s < base_delay_s:
            raise ValueError("need 0 <= base_delay_s <= max_delay_s")
        if timeout_per_attempt_s is not None and timeout_per_attempt_s <= 0:
            raise ValueError("timeout_per_attempt_s must be positive or None")
        super().__init__(inner)
        self._attempts = attempts
        self._base_delay_s = base_delay_s
        self._max_delay_s = max_delay_s
        self._clock: Clock = clock if clock is not None else SystemClock()
        self._timeout_s = timeout_per_attempt_s
        self._rng = rng if rng is not None else random.Random()

    async def put(self, key: str, data: bytes | bytearray | memoryview) -> None:
        await self._retry("put", key, lambda: self._inner.put(key, data))

    async def get(self, key: str) -> bytes:
        return await self._retry("get", key, lambda: self._inner.get(key))

    async def get_range(self, key: str, start: int, end: int) -> bytes:
        return await self._retry("get_range", key, lambda: self._inner.get_range(key, start, end))

    async def get_range_view(self, key: str, start: int, end: int) -> memoryview:
        return await self._retry(
            "get_range", key, lambda: self._inner.get_range_view(key, start, end)
        )

    async def list_page(
        self,
        prefix: str,
        token: str | None = None,
        limit: int = 1000,
        start_after: str | None = None,
    ) -> ListPage:
        return await self._retry(
            "list", prefix, lambda: self._inner.list_page(prefix, token, limit, start_after)
        )

    async def delete_many(self, keys: Sequence[str]) -> list[str]:
        return await self._retry(
            "delete", f"{len(keys)} keys", lambda: self._inner.delete_many(keys)
        )

    def backoff_s(self, retry: int) -> float:
        """The wait before retry number `retry` (1-based); draws from the rng."""
        ceiling = min(self._max_delay_s, self._base_delay_s * (2 ** (retry - 1)))
        return self._rng.uniform(ceiling / 2, ceiling)

    async def _retry(self, operation: str, key: str, call: Callable[[], Awaitable[T]]) -> T:
        attempt = 1
        while True:
            try:
                return await self._attempt(operation, key, call)
            except StorageError as exc:
                if not exc.retriable or attempt == self._attempts:
                    raise
                delay = self.backoff_s(attempt)
                logger.debug(
                    "%s %r attempt %d/%d failed (%s); retrying in %.3fs",
                    operation,
                    key,
                    attempt,
                    self._attempts,
                    exc,
                    delay,
                )
                await self._clock.sleep(delay)
                attempt += 1

    async def _attempt(self, operation: str, key: str, call: Callable[[], Awaitable[T]]) -> T:
        if self._timeout_s is None:
            return await call()
        work = asyncio.ensure_future(call())
        alarm = asyncio.ensure_future(self._clock.sleep(self._timeout_s))
        try:
            done, _ = await asyncio.wait((work, alarm), return_when=asyncio.FIRST_COMPLETED)
            if work not in done:
                timeout = StorageTimeoutError(f"{operation} {key!r} exceeded {self._timeout_s}s")
                self.availability.failed(timeout)  # the store never answered it
                raise timeout
            return work.result()
        finally:
            alarm.cancel()
            work.cancel()  # no-op when finished; else wait for it to unwind so it cannot act later
            await asyncio.gather(work, alarm, return_exceptions=True)
