"""What stops a broker process from starting, each said in one line with an exit status of its
own, and the waits and checks before its brokers start.

A misconfigured broker meets its operator at its start: a port in use, a wrong PostgreSQL
password, a bucket that does not exist. Each is one log line at ERROR, in the process's log
format (a collector parses it like any other), naming what is wrong, and an exit status a
supervisor or a script can tell apart; never a traceback.

Before any broker starts, the process
- waits for the coordinator (`wait_for_coordinator`): a PostgreSQL server that is down or does
  not answer yet is waited for, up to `initial.broker.registration.timeout.ms` (Kafka's bound
  on a broker's wait for its controller, 60 s by default), with one line when the wait starts
  and one when it ends; a refused password, a missing privilege or a failed TLS handshake stop
  the start at once, as waiting would not change them;
- checks that the object store takes writes (`check_store`): a probe object written and deleted
  where the WAL's objects go, which finds a missing bucket, refused credentials, a certificate
  that does not verify and a directory that cannot be written.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import errno
import logging
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Final

from diskless._object_keys import probe_key
from diskless.coordinator import BatchCoordinator
from diskless.errors import (
    CoordinatorAuthenticationError,
    CoordinatorError,
    CoordinatorPrivilegeError,
    CoordinatorTimeoutError,
    CoordinatorTlsError,
    StorageBucketMissingError,
    StorageCredentialsError,
    StorageError,
    StorageNotWritableError,
    StorageTlsError,
)
from diskless.storage import LocalObjectStore, ObjectStore

_log = logging.getLogger("diskless.kafka_server.startup")
_AVAILABILITY_LOG: Final = logging.getLogger("diskless.availability")

COORDINATOR_WAIT_MS_DEFAULT: Final = 60_000
"""Kafka's `initial.broker.registration.timeout.ms` default."""
COORDINATOR_WAIT_MS_MAX: Final = 24 * 3600 * 1000
RETRY_DELAY_S_MAX: Final = 2.0

EXIT_FAILED: Final = 1
EXIT_USAGE: Final = 2
EXIT_ADDRESS_IN_USE: Final = 3
EXIT_COORDINATOR_UNREACHABLE: Final = 10
EXIT_COORDINATOR_AUTHENTICATION: Final = 11
EXIT_COORDINATOR_PRIVILEGE: Final = 12
EXIT_COORDINATOR_TLS: Final = 13
EXIT_COORDINATOR_TIMEOUT: Final = 14
EXIT_STORE_BUCKET_MISSING: Final = 20
EXIT_STORE_CREDENTIALS: Final = 21
EXIT_STORE_TLS: Final = 22
EXIT_STORE_NOT_WRITABLE: Final = 23
EXIT_STORE_FAILED: Final = 24

_KINDS: Final[list[tuple[type[BaseException], int, str]]] = [
    # (error, exit status, what it means); the first that matches, so subclasses first
    (CoordinatorAuthenticationError, EXIT_COORDINATOR_AUTHENTICATION,
     "the coordinator refused the credentials"),
    (CoordinatorPrivilegeError, EXIT_COORDINATOR_PRIVILEGE,
     "the coordinator's role lacks a privilege"),
    (CoordinatorTlsError, EXIT_COORDINATOR_TLS, "TLS to the coordinator failed"),
    (CoordinatorTimeoutError, EXIT_COORDINATOR_TIMEOUT, "the coordinator timed out"),
    (CoordinatorError, EXIT_COORDINATOR_UNREACHABLE, "the coordinator is unreachable"),
    (StorageBucketMissingError, EXIT_STORE_BUCKET_MISSING, "the S3 bucket does not exist"),
    (StorageCredentialsError, EXIT_STORE_CREDENTIALS, "the object store refused the credentials"),
    (StorageTlsError, EXIT_STORE_TLS, "the object store's certificate verify failed"),
    (StorageNotWritableError, EXIT_STORE_NOT_WRITABLE, "the objects directory is not writable"),
    (StorageError, EXIT_STORE_FAILED, "the object store failed"),
]  # fmt: skip


class StartupFailure(Exception):
    """The start failed: `message` is its one line, `status` the process's exit status."""

    def __init__(self, message: str, status: int) -> None:
        super().__init__(message)
        self.message = message
        self.status = status


