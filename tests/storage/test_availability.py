"""Integration: every request of an object store backend reports its outcome to the store's
availability, which logs an outage as two lines whatever the number of failed requests; wrappers
share their inner store's, and a caller that gives up on a request reports it too.

Real failures: moto's S3 server stopped and started again on its port, a local store whose root
directory was replaced by a file.
"""

from __future__ import annotations

import asyncio
import logging
import shutil
from pathlib import Path

import pytest
from moto.server import ThreadedMotoServer

from diskless._availability import SETTLE_S
from diskless.clock import SystemClock
from diskless.errors import ObjectNotFoundError, StorageError, StorageTimeoutError
from diskless.storage import LocalObjectStore, ObjectStore, RetryingObjectStore
from testkit.ports import free_port
from testkit.s3server import create_bucket, s3_store

FAILED_CALLS = 4


def _outage_lines(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [
        r.getMessage()
        for r in caplog.records
        if r.name == "diskless.availability" and r.levelno >= logging.WARNING
    ]


async def _fail(store: ObjectStore, calls: int) -> None:
    for i in range(calls):
        with pytest.raises(StorageError):
            await store.put(f"k/{i}", b"x")


async def _recover(store: ObjectStore) -> None:
    await store.put("k/after", b"x")
    await asyncio.sleep(SETTLE_S)
    await store.put("k/after", b"y")


def _moto(port: int) -> ThreadedMotoServer:
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=port, verbose=False)
    server.start()
    return server


def _stop(server: ThreadedMotoServer) -> None:
    server.stop()
    if server._server is not None:
        server._server.server_close()


async def test_an_s3_server_that_stops_is_one_outage(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, "diskless.availability")
    port = free_port()
    endpoint = f"http://127.0.0.1:{port}"
    server = _moto(port)
    store = s3_store(endpoint, await create_bucket(endpoint), connect_timeout_s=1.0)
    try:
        await store.put("k/before", b"x")
        with pytest.raises(ObjectNotFoundError):  # an answer, not an outage
            await store.get("k/none")
        assert store.availability.available
        _stop(server)
        await _fail(store, FAILED_CALLS)
        assert not store.availability.available
        assert store.availability.failed_calls == FAILED_CALLS
        server = _moto(port)  # empty again: the bucket comes back first
        await create_bucket(endpoint, store._bucket)
        await _recover(store)
        assert store.availability.available
        down, back = _outage_lines(caplog)
        assert down.startswith("object store unreachable (StorageError('S3 put ")
        assert back.endswith(f"; {FAILED_CALLS} calls failed meanwhile")
    finally:
        await store.close()
        _stop(server)


async def test_a_local_store_whose_disk_fails_is_one_outage(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, "diskless.availability")
    store = LocalObjectStore(tmp_path / "objects")
    retrying = RetryingObjectStore(store, attempts=1)
    assert retrying.availability is store.availability  # wrappers share their inner store's
    await store.put("k/before", b"x")
    shutil.rmtree(tmp_path / "objects")
    (tmp_path / "objects").write_text("not a directory")
    await _fail(retrying, FAILED_CALLS)
    assert store.availability.failed_calls == FAILED_CALLS
    (tmp_path / "objects").unlink()
    (tmp_path / "objects").mkdir()
    await _recover(store)
    down, back = _outage_lines(caplog)
    assert down.startswith('object store unreachable (StorageNotWritableError("local put ')
    assert back.endswith(f"; {FAILED_CALLS} calls failed meanwhile")


class _Hanging(LocalObjectStore):
    async def put(self, key: str, data: bytes | bytearray | memoryview) -> None:
        await asyncio.Event().wait()


async def test_a_request_given_up_on_is_a_failure(tmp_path: Path) -> None:
    """The store never answered it: the caller's deadline reports it."""
    store = _Hanging(tmp_path)
    retrying = RetryingObjectStore(
        store, attempts=2, timeout_per_attempt_s=0.05, clock=SystemClock()
    )
    with pytest.raises(StorageTimeoutError):
        await retrying.put("k/1", b"x")
    assert not store.availability.available
    assert store.availability.failed_calls == 2
