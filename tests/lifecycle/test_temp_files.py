"""The file manager reclaims the temp file of an upload killed mid-write (a local store's)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from diskless import ManualClock
from diskless.coordinator import InMemoryBatchCoordinator
from diskless.lifecycle import FileManager
from diskless.storage import LocalObjectStore, MemoryObjectStore, RetryingObjectStore
from diskless.storage._local import TEMP_MARKER
from tests.lifecycle._helpers import GRACE_MS, PREFIX, TOPIC, config

UPLOAD_BYTES = 512 * 1024 * 1024  # big enough to be killed mid-write
_UPLOAD = """
import asyncio, sys
from diskless.storage import LocalObjectStore
asyncio.run(LocalObjectStore(sys.argv[1]).put(sys.argv[2], bytes(int(sys.argv[3]))))
"""


def _killed_upload(root: Path, key: str) -> Path:
    """Start a put in another process and SIGKILL it once its temp file exists."""
    directory = root.joinpath(*key.split("/")[:-1])
    before = set(directory.glob(TEMP_MARKER + "*"))
    child = subprocess.Popen([sys.executable, "-c", _UPLOAD, str(root), key, str(UPLOAD_BYTES)])
    try:
        deadline = time.monotonic() + 60
        while True:
            temps = list(set(directory.glob(TEMP_MARKER + "*")) - before)
            if temps and temps[0].stat().st_size > 0:
                break
            assert child.poll() is None, "the upload finished before it could be killed"
            assert time.monotonic() < deadline, "no temp file appeared"
            time.sleep(0.001)
    finally:
        child.send_signal(signal.SIGKILL)
        child.wait()
    [temp] = temps
    return temp


def _age(path: Path, seconds: float) -> None:
    then = time.time() - seconds
    os.utime(path, (then, then))


async def test_file_manager_removes_a_killed_uploads_temp_file(tmp_path: Path) -> None:
    root = tmp_path / "objects"
    local = LocalObjectStore(root, durable=False)
    store = RetryingObjectStore(local)  # reaches the local store through a wrapper
    await local.put(f"{PREFIX}kept", b"object")
    abandoned = _killed_upload(root, f"{PREFIX}killed")
    in_progress = _killed_upload(root, f"{PREFIX}recent")  # as young as a live upload
    _age(abandoned, GRACE_MS / 1000 + 60)
    assert not (root / PREFIX / "killed").exists()

    clock = ManualClock()
    coordinator = InMemoryBatchCoordinator(clock=clock, commit_age_max_ms=None)
    await coordinator.create_topic(TOPIC, 1)
    manager = FileManager(store, coordinator, config(temp_sweep_interval_ms=60_000), clock)
    report = await manager.run_cycle()
    assert report.errors == 0
    assert not abandoned.exists()
    assert in_progress.exists()  # within the grace: maybe still being written
    assert await local.get(f"{PREFIX}kept") == b"object"

    _age(in_progress, GRACE_MS / 1000 + 60)
    await manager.run_cycle()
    assert in_progress.exists()  # not due yet
    await clock.advance(60)
    await manager.run_cycle()
    assert not in_progress.exists()


async def test_stores_without_temp_files_have_nothing_to_reclaim() -> None:
    clock = ManualClock()
    store = MemoryObjectStore(clock)
    assert await store.remove_stale_temp_files(0) == 0
    coordinator = InMemoryBatchCoordinator(clock=clock, commit_age_max_ms=None)
    report = await FileManager(store, coordinator, config(), clock).run_cycle()
    assert report.errors == 0
