"""Where a Spark task ran, so a report shows whether the work really was spread over a cluster.

In standalone mode each executor starts in `<worker work dir>/<application id>/<executor id>/`
and its Python workers inherit that directory, so the working directory names the executor; in
local mode it is the driver's own.
"""

from __future__ import annotations

import os
import re
import socket
from typing import Final

import msgspec

_EXECUTOR_DIR: Final = re.compile(r"/(app-[0-9]+-[0-9]+)/([0-9]+)/?$")


class TaskPlace(msgspec.Struct, frozen=True, kw_only=True):
    host: str
    pid: int
    work_dir: str

    @property
    def executor(self) -> str:
        """The executor id on a standalone cluster, 'driver' in local mode."""
        match = _EXECUTOR_DIR.search(self.work_dir)
        return match.group(2) if match else "driver"

    def __str__(self) -> str:
        return f"executor {self.executor} on {self.host} (pid {self.pid})"


def here() -> TaskPlace:
    return TaskPlace(host=socket.gethostname(), pid=os.getpid(), work_dir=os.getcwd())
