"""Keeping a process's copy of something the coordinator holds current: the loop the ACL and
SCRAM caches share.

A cache is refreshed every `interval_ms`. A refresh that fails is retried sooner than that, after
`RETRY_MS_MIN`, doubling up to `RETRY_MS_MAX` (and never beyond `interval_ms`): a change made
while the coordinator was away, or just before it went (a revoked ACL, a deleted user), takes
effect within `RETRY_MS_MAX` plus one read of a coordinator that is back, instead of a whole
interval after the first failed attempt, and an outage costs a bounded rate of attempts.

A run of failures is logged once, when it starts (a dependency's failure at DEBUG, as
`log_failure` does, since the coordinator's own availability reports the outage), and once
when a refresh works again: never a line per retry.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from typing import Final, Generic, Protocol, TypeVar

from diskless._availability import is_dependency_failure, log_failure
from diskless.clock import Clock, SystemClock
from diskless.coordinator import BatchCoordinator
from diskless.errors import DisklessError

_log = logging.getLogger(__name__)

RETRY_MS_MIN: Final = 50
"""The first retry after a failed refresh."""
RETRY_MS_MAX: Final = 250
"""The longest wait between failed refreshes: the bound, beyond one read, on how late a change
takes effect once the coordinator answers again."""
assert 0 < RETRY_MS_MIN <= RETRY_MS_MAX


def retry_delays_ms(interval_ms: int) -> list[int]:
    """The waits after 1, 2, ... consecutive failures, until they stop growing."""
    ceiling = min(RETRY_MS_MAX, interval_ms)
    delays = [min(RETRY_MS_MIN, ceiling)]
    while delays[-1] < ceiling:
        delays.append(min(delays[-1] * 2, ceiling))
    return delays


class Refresher:
    """`start` (the loop; the first load is the owner's), `close`. `refresh` raises the
    coordinator's errors (`DisklessError`)."""

    def __init__(
        self,
        what: str,
        refresh: Callable[[], Awaitable[None]],
        interval_ms: int,
        clock: Clock | None = None,
    ) -> None:
        if interval_ms < 1:
            raise ValueError("interval_ms must be >= 1")
        self._what = what
        self._refresh = refresh
        self._interval_ms = interval_ms
        self._retries_ms = retry_delays_ms(interval_ms)
        self._clock: Clock = clock if clock is not None else SystemClock()
        self._task: asyncio.Task[None] | None = None
        self.failures = 0
        """Consecutive failed refreshes (0: the last one worked)."""
        self._recovery_level = logging.DEBUG

    def start(self) -> None:
        if self._task is None:
            self._task = asyncio.create_task(self._forever())

    async def close(self) -> None:
        task, self._task = self._task, None
        if task is not None:
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)

    def _delay_ms(self) -> int:
        if not self.failures:
            return self._interval_ms
        return self._retries_ms[min(self.failures, len(self._retries_ms)) - 1]

    async def _forever(self) -> None:
        while True:
            await self._clock.sleep(self._delay_ms() / 1000)
            try:
                await self._refresh()
            except DisklessError as error:
                if not self.failures:
                    log_failure(
                        _log, error, "%s: refreshing from the coordinator failed", self._what
                    )
                    dependency = is_dependency_failure(error)
                    self._recovery_level = logging.DEBUG if dependency else logging.WARNING
                self.failures += 1
                continue
            if self.failures:
                _log.log(
                    self._recovery_level,
                    "%s: refreshing from the coordinator works again (after %d failed attempts)",
                    self._what,
                    self.failures,
                )
            self.failures = 0


class Versioned(Protocol):
    @property
    def version(self) -> int: ...


SnapshotT = TypeVar("SnapshotT", bound=Versioned)


class ForwardCopy(Generic[SnapshotT]):
    """A process's copy of state the coordinator versions (the security version: ACLs and SCRAM
    credentials), refreshed by a `Refresher`, that only moves forward: a refresh reads the
    snapshot only when the coordinator's version is newer than the copy's, and a snapshot no
    newer than the copy (a slow read overtaken by a change loaded here) is dropped. A subclass
    says how to read its snapshot (`_read`) and how to take one (`_take`)."""

    def __init__(
        self, what: str, coordinator: BatchCoordinator, refresh_ms: int, clock: Clock | None
    ) -> None:
        self._what = what
        self._coordinator = coordinator
        self._refresher = Refresher(what, self.refresh, refresh_ms, clock)
        self._version: int | None = None
        self._lock = asyncio.Lock()

    @property
    def version(self) -> int | None:
        """The version the copy is (None before the first load)."""
        return self._version

    @property
    def failed_refreshes(self) -> int:
        """Consecutive failed refreshes (0: the last one worked)."""
        return self._refresher.failures

    async def close(self) -> None:
        await self._refresher.close()

    async def refresh(self) -> None:
        """Load the snapshot if the coordinator's version is newer than the copy's. Raises the
        coordinator's errors."""
        async with self._lock:
            if not self._newer(await self._coordinator_version()):
                return
            snapshot = await self._read()
            if not self._newer(snapshot.version):
                _log.debug(
                    "%s: kept version %s over an older read of version %d",
                    self._what,
                    self._version,
                    snapshot.version,
                )
                return
            self._take(snapshot)
            self._version = snapshot.version

    def _newer(self, version: int) -> bool:
        return self._version is None or version > self._version

    async def _coordinator_version(self) -> int:
        """The coordinator's version of what the copy holds (the security version unless a
        subclass says otherwise)."""
        return await self._coordinator.acl_version()

    async def _read(self) -> SnapshotT:
        raise NotImplementedError

    def _take(self, snapshot: SnapshotT) -> None:
        """Replace the copy with `snapshot` (newer than it); `_version` is still the old one."""
        raise NotImplementedError
