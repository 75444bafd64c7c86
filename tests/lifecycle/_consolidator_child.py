"""A child process for the consolidation crash test.

    python -m tests.lifecycle._consolidator_child DB OBJECTS

Runs one consolidation over the SQLite coordinator DB and the local store OBJECTS, whose store
kills this process with SIGKILL as soon as the first consolidated object is uploaded: between
the upload and the swap, where a crash leaves an orphan.
"""

from __future__ import annotations

import asyncio
import os
import signal
import sys

from diskless.coordinator import SqliteBatchCoordinator
from diskless.lifecycle import Consolidator, ConsolidatorConfig
from diskless.storage import ForwardingObjectStore, LocalObjectStore


class DieAfterUpload(ForwardingObjectStore):
    async def put(self, key: str, data: bytes | bytearray | memoryview) -> None:
        await super().put(key, data)
        os.kill(os.getpid(), signal.SIGKILL)


async def main(db: str, objects: str) -> None:
    coordinator = SqliteBatchCoordinator(db)
    store = DieAfterUpload(LocalObjectStore(objects))
    await Consolidator(store, coordinator, ConsolidatorConfig(age_ms=0)).run_once()
    raise SystemExit("the store should have killed this process")


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1], sys.argv[2]))
