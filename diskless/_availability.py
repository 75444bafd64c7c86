"""Whether a dependency answers, as this process sees it: two log lines per outage, not one per
failed call.

While the coordinator or the object store is down, every call to it fails: produce requests,
the WAL's commits, registry renewals, lease releases, every periodic job. Were each caller to log
its failure, a few seconds of outage would write thousands of lines, and the one that matters
(when it started, when it ended) would drown. So every call reports its outcome to its
dependency's `Availability`, at the dependency's boundary (the coordinator's engine for every
operation, each object store backend for every request, and a caller that abandons a call past
its own deadline), and that object logs the state changes only: one WARNING when the dependency
stops answering, one when it answers again, with how long it was out and how many calls failed
meanwhile. Callers log a failure of a dependency at DEBUG (`log_failure`), where tracebacks go
too; a failure that is not a dependency's (a bug) stays at WARNING or above, in one line.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import Final

from diskless.errors import CoordinatorError, StorageError

_log: Final = logging.getLogger("diskless.availability")

SETTLE_S: Final = 1.0
"""An outage ends once the dependency has answered for this long without a failure in between:
right after a restart a few calls still fail (connections the crash broke), and a dependency that
fails every other call is not back. Failures within it extend the outage, not a new one."""


class Availability:
    """One dependency's state (answering or not) and the count of calls failed since it stopped.

    One per dependency per process: the coordinator and the object store each own theirs, and
    every broker of a process shares them. The state moves on the calls' reports only (no timer):
    down at the first failure, back at the first answer that comes `settle_s` after the first
    answer with no failure since. `clock` (monotonic seconds) is injectable for tests.
    """

    def __init__(
        self,
        dependency: str,
        *,
        settle_s: float = SETTLE_S,
        clock: Callable[[], float] = time.monotonic,
        logger: logging.Logger = _log,
    ) -> None:
        if settle_s < 0:
            raise ValueError(f"settle_s must be >= 0, got {settle_s}")
        self.dependency = dependency
        self._settle_s = settle_s
        self._clock = clock
        self._logger = logger
        self._down_since: float | None = None
        self._answering_since: float | None = None
        """While down: when the dependency answered first since the last failure."""
        self._failed_calls = 0
        self.outages = 0
        """Outages seen since creation (the current one included)."""

    @property
    def available(self) -> bool:
        return self._down_since is None

    @property
    def failed_calls(self) -> int:
        """Calls failed in the current outage; 0 while the dependency answers."""
        return self._failed_calls

    def answered(self) -> None:
        """A call got an answer (whatever it was): the dependency is reachable."""
        if self._down_since is None:
            return
        now = self._clock()
        if self._answering_since is None:
            self._answering_since = now
        if now - self._answering_since < self._settle_s:
            return
        self._logger.warning(
            "%s reachable again after %.1f s; %d calls failed meanwhile",
            self.dependency,
            self._answering_since - self._down_since,
            self._failed_calls,
        )
        self._down_since = self._answering_since = None
        self._failed_calls = 0

    def failed(self, error: BaseException) -> None:
        """A call got no answer (`error` says why): the first failure after an answer starts an
        outage."""
        self._answering_since = None
        if self._down_since is None:
            self._down_since = self._clock()
            self.outages += 1
            self._logger.warning(
                "%s unreachable (%r); calls fail until it answers again", self.dependency, error
            )
        self._failed_calls += 1
        self._logger.debug("%s call failed: %r", self.dependency, error)

    def report(self, error: BaseException | None) -> None:
        """A call's outcome: None or an answer (a missing object, a range outside it) is
        `answered`, a dependency's failure (`is_dependency_failure`) `failed`; anything else
        (a bug on this side) says nothing about the dependency."""
        if error is None:
            self.answered()
        elif is_dependency_failure(error):
            self.failed(error)
        elif isinstance(error, CoordinatorError | StorageError):
            self.answered()


def is_dependency_failure(error: BaseException) -> bool:
    """Whether `error` is a coordinator or object store that did not answer (which its
    `Availability` reports), rather than an answer (a missing object) or a bug."""
    return isinstance(error, CoordinatorError | StorageError) and error.retriable


def log_failure(
    logger: logging.Logger,
    error: BaseException,
    message: str,
    *args: object,
    level: int = logging.WARNING,
) -> None:
    """Log a failed call: `message % args` and the error, in one line. A dependency's failure
    goes at DEBUG (its `Availability` says the rest), anything else at `level`; the traceback
    only when the logger writes DEBUG."""
    effective = logging.DEBUG if is_dependency_failure(error) else level
    if not logger.isEnabledFor(effective):
        return
    traceback = error if logger.isEnabledFor(logging.DEBUG) else None
    logger.log(effective, f"{message}: %r", *args, error, exc_info=traceback)
