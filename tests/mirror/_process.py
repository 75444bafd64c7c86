"""A mirror process (`python -m diskless.mirror`) for the acceptance tests: started, SIGKILLed,
started again; and the one-shot commands (`--stop`, `--status`)."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Final

from testkit.processes import S3_ENV

START_TIMEOUT_S: Final = 60.0


class MirrorProcess:
    def __init__(self, options: Sequence[str], log: Path) -> None:
        self._argv = [sys.executable, "-m", "diskless.mirror", *options]
        self._log = log
        self.process: subprocess.Popen[str] | None = None
        self.lines: list[str] = []
        self._reader: threading.Thread | None = None

    def start(self) -> None:
        """Start it and wait until it mirrors (it printed `mirroring`)."""
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
        mirroring = threading.Event()
        stdout = self.process.stdout

        def read() -> None:
            for line in stdout:
                self.lines.append(line.rstrip("\n"))
                if line.startswith("mirroring"):
                    mirroring.set()

        self._reader = threading.Thread(target=read, daemon=True)
        self._reader.start()
        deadline = time.monotonic() + START_TIMEOUT_S
        while not mirroring.wait(0.1):
            if self.process.poll() is not None or time.monotonic() > deadline:
                self.kill()
                raise AssertionError(f"the mirror did not start: {self.log_tail()}")

    def kill(self) -> None:
        if self.process is None:
            return
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.process.pid, signal.SIGKILL)
        self.process.wait(30)
        if self._reader is not None:
            self._reader.join(30)  # the pipe ended with the process
        if self.process.stdout is not None:
            self.process.stdout.close()

    def running(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def log_tail(self, lines: int = 30) -> str:
        text = self._log.read_text(errors="replace") if self._log.exists() else ""
        return "\n".join(text.splitlines()[-lines:])


def mirror_command(
    options: Sequence[str], timeout_s: float = 60.0
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "diskless.mirror", *options],
        capture_output=True,
        text=True,
        timeout=timeout_s,
        check=False,
        env={**os.environ, **S3_ENV},
    )
