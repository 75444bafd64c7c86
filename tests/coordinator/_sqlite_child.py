"""A child process for the SQLite crash and multi-process tests.

    python -m tests.coordinator._sqlite_child DB JOURNAL BROKER_ID SEED COMMITS

Commits objects of random batches in a loop (forever when COMMITS is 0). Before each commit it
appends `I key batch_count` to JOURNAL, and after the commit returns `A key results-json`, each
line fsynced, so the parent knows exactly what was acknowledged when it kills this process.
"""

from __future__ import annotations

import asyncio
import json
import os
import random
import sys

from diskless._types import TopicPartition
from diskless.coordinator import CommitBatch, SqliteBatchCoordinator

TOPIC = "crash"
PARTITIONS = 4


LINE_END = " $"
"""Ends every complete journal line: a line torn by SIGKILL lacks it and is not trusted."""


def _append(journal: int, line: str) -> None:
    os.write(journal, (line + LINE_END + "\n").encode())
    os.fsync(journal)


async def main(db: str, journal_path: str, broker_id: int, seed: int, commits: int) -> None:
    rng = random.Random(seed)
    coordinator = SqliteBatchCoordinator(db)
    journal = os.open(journal_path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    os.write(journal, b"\n")  # a previous incarnation may have died mid-line: start a new one
    try:
        await coordinator.create_topic(TOPIC, PARTITIONS)
        epoch = await coordinator.register_broker(broker_id)
        print("ready", flush=True)
        n = 0
        while commits == 0 or n < commits:
            key = f"b{broker_id}/s{seed}/{n:06d}"
            count = rng.randint(1, 50)
            batches = [
                CommitBatch(
                    topic_partition=TopicPartition(TOPIC, rng.randrange(PARTITIONS)),
                    byte_offset=i * 100,
                    size=100,
                    record_count=rng.randint(1, 10),
                    base_timestamp=0,
                    max_timestamp=0,
                    producer_id=-1,
                    producer_epoch=-1,
                    base_sequence=-1,
                )
                for i in range(count)
            ]
            _append(journal, f"I {key} {count}")
            outcome = await coordinator.commit_file(key, broker_id, epoch, count * 100, batches)
            results = outcome.batches
            acked = [
                [b.topic_partition.partition, r.base_offset, b.record_count, int(r.error)]
                for b, r in zip(batches, results, strict=True)
            ]
            _append(journal, f"A {key} {json.dumps(acked)}")
            n += 1
    finally:
        os.close(journal)
        await coordinator.close()


if __name__ == "__main__":
    db, journal_path, broker, seed, commits = sys.argv[1:6]
    asyncio.run(main(db, journal_path, int(broker), int(seed), int(commits)))
