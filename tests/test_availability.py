"""Unit: a dependency's availability logs two lines per outage, whatever the number of failed calls
in it; callers log a dependency's failures at DEBUG (tracebacks only there), other failures as
before, in one line."""

from __future__ import annotations

import logging

import pytest

from diskless._availability import Availability, is_dependency_failure, log_failure
from diskless.errors import (
    CommitOutcomeUnknownError,
    CoordinatorUnavailableError,
    ObjectNotFoundError,
    StorageError,
    StorageTimeoutError,
)

LOGGER = "tests.availability"


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def _warnings(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]


@pytest.fixture
def clock() -> Clock:
    return Clock()


@pytest.fixture
def coordinator(clock: Clock) -> Availability:
    return Availability("coordinator", settle_s=1.0, clock=clock, logger=logging.getLogger(LOGGER))


def test_an_outage_is_two_warnings_with_its_duration_and_failed_calls(
    coordinator: Availability, clock: Clock, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG, LOGGER)
    coordinator.answered()
    assert coordinator.available and _warnings(caplog) == []
    for _ in range(250):
        coordinator.failed(CoordinatorUnavailableError("connection refused"))
        clock.now += 0.02  # 5 s of failures
    assert not coordinator.available
    assert coordinator.failed_calls == 250
    (down,) = _warnings(caplog)
    assert down.startswith("coordinator unreachable (CoordinatorUnavailableError(")
    assert "connection refused" in down
    coordinator.answered()  # answering again: back once it stays so for settle_s
    clock.now += 0.5
    coordinator.answered()
    assert not coordinator.available and len(_warnings(caplog)) == 1
    clock.now += 0.5
    coordinator.answered()
    assert coordinator.available
    assert _warnings(caplog)[1:] == [
        "coordinator reachable again after 5.0 s; 250 calls failed meanwhile"
    ]
    assert coordinator.failed_calls == 0 and coordinator.outages == 1
    # Per call: DEBUG only, one record each.
    debug = [r for r in caplog.records if r.levelno == logging.DEBUG]
    assert len(debug) == 250


def test_failures_while_settling_extend_the_outage_rather_than_start_one(
    coordinator: Availability, clock: Clock, caplog: pytest.LogCaptureFixture
) -> None:
    """Right after a restart some calls still fail (connections the crash broke)."""
    caplog.set_level(logging.WARNING, LOGGER)
    coordinator.failed(CoordinatorUnavailableError("down"))
    for _ in range(5):  # answers and failures interleaved: still one outage
        clock.now += 0.4
        coordinator.answered()
        clock.now += 0.4
        coordinator.failed(CommitOutcomeUnknownError("lost"))
    clock.now += 0.1
    coordinator.answered()
    clock.now += 1.0
    coordinator.answered()
    assert coordinator.available
    assert _warnings(caplog)[1:] == [
        "coordinator reachable again after 4.1 s; 6 calls failed meanwhile"
    ]
    assert coordinator.outages == 1
    coordinator.failed(CoordinatorUnavailableError("again"))  # a new outage
    assert coordinator.outages == 2 and len(_warnings(caplog)) == 3


def test_settle_zero_ends_an_outage_at_the_first_answer(
    clock: Clock, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, LOGGER)
    store = Availability("object store", settle_s=0, clock=clock, logger=logging.getLogger(LOGGER))
    store.failed(StorageTimeoutError("slow"))
    clock.now += 2.5
    store.answered()
    assert store.available
    assert (
        _warnings(caplog)[1] == "object store reachable again after 2.5 s; 1 calls failed meanwhile"
    )
    with pytest.raises(ValueError):
        Availability("x", settle_s=-1)


def test_report_tells_answers_from_failures(coordinator: Availability, clock: Clock) -> None:
    coordinator.report(ObjectNotFoundError("gone"))  # an answer: nothing changes
    assert coordinator.available
    coordinator.report(ValueError("a bug here"))  # says nothing about the dependency
    assert coordinator.available
    coordinator.report(CoordinatorUnavailableError("down"))
    assert not coordinator.available
    coordinator.report(ObjectNotFoundError("gone"))  # an answer, which starts settling
    clock.now += 1.0
    coordinator.report(None)
    assert coordinator.available
    assert is_dependency_failure(StorageError("x")) and is_dependency_failure(
        CommitOutcomeUnknownError("x")
    )
    assert not is_dependency_failure(ObjectNotFoundError("x"))
    assert not is_dependency_failure(RuntimeError("x"))


def _raised(error: Exception) -> Exception:
    try:
        raise error
    except Exception as caught:
        return caught


def test_log_failure_puts_a_dependency_failure_at_debug_and_tracebacks_only_there(
    caplog: pytest.LogCaptureFixture,
) -> None:
    logger = logging.getLogger(LOGGER)
    caplog.set_level(logging.INFO, LOGGER)
    log_failure(logger, _raised(CoordinatorUnavailableError("down")), "commit of %s failed", "k")
    assert caplog.records == []  # DEBUG, not written at INFO
    log_failure(logger, _raised(RuntimeError("bug")), "commit of %s failed", "k")
    (record,) = caplog.records
    assert record.levelno == logging.WARNING
    assert record.getMessage() == "commit of k failed: RuntimeError('bug')"
    assert record.exc_info is None  # no traceback above DEBUG
    caplog.clear()
    caplog.set_level(logging.DEBUG, LOGGER)
    log_failure(logger, _raised(StorageError("s3 down")), "upload of %s failed", "k")
    log_failure(logger, _raised(KeyError("bug")), "step failed", level=logging.ERROR)
    (storage, bug) = caplog.records
    assert storage.levelno == logging.DEBUG and storage.exc_info is not None
    assert bug.levelno == logging.ERROR and bug.exc_info is not None  # DEBUG on: with traceback
