"""A child process for the durable transaction-state tests.

    python -m tests.txn._txn_child DB MODE SEED

MODE `open`: opens a transaction of id "tx" on partition t-0, commits one transactional batch
in it, prints `READY pid epoch` and waits to be killed.
MODE `race`: one of two processes racing InitProducerId, AddPartitionsToTxn, EndTxn and the
timeout sweep on the same ids, over the same database, for a seeded schedule; prints `DONE`.
"""

from __future__ import annotations

import asyncio
import itertools
import os
import random
import sys

from diskless._types import ErrorCode, TopicPartition
from diskless.coordinator import SqliteBatchCoordinator
from diskless.txn import TransactionCoordinator
from testkit.commits import Committer, batch

TOPIC = "t"
PARTITIONS = 3
IDS = ("tx-a", "tx-b")
TIMEOUT_MS = 300


async def open_transaction(db: str) -> None:
    coordinator = SqliteBatchCoordinator(db)
    tc = TransactionCoordinator(coordinator)
    init = await tc.init_producer_id("tx", 60_000)
    pid, epoch = init.producer_id, init.producer_epoch
    tp = TopicPartition(TOPIC, 0)
    assert await tc.add_partitions_to_txn("tx", pid, epoch, [tp]) == [ErrorCode.NONE]
    (result,) = await Committer(coordinator).commit(
        [batch(tp, pid=pid, epoch=epoch, seq=0, count=3, txn=True)], key=f"child-{os.getpid()}"
    )
    assert result.error is ErrorCode.NONE, result
    print(f"READY {pid} {epoch}", flush=True)
    await asyncio.sleep(3600)


async def race(db: str, seed: int) -> None:
    rng = random.Random(seed)
    coordinator = SqliteBatchCoordinator(db)
    tc = TransactionCoordinator(coordinator)
    committer = Committer(coordinator, broker_id=seed % 1000 + 1)
    sequences: dict[tuple[int, int, int], int] = {}
    keys = itertools.count()
    try:
        for _ in range(40):
            tid = rng.choice(IDS)
            action = rng.random()
            if action < 0.15:
                await tc.abort_expired()
                continue
            init = await tc.init_producer_id(tid, TIMEOUT_MS)
            if init.error is not ErrorCode.NONE:
                continue
            pid, epoch = init.producer_id, init.producer_epoch
            tps = rng.sample([TopicPartition(TOPIC, p) for p in range(PARTITIONS)], 2)
            added = await tc.add_partitions_to_txn(tid, pid, epoch, tps)
            for tp, error in zip(tps, added, strict=True):
                if error is ErrorCode.NONE:
                    key = (pid, epoch, tp.partition)
                    seq = sequences.get(key, 0)
                    results = await committer.commit(
                        [batch(tp, pid=pid, epoch=epoch, seq=seq, count=2, txn=True)],
                        key=f"child-{os.getpid()}-{next(keys)}",
                    )
                    if results[0].error is ErrorCode.NONE:
                        sequences[key] = seq + 2
            await asyncio.sleep(rng.random() * 0.05)
            await tc.end_txn(tid, pid, epoch, commit=rng.random() < 0.5)
        print("DONE", flush=True)
    finally:
        await coordinator.close()


if __name__ == "__main__":
    database, mode, seed_text = sys.argv[1:4]
    asyncio.run(open_transaction(database) if mode == "open" else race(database, int(seed_text)))
