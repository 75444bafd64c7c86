"""Run an async job every period on an injected clock, in one task that `close` ends."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from types import TracebackType
from typing import Self

from diskless._availability import log_failure
from diskless.clock import Clock
from diskless.errors import DisklessError

logger = logging.getLogger(__name__)


class Periodic:
    """Calls `job` now and then every `period_s` (start to start) until closed.

    Infrastructure failures (DisklessError) are logged and the loop goes on: the next run retries.
    Any other exception is a bug and ends the loop; `close` re-raises it.
    """

    def __init__(
        self, name: str, job: Callable[[], Awaitable[object]], period_s: float, clock: Clock
    ) -> None:
        assert period_s > 0, period_s
        self._name = name
        self._job = job
        self._period_s = period_s
        self._clock = clock
        self._task: asyncio.Task[None] | None = None
        self._closed = False
        self.only_when: Callable[[], bool] | None = None
        """Checked before each run: while it answers False the run is skipped (another process
        has the duty), and the loop goes on."""

    @property
    def running(self) -> bool:
        return self._task is not None and not self._task.done()

    def start(self) -> None:
        """Start the loop in a background task (once)."""
        if self._closed:
            raise RuntimeError(f"{self._name} is closed")
        if self._task is not None:
            raise RuntimeError(f"{self._name} already started")
        self._task = asyncio.get_running_loop().create_task(self.run_forever(), name=self._name)

    async def run_forever(self) -> None:
        """Run the job every period until cancelled."""
        while True:
            started = self._clock.monotonic()
            try:
                if self.only_when is None or self.only_when():
                    await self._job()
            except DisklessError as error:
                log_failure(logger, error, "%s: run failed; retrying next period", self._name)
            task = asyncio.current_task()
            if task is not None and task.cancelling():
                # The job was cancelled but answered with an error or a result (a layer below
                # swallowed the cancellation): stop now, or `close` would wait forever.
                raise asyncio.CancelledError
            elapsed = self._clock.monotonic() - started
            await self._clock.sleep(max(0.0, self._period_s - elapsed))

    async def close(self) -> None:
        """Stop the loop and wait for it to end; idempotent."""
        self._closed = True
        task, self._task = self._task, None
        if task is None:
            return
        task.cancel()
        try:
            await task
        except asyncio.CancelledError:
            current = asyncio.current_task()
            if current is not None and current.cancelling():
                raise  # our caller is being cancelled too: do not swallow that


class PeriodicService:
    """Start/stop plumbing of a service whose work is one `Periodic` job.

    The service's store and coordinator stay open on close: they belong to the caller.
    """

    _periodic: Periodic

    def start(self, *, only_when: Callable[[], bool] | None = None) -> None:
        """Run the job every period in a background task until `close`; with `only_when`, only
        the periods when it answers True (e.g. while this process holds a duty)."""
        self._periodic.only_when = only_when
        self._periodic.start()

    async def run_forever(self) -> None:
        """Run the job every period in the calling task until cancelled."""
        await self._periodic.run_forever()

    async def close(self) -> None:
        """Stop the background task (if any) and wait for it."""
        await self._periodic.close()

    async def __aenter__(self) -> Self:
        self.start()
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        await self.close()