def wait_ms(spec: str) -> int:
    """The command line's `--initial-broker-registration-timeout-ms`."""
    try:
        value = int(spec)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected an integer, got {spec!r}") from None
    if not 0 <= value <= COORDINATOR_WAIT_MS_MAX:
        raise argparse.ArgumentTypeError(
            f"{value} is outside the allowed range [0, {COORDINATOR_WAIT_MS_MAX}]"
        )
    return value


def failure_of(error: BaseException) -> StartupFailure:
    """The start-up failure `error` is, in one line."""
    if isinstance(error, StartupFailure):
        return error
    detail = _one_line(error)
    for kind, status, meaning in _KINDS:
        if isinstance(error, kind):
            return StartupFailure(f"cannot start: {meaning}: {detail}", status)
    if isinstance(error, OSError) and error.errno == errno.EADDRINUSE:
        return StartupFailure(f"cannot start: address in use: {detail}", EXIT_ADDRESS_IN_USE)
    return StartupFailure(f"cannot start: {type(error).__name__}: {detail}", EXIT_FAILED)


def report(failure: StartupFailure) -> None:
    """Log the failure's one line (the process then exits with its status)."""
    _log.error("%s", failure.message)


def local_store(path: Path) -> LocalObjectStore:
    """The objects directory's store; a directory that cannot be made is not writable."""
    try:
        return LocalObjectStore(path)
    except OSError as error:
        raise failure_of(
            StorageNotWritableError(f"cannot create {str(path)!r}: {error.strerror or error}")
        ) from None


async def check_store(store: ObjectStore, prefix: str, broker_id: int) -> None:
    """Write and delete the probe object of `broker_id` under `prefix` (the WAL's)."""
    key = probe_key(prefix, broker_id)
    try:
        with _quiet(_AVAILABILITY_LOG):
            await store.put(key, b"")
            await store.delete_many([key])
    except StorageError as error:
        raise failure_of(error) from None


def unobserved(reason: str) -> None:
    """A `waiting` that tells nobody (no readiness endpoint)."""


async def wait_for_coordinator(
    coordinator: BatchCoordinator,
    wait_ms: int,
    waiting: Callable[[str], None] = unobserved,
) -> None:
    """Reach `coordinator`, retrying for up to `wait_ms` while it is unreachable or does not
    answer; `waiting(reason)` is told why each time it is not reached yet."""
    loop = asyncio.get_running_loop()
    started = loop.time()
    deadline = started + wait_ms / 1000
    delay = 0.1
    announced = False
    while True:
        try:
            await coordinator.connect()
        except (
            CoordinatorAuthenticationError,
            CoordinatorPrivilegeError,
            CoordinatorTlsError,
        ) as error:
            raise failure_of(error) from None
        except CoordinatorError as error:
            failure = failure_of(error)
            waiting(f"waiting for the coordinator: {_one_line(error)}")
            if loop.time() + delay > deadline:
                raise StartupFailure(
                    f"{failure.message} (gave up after {loop.time() - started:.1f} s,"
                    f" initial.broker.registration.timeout.ms={wait_ms})",
                    failure.status,
                ) from None
            if not announced:
                _log.warning(
                    "waiting up to %.1f s for the coordinator: %s", wait_ms / 1000, _one_line(error)
                )
                announced = True
            await asyncio.sleep(delay)
            delay = min(delay * 2, RETRY_DELAY_S_MAX)
            continue
        if announced:
            _log.warning("coordinator reached after %.1f s", loop.time() - started)
        return


@contextlib.contextmanager
def _quiet(logger: logging.Logger) -> Iterator[None]:
    """Drop `logger`'s records in the block: a check's failure is the check's to say, and the
    store's availability saying it too ("object store unreachable") would be a second line of
    the same failure, before any broker runs (nothing else calls the store yet)."""
    drop = logging.Filter("-")  # a name no record has: every record is dropped
    logger.addFilter(drop)
    try:
        yield
    finally:
        logger.removeFilter(drop)


def _one_line(error: BaseException) -> str:
    return " ".join(str(error).split()) or type(error).__name__
