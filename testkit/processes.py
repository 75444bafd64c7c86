"""Broker processes (`python -m diskless.kafka_server`) for cluster tests: one broker each, on a
port of its own that survives a restart, so a killed process can come back where clients expect
it.

Each process is its own process group, stopped (SIGKILL) when the test ends whatever happened.
"""

from __future__ import annotations

import contextlib
import os
import resource
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Final

from testkit.ports import free_port
from testkit.s3server import S3_CREDENTIALS

START_TIMEOUT_S: Final = 60.0
STOP_TIMEOUT_S: Final = 30.0
S3_ENV: Final = {
    "AWS_ACCESS_KEY_ID": S3_CREDENTIALS["aws_access_key_id"],
    "AWS_SECRET_ACCESS_KEY": S3_CREDENTIALS["aws_secret_access_key"],
}


def run_in_bounded_memory(
    argv: Sequence[str], address_space: int, timeout_s: float, **kwargs: object
) -> subprocess.CompletedProcess[str]:
    """Run `argv` with its address space limited: a huge allocation then fails in that child
    (native code aborts it) instead of being granted lazily and growing into the OOM killer."""

    def limit() -> None:
        resource.setrlimit(resource.RLIMIT_AS, (address_space, address_space))

    return subprocess.run(  # type: ignore[call-overload, no-any-return]
        argv, capture_output=True, text=True, preexec_fn=limit, timeout=timeout_s, **kwargs
    )


class BrokerProcess:
    """Broker `broker_id` in a process of its own, serving on a fixed port."""

    def __init__(self, broker_id: int, racks: int, options: Sequence[str], log: Path) -> None:
        self.broker_id = broker_id
        self.port = free_port()
        self.address = f"127.0.0.1:{self.port}"
        self.rack = f"rack-{broker_id % racks}"
        self._argv = [
            sys.executable, "-m", "diskless.kafka_server",
            "--broker-ids", str(broker_id), "--racks", str(racks),
            "--base-port", str(self.port - broker_id),
            "--log-level", "WARNING",
            *options,
        ]  # fmt: skip
        self._log = log
        self.process: subprocess.Popen[str] | None = None
        self._reader: threading.Thread | None = None
        self.starts = 0

    def start(self) -> None:
        """Start the process and wait until it printed its bootstrap line (it serves then)."""
        assert self.process is None or self.process.poll() is not None
        self.starts += 1
        with self._log.open("a") as log:
            log.write(f"--- start {self.starts}\n")
        stderr = self._log.open("a")
        self.process = subprocess.Popen(
            self._argv,
            stdout=subprocess.PIPE,
            stderr=stderr,
            text=True,
            env={**os.environ, **S3_ENV, "PYTHONUNBUFFERED": "1"},
            start_new_session=True,
        )
        stderr.close()
        assert self.process.stdout is not None
        found = threading.Event()
        stdout = self.process.stdout

        def read() -> None:
            for line in stdout:
                if line.startswith("bootstrap.servers="):
                    found.set()
            # (the pipe is drained to its end, so the process never blocks on printing)

        self._reader = threading.Thread(target=read, daemon=True)
        self._reader.start()
        deadline = time.monotonic() + START_TIMEOUT_S
        while not found.wait(0.1):
            if self.process.poll() is not None or time.monotonic() > deadline:
                self.kill()
                raise AssertionError(f"broker {self.broker_id} did not start: {self.log_tail()}")

    def kill(self) -> None:
        """SIGKILL, as a crash: nothing is flushed or withdrawn."""
        if self.process is None:
            return
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.process.pid, signal.SIGKILL)
        self.process.wait(STOP_TIMEOUT_S)
        if self._reader is not None:
            self._reader.join(STOP_TIMEOUT_S)  # the pipe ended with the process
        if self.process.stdout is not None:
            self.process.stdout.close()

    def stop(self) -> int:
        """SIGTERM (a clean shutdown); the exit status."""
        assert self.process is not None
        self.process.send_signal(signal.SIGTERM)
        try:
            return self.process.wait(STOP_TIMEOUT_S)
        finally:
            self.kill()

    def log_tail(self, lines: int = 30) -> str:
        text = self._log.read_text(errors="replace") if self._log.exists() else ""
        return "\n".join(text.splitlines()[-lines:])


@contextlib.contextmanager
def broker_processes(
    count: int, directory: Path, options: Sequence[str], racks: int | None = None
) -> Iterator[list[BrokerProcess]]:
    """`count` started broker processes (ids 0..count-1, one rack each by default) with the
    same shared-part `options`; all killed on exit."""
    brokers = [
        BrokerProcess(i, racks or count, options, directory / f"broker-{i}.log")
        for i in range(count)
    ]
    try:
        for broker in brokers:
            broker.start()
        yield brokers
    finally:
        for broker in brokers:
            broker.kill()


def bootstrap(brokers: Sequence[BrokerProcess]) -> str:
    return ",".join(b.address for b in brokers)
