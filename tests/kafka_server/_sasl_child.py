"""A broker process of its own for the SASL tests: one broker of a cluster whose SCRAM
credentials, topics and objects it shares with the test's process through the batch coordinator
and a local object directory.

    python -m tests.kafka_server._sasl_child sqlite:PATH|postgres:DSN OBJECT_DIR BROKER_ID

Prints `bootstrap.servers=HOST:PORT` once it serves, then serves until its stdin closes.
"""

from __future__ import annotations

import asyncio
import sys

from diskless.coordinator import (
    BatchCoordinator,
    PostgresBatchCoordinator,
    SqliteBatchCoordinator,
)
from diskless.storage import LocalObjectStore
from testkit.cluster import local_cluster
from testkit.sasl import sasl_server_config


def open_coordinator(spec: str) -> BatchCoordinator:
    kind, _, where = spec.partition(":")
    if kind == "sqlite":
        return SqliteBatchCoordinator(where)
    return PostgresBatchCoordinator(where)


async def main(spec: str, objects: str, broker_id: int) -> None:
    coordinator = open_coordinator(spec)
    store = LocalObjectStore(objects)
    async with local_cluster(
        coordinator,
        store=store,
        brokers=1,
        racks=1,
        broker_ids=[broker_id],
        server_config=sasl_server_config(),
    ) as cluster:
        print(f"bootstrap.servers={cluster.servers[broker_id].bootstrap}", flush=True)
        await asyncio.to_thread(sys.stdin.read)
    await coordinator.close()
    await store.close()


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1], sys.argv[2], int(sys.argv[3])))
