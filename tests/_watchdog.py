"""The last resort against a test that never ends: dump what is stuck, then end the run.

pytest-timeout (`timeout` in pyproject.toml) fails a test that runs too long by raising in the
main thread, and the run goes on. That does not end every hang: pytest-timeout stops its timer as
soon as a test fails (its `pytest_exception_interact` hook), so nothing times the teardown after
a failure, its own included; and an asyncio test's teardown cancels the tasks the test left
behind and waits for them, forever if one of them never ends. The watchdog bounds each test's
whole run (set-up, call, teardown) at its pytest-timeout plus `GRACE_S`. Past that it writes the
test's reports so far and its captured output (a seed to replay, say), the asyncio tasks with the
chain of awaits each is stuck in, and every thread's stack, runs the exit handlers (which stop
the run's PostgreSQL server) and ends the process with status 1: CI fails at once with the
evidence rather than at its own time limit. `faulthandler` follows `FALLBACK_S` later (every
thread's stack, then exit) should the Python side be unable to run at all.
"""

from __future__ import annotations

import asyncio
import atexit
import faulthandler
import gc
import os
import threading
from collections.abc import Iterator
from types import FrameType
from typing import Any, Final, TextIO

import pytest
from pytest_timeout import is_debugging

GRACE_S: Final = 60.0
"""How long past its timeout a test's teardown may take."""
FALLBACK_S: Final = 30.0


class Watchdog:
    """One timer at a time; `out` is a copy of the terminal's stderr (pytest's capture, which
    redirects descriptor 2 during tests, would swallow the dump)."""

    def __init__(self, out: TextIO) -> None:
        self._out = out
        self._timer: threading.Timer | None = None
        self._reports: list[pytest.TestReport] = []

    def arm(self, item: pytest.Item, seconds: float) -> None:
        self.disarm()
        limit = seconds + GRACE_S
        faulthandler.dump_traceback_later(limit + FALLBACK_S, exit=True, file=self._out)
        self._timer = threading.Timer(limit, self._expire, (item, limit))
        self._timer.daemon = True
        self._timer.start()

    def disarm(self) -> None:
        faulthandler.cancel_dump_traceback_later()
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None

    def finish(self) -> None:
        """The test's teardown is over."""
        self.disarm()
        self._reports.clear()

    def note(self, report: pytest.TestReport) -> None:
        """A phase of the current test ended: its report is written if the watchdog fires."""
        self._reports.append(report)

    def close(self) -> None:
        self.disarm()
        self._out.close()

    def _expire(self, item: pytest.Item, limit: float) -> None:
        if is_debugging():  # in pdb, or a debugger is attached: as pytest-timeout, let it be
            return
        out = self._out
        out.write(f"\n\n*** watchdog: {item.nodeid} still running after {limit:.0f} s\n")
        try:
            self._write_output(item)
            _write_tasks(out)
        except Exception as error:  # best effort: the threads' stacks matter most
            out.write(f"(watchdog: {error!r})\n")
        out.write("\n*** threads\n")
        out.flush()
        faulthandler.dump_traceback(out, all_threads=True)
        out.write("\n*** watchdog: ending the run\n")
        out.flush()
        try:
            atexit._run_exitfuncs()
        finally:
            os._exit(1)

    def _write_output(self, item: pytest.Item) -> None:
        out = self._out
        for report in self._reports:
            out.write(f"\n*** {report.when}: {report.outcome}\n")
            for text in (report.longreprtext, report.capstdout, report.capstderr):
                if text:
                    out.write(text.rstrip("\n") + "\n")
        capture = item.config.pluginmanager.getplugin("capturemanager")
        if capture is not None:
            capture.suspend_global_capture(in_=True)
            stdout, stderr = capture.read_global_capture()
            if stdout or stderr:
                out.write("\n*** output of the phase under way\n" + stdout + stderr)


def _write_tasks(out: TextIO) -> None:
    """Every running loop's unfinished tasks, each with the coroutines it is suspended in."""
    loops = [o for o in gc.get_objects() if isinstance(o, asyncio.AbstractEventLoop)]
    for loop in loops:
        if not loop.is_running():
            continue
        tasks = asyncio.all_tasks(loop)
        out.write(f"\n*** {len(tasks)} asyncio tasks of {loop!r}\n")
        for task in tasks:
            out.write(f"{task!r}\n")
            for frame in _suspended_in(task.get_coro()):
                code = frame.f_code
                out.write(f"    {code.co_filename}:{frame.f_lineno} in {code.co_name}\n")


def _suspended_in(awaitable: Any) -> Iterator[FrameType]:
    """The frames of a coroutine and of those it awaits, outermost first (a task's own stack
    shows the outermost only)."""
    while awaitable is not None:
        frame = getattr(awaitable, "cr_frame", None) or getattr(awaitable, "gi_frame", None)
        if frame is None:
            return
        yield frame
        awaitable = getattr(awaitable, "cr_await", None) or getattr(awaitable, "gi_yieldfrom", None)
