"""The execution task's side of the consume phase: its reader process (`consumer`), started
while the producers' batches are built, told when the producers start, and waited for after
them, and the marker that says its producers are done.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import shutil
import sys
import tempfile
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Final

import msgspec

from benchmarks.harness.consumer import (
    CONSUMER_BROKER_ID_BASE,
    READY_LINE,
    STARTED_LINE,
    ConsumerPlan,
    ConsumerResult,
    done_key,
)
from benchmarks.harness.coordinators import is_shared
from benchmarks.harness.env import open_store
from benchmarks.harness.spec import RunSpec, WorkloadSpec
from benchmarks.harness.verify import spread
from benchmarks.harness.workload import all_partitions

READY_TIMEOUT_S: Final = 120.0
"""Starting the reader process: an interpreter, its imports, a broker registered."""
PRODUCERS_WAIT_S: Final = 300.0
"""Beyond the workload's duration: how long a reader waits for every task's producers, and
then for its members to catch up."""
STDERR_TAIL_BYTES: Final = 4000


def consuming(spec: WorkloadSpec, run: RunSpec) -> bool:
    """Whether the run has a consume phase: groups asked for, and a coordinator that a reader
    process can open (an in-memory one lives only in its execution task)."""
    return spec.consumer_groups > 0 and is_shared(run.coordinator)


class ConsumerProcess:
    """A running reader process beside an execution task."""

    def __init__(
        self, process: asyncio.subprocess.Process, directory: Path, plan: ConsumerPlan
    ) -> None:
        self._process = process
        self._directory = directory
        self._plan = plan

    @property
    def _result_path(self) -> Path:
        return self._directory / "result.json"

    def _stderr_tail(self) -> str:
        path = self._directory / "stderr"
        data = path.read_bytes()[-STDERR_TAIL_BYTES:] if path.exists() else b""
        return data.decode(errors="replace").strip()

    async def ready(self) -> None:
        """Wait for the reader's broker to run; RuntimeError (with its stderr) if it dies."""
        await self._expect(READY_LINE, "ready")

    async def start(self) -> None:
        """Start the reader's members and its measurement, and wait until they run: the
        producers start next, so the members see every batch arrive."""
        stdin = self._process.stdin
        assert stdin is not None
        stdin.write(b"go\n")
        await stdin.drain()
        stdin.close()
        await self._expect(STARTED_LINE, "started")

    async def _expect(self, wanted: str, state: str) -> None:
        stdout = self._process.stdout
        assert stdout is not None
        async with asyncio.timeout(READY_TIMEOUT_S):
            while True:
                line = await stdout.readline()
                if not line:
                    await self._process.wait()
                    raise RuntimeError(
                        f"the reader process exited ({self._process.returncode}) before it was "
                        f"{state}: {self._stderr_tail()}"
                    )
                if line.decode().strip() == wanted:
                    return

    async def finish(self) -> ConsumerResult:
        """Wait for the reader to end (after its idle windows) and return what it measured."""
        plan = self._plan
        # It waits for the other tasks' producers, then for its members, then idles twice.
        timeout_s = 2 * plan.producers_wait_s + 2 * plan.spec.consume_idle_s + READY_TIMEOUT_S
        async with asyncio.timeout(timeout_s):
            code = await self._process.wait()
        if code != 0 or not self._result_path.exists():
            raise RuntimeError(f"the reader process failed ({code}): {self._stderr_tail()}")
        return msgspec.json.decode(self._result_path.read_bytes(), type=ConsumerResult)


@contextlib.asynccontextmanager
async def reader_beside(
    task: int, rack: str, spec: WorkloadSpec, run: RunSpec
) -> AsyncIterator[ConsumerProcess]:
    """Start the reader process of execution task `task`; it is killed if still running when
    the block ends."""
    directory = Path(tempfile.mkdtemp(prefix="diskless-consumer-"))
    tasks = spec.effective_tasks
    plan = ConsumerPlan(
        task=task,
        tasks=tasks,
        broker_id=CONSUMER_BROKER_ID_BASE + task,
        rack=rack,
        groups=spec.consumer_groups,
        partitions=[
            (tp.topic, tp.partition)
            for tp in all_partitions(spec)
            if spread(tp.topic, tp.partition, tasks) == task
        ],
        spec=spec,
        run=run,
        result_path=str(directory / "result.json"),
        producers_wait_s=spec.duration_s + PRODUCERS_WAIT_S,
    )
    with (directory / "stderr").open("wb") as stderr:
        process = await asyncio.create_subprocess_exec(
            sys.executable,
            "-m",
            "benchmarks.harness.consumer",
            stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.PIPE,
            stderr=stderr,
            env=os.environ.copy(),
        )
    assert process.stdin is not None
    try:
        process.stdin.write(msgspec.json.encode(plan) + b"\n")
        await process.stdin.drain()
        yield ConsumerProcess(process, directory, plan)
    finally:
        if process.returncode is None:
            with contextlib.suppress(ProcessLookupError):
                process.kill()
            await process.wait()
        shutil.rmtree(directory, ignore_errors=True)


async def announce_done(run: RunSpec, task: int) -> None:
    """Put the marker saying that every producer of `task` has its answer."""
    store = open_store(run.store)
    try:
        await store.put(done_key(task), b"")
    finally:
        await store.close()
