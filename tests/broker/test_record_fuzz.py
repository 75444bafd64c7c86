"""Record-level fuzzing through a real `DisklessBroker`: hostile batches fail only their partition.

Each request carries a mutated batch for one partition and a valid batch for another. Every
accepted mutated batch must decode with kafka-python's independent codec (CRC and every record),
unless one of its records is where kafka-python departs from Kafka (`kafka_python_misreads`);
every refused one must fail alone, with a Kafka error code, while its neighbour is stored.
`DISKLESS_SIM_SEED=<seed>` replays one seed.
"""

from __future__ import annotations

import random
from collections import Counter

import pytest

from diskless import BrokerConfig, DisklessBroker
from diskless._types import ErrorCode, TopicPartition
from diskless.clock import SystemClock
from diskless.coordinator import InMemoryBatchCoordinator
from diskless.storage import MemoryObjectStore
from diskless.wal import WalConfig
from testkit.mutate import CODECS, build, decode, kafka_python_misreads, mutate

FAST = BrokerConfig(wal=WalConfig(commit_interval_ms=5, upload_attempts=1, upload_backoff_ms=0))
HOSTILE = TopicPartition("t", 0)
NEIGHBOUR = TopicPartition("t", 1)
REFUSALS = {
    ErrorCode.CORRUPT_MESSAGE,
    ErrorCode.INVALID_RECORD,
    ErrorCode.INVALID_TIMESTAMP,
    ErrorCode.MESSAGE_TOO_LARGE,
}


async def _fuzz(seed: int, rounds: int) -> Counter[str]:
    print(f"record fuzz seed {seed} (replay: DISKLESS_SIM_SEED={seed})")
    rng = random.Random(seed)
    clock = SystemClock()
    coordinator = InMemoryBatchCoordinator()
    await coordinator.create_topic("t", 2)
    outcomes: Counter[str] = Counter()
    broker = DisklessBroker(1, MemoryObjectStore(), coordinator, FAST, clock=clock)
    async with broker:
        for _ in range(rounds):
            now = clock.now_ms()
            codec = rng.choice(CODECS)
            valid = build(now, codec, rng.randrange(1, 8), rng=rng)
            kind, hostile = mutate(rng, valid)
            neighbour = build(now, rng.choice(CODECS), 3, rng=rng)
            results = await broker.produce({HOSTILE: hostile, NEIGHBOUR: neighbour})
            assert results[NEIGHBOUR].error == ErrorCode.NONE, (kind, results[NEIGHBOUR])
            error = results[HOSTILE].error
            if error == ErrorCode.NONE:
                if kafka_python_misreads(hostile):  # where Kafka and kafka-python disagree
                    outcomes[f"{kind}: accepted, kafka-python misreads"] += 1
                    continue
                decode(hostile)  # accepted: kafka-python must read every record
                outcomes[f"{kind}: accepted"] += 1
            else:
                assert error in REFUSALS, (kind, results[HOSTILE])
                outcomes[f"{kind}: {error.name}"] += 1
    await coordinator.close()
    print(dict(sorted(outcomes.items())))
    return outcomes


@pytest.mark.seeds(3)
async def test_hostile_records_fail_only_their_partition(seed: int) -> None:
    outcomes = await _fuzz(seed, 150)
    assert any(":" in k and not k.endswith("accepted") for k in outcomes)  # it did refuse some


@pytest.mark.slow
@pytest.mark.seeds(20, first=1000)
async def test_hostile_records_fail_only_their_partition_long(seed: int) -> None:
    await _fuzz(seed, 2000)
