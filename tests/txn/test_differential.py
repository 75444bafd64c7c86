"""Differential (property-style): random transactional operations applied to both backends in
lockstep on one virtual clock; every answer and the resulting state must be identical.

Operations include the failure paths: unregistered batches, stale epochs, expired leases,
commits after the marker, markers without data, coordinator-epoch fencing.
"""

from __future__ import annotations

import os
import random
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import msgspec
import pytest

from diskless._types import IsolationLevel, OffsetSpec, TopicPartition
from diskless.clock import ManualClock
from diskless.coordinator import (
    BatchCoordinator,
    FindBatchesRequest,
    InMemoryBatchCoordinator,
    LeaseRequest,
    ListOffsetsRequest,
    SqliteBatchCoordinator,
)
from testkit.commits import batch

PARTITIONS = [TopicPartition("d", p) for p in range(3)]
PRODUCERS = [1, 2, 3]
STEPS = 150
SEEDS = [int(os.environ["DISKLESS_SEED"])] if "DISKLESS_SEED" in os.environ else [1, 2, 3]


@pytest.mark.parametrize("seed", SEEDS)
async def test_backends_agree_on_random_transactional_operations(seed: int, tmp_path: Path) -> None:
    print(f"seed {seed}")
    rng = random.Random(seed)
    clock = ManualClock()
    backends: list[BatchCoordinator] = [
        InMemoryBatchCoordinator(clock=clock),
        SqliteBatchCoordinator(tmp_path / "d.db", clock=clock),
    ]
    keys = iter(range(1_000_000))

    async def both(call: Callable[[BatchCoordinator], Awaitable[Any]]) -> Any:
        outcomes = []
        for backend in backends:
            try:
                outcomes.append(("ok", await call(backend)))
            except Exception as error:
                outcomes.append(("raised", type(error).__name__))
        assert outcomes[0] == outcomes[1], outcomes
        return outcomes[0][1]

    try:
        await both(lambda c: c.create_topic("d", len(PARTITIONS)))
        broker_epoch = await both(lambda c: c.register_broker(1))
        epochs = dict.fromkeys(PRODUCERS, 0)
        sequences: dict[tuple[int, TopicPartition], int] = {}
        leases: dict[int, list[tuple[TopicPartition, int]]] = {pid: [] for pid in PRODUCERS}
        for _ in range(STEPS):
            pid = rng.choice(PRODUCERS)
            epoch = epochs[pid] - (1 if rng.random() < 0.1 else 0)  # sometimes stale
            tps = rng.sample(PARTITIONS, k=rng.randint(1, 2))
            op = rng.random()
            if op < 0.2:
                await both(lambda c, p=pid, e=epoch, t=tps: c.add_partitions_to_txn(p, e, t))
            elif op < 0.4:
                got = await both(
                    lambda c, p=pid, e=epoch, t=tps: c.acquire_txn_leases(
                        1, broker_epoch, [LeaseRequest(tp, p, e) for tp in t], 5_000
                    )
                )
                leases[pid].extend((tp, r.lease_id) for tp, r in zip(tps, got, strict=True))
            elif op < 0.7:
                batches = []
                for tp in tps:
                    seq = sequences.get((pid, tp), 0)
                    count = rng.randint(1, 3)
                    b = batch(tp, pid=pid, epoch=epoch, seq=seq, count=count, txn=True)
                    held = [lease for t, lease in leases[pid] if t == tp and lease >= 0]
                    if held and rng.random() < 0.8:
                        b = msgspec.structs.replace(b, lease_id=rng.choice(held))
                    batches.append(b)
                    sequences[(pid, tp)] = seq + count
                if rng.random() < 0.2:
                    batches.append(batch(rng.choice(PARTITIONS), count=2))
                key = f"d/{next(keys)}"
                outcome = await both(
                    lambda c, k=key, bs=batches: c.commit_file(k, 1, broker_epoch, 100, bs)
                )
                results = outcome.batches
                for b, r in zip(batches, results, strict=True):
                    if b.producer_id >= 0 and r.error != 0:
                        sequences[(pid, b.topic_partition)] = b.base_sequence  # resend it later
            elif op < 0.9:
                commit = rng.random() < 0.5
                coordinator_epoch = rng.choice([0, 0, 1])
                # Past every lease first, so that neither backend waits and both markers carry
                # the same time (waiting is covered by the barrier tests).
                await clock.advance(5.001)
                results = [
                    await c.write_txn_markers(pid, epoch, epoch + 1, commit, coordinator_epoch, tps)
                    for c in backends
                ]
                assert results[0] == results[1], results
                if epoch == epochs[pid]:
                    epochs[pid] += 1
                    for tp in PARTITIONS:
                        sequences.pop((pid, tp), None)
                    leases[pid] = []
            else:
                await clock.advance(rng.choice([0.5, 3.0, 6.0]))  # leases may expire
            for isolation in IsolationLevel:
                await both(
                    lambda c, i=isolation: c.find_batches(
                        [FindBatchesRequest(tp, 0, 1 << 20, i) for tp in PARTITIONS], 1 << 30
                    )
                )
                await both(
                    lambda c, i=isolation: c.list_offsets(
                        [ListOffsetsRequest(tp, OffsetSpec.LATEST, i) for tp in PARTITIONS]
                    )
                )
            for tp in PARTITIONS:
                await both(lambda c, t=tp: c.describe_producers(t))
    finally:
        for backend in backends:
            await backend.close()
