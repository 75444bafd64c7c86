"""A child process for the PostgreSQL multi-process test.

    python -m tests.coordinator._postgres_child DSN BROKER_ID SEED COMMITS

Opens the coordinator on a database that may still be empty (every child migrates and creates
the topic at once), then commits COMMITS objects of random batches to overlapping partitions,
half of them from an idempotent producer of its own. Prints one JSON line per acknowledged
batch: [partition, base_offset, record_count, error].
"""

from __future__ import annotations

import asyncio
import json
import random
import sys

from diskless._types import TopicPartition
from diskless.coordinator import CommitBatch, PostgresBatchCoordinator

TOPIC = "shared"
PARTITIONS = 4


async def main(dsn: str, broker_id: int, seed: int, commits: int) -> None:
    rng = random.Random(seed)
    coordinator = PostgresBatchCoordinator(dsn, pool_size_max=2)
    sequences = [0] * PARTITIONS
    producer_id = 1000 + broker_id
    try:
        await coordinator.create_topic(TOPIC, PARTITIONS)
        epoch = await coordinator.register_broker(broker_id)
        for n in range(commits):
            batches = []
            for i in range(rng.randint(1, 20)):
                partition = rng.randrange(PARTITIONS)
                count = rng.randint(1, 5)
                idempotent = rng.random() < 0.5
                batches.append(
                    CommitBatch(
                        topic_partition=TopicPartition(TOPIC, partition),
                        byte_offset=i * 100,
                        size=100,
                        record_count=count,
                        base_timestamp=0,
                        max_timestamp=0,
                        producer_id=producer_id if idempotent else -1,
                        producer_epoch=0 if idempotent else -1,
                        base_sequence=sequences[partition] if idempotent else -1,
                    )
                )
                if idempotent:
                    sequences[partition] += count
            outcome = await coordinator.commit_file(
                f"b{broker_id}/{n:06d}", broker_id, epoch, len(batches) * 100, batches
            )
            results = outcome.batches
            for b, r in zip(batches, results, strict=True):
                line = [b.topic_partition.partition, r.base_offset, b.record_count, int(r.error)]
                print(json.dumps(line), flush=True)
    finally:
        await coordinator.close()


if __name__ == "__main__":
    dsn, broker, seed, commits = sys.argv[1:5]
    asyncio.run(main(dsn, int(broker), int(seed), int(commits)))
