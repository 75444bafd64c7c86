"""A broker process for the share-partition fault oracle (`test_share_faults.py`).

    python -m tests.coordinator._share_child BACKEND TARGET JOURNAL BROKER_ID SEED RECORDS

BACKEND is sqlite (TARGET: the database file) or postgres (TARGET: a DSN); RECORDS were produced
to each partition before. Until it is killed, `MEMBERS` members of one share group, each an
asyncio task, take turns at what a share consumer does, through one `ShareStepQueue` (so
concurrent requests share a step): acquire from both partitions (at the log start it reads
first, which the test moves with DeleteRecords), hold the records a while (now and then past
their lock), acknowledge them with random types (some left to run out, now and then with a
record the member does not hold, which fails the partition's whole acknowledgement), and now and
then leave (its session closes: what it holds is released) and come back as a new member.
Coordinator failures (the server killed and restarted) are journalled and the member goes on.

The journal: before each request one line `{"i": n, "k": kind, "m": member, "t0": ms, ...}`,
after its answer `{"i": n, "t1": ms, "a": answer}` (or `"e": error` when it failed, so its
outcome is unknown), each written whole with one `os.write`, so a SIGKILL leaves at most a torn
last line. Times are the coordinator's clock (this process's wall clock, as `SystemClock`): an
answered request's step ran within [t0, t1].
"""

from __future__ import annotations

import asyncio
import json
import os
import random
import sys
import time
from collections.abc import Callable
from typing import Any, Final

from diskless._types import ErrorCode, TopicPartition
from diskless.coordinator import (
    AcknowledgeBatch,
    AcknowledgeType,
    BatchCoordinator,
    PostgresBatchCoordinator,
    ShareAcknowledge,
    ShareAcquire,
    ShareFetchPartition,
    ShareLimits,
    ShareRelease,
    ShareStepQueue,
    SqliteBatchCoordinator,
)
from diskless.errors import CoordinatorError

TOPIC: Final = "queue"
GROUP: Final = "share"
PARTITIONS: Final = 2
LIMITS: Final = ShareLimits(delivery_count_limit=3, lock_duration_ms=1_500, max_record_locks=40)
MEMBERS: Final = 3
LEAVE_CHANCE: Final = 0.06
STRAY_CHANCE: Final = 0.08
"""That an acknowledgement also names a record the member does not hold."""
UNACKED_CHANCE: Final = 0.1
"""That a held record is left to its lock."""
KINDS: Final = (
    (AcknowledgeType.ACCEPT, 0.6),
    (AcknowledgeType.RELEASE, 0.25),
    (AcknowledgeType.REJECT, 0.1),
    (AcknowledgeType.GAP, 0.05),
)


def now_ms() -> int:
    return time.time_ns() // 1_000_000


def ack_batches(pairs: list[tuple[int, int]], per_offset: bool) -> list[AcknowledgeBatch]:
    """(offset, type) pairs in ascending order as batches of consecutive offsets: one type per
    batch where they agree and not `per_offset`, else one per offset."""
    runs: list[list[tuple[int, int]]] = []
    for pair in pairs:
        if runs and runs[-1][-1][0] + 1 == pair[0]:
            runs[-1].append(pair)
        else:
            runs.append([pair])
    out = []
    for run in runs:
        kinds = tuple(k for _, k in run)
        if not per_offset and len(set(kinds)) == 1:
            kinds = kinds[:1]
        out.append(AcknowledgeBatch(run[0][0], run[-1][0], kinds))
    return out


class Journal:
    def __init__(self, path: str) -> None:
        self._fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        self._next = 0

    def _write(self, entry: dict[str, Any]) -> None:
        os.write(self._fd, (json.dumps(entry) + "\n").encode())

    async def run(
        self,
        queue: ShareStepQueue,
        entry: dict[str, Any],
        request: Any,
        answered: Callable[[Any], Any],
    ) -> Any:
        """`request` sent through `queue`, journalled before and after; its answer (None when
        the step failed)."""
        n = self._next
        self._next += 1
        self._write({"i": n, **entry, "t0": now_ms()})
        try:
            answer = await queue.run(request)
        except CoordinatorError as error:
            self._write({"i": n, "t1": now_ms(), "e": type(error).__name__})
            return None
        self._write({"i": n, "t1": now_ms(), "a": answered(answer)})
        return answer


def _acquired(answer: Any) -> dict[str, list[list[int]]]:
    return {
        str(tp.partition): [[r.first, r.last, r.delivery_count] for r in got.acquired]
        for tp, got in answer.items()
    }


def _codes(answer: Any) -> dict[str, int]:
    return {str(tp.partition): int(code) for tp, code in answer.items()}


async def member(
    index: int,
    broker: int,
    records: int,
    rng: random.Random,
    coordinator: BatchCoordinator,
    queue: ShareStepQueue,
    journal: Journal,
) -> None:
    tps = [TopicPartition(TOPIC, p) for p in range(PARTITIONS)]
    generation = 0
    lock_s = LIMITS.lock_duration_ms / 1000
    while True:
        name = f"b{broker}.{os.getpid()}.{index}.{generation}"
        wants = [rng.randint(1, 6) for _ in tps]
        read_at = now_ms()
        try:  # as a broker reads them: a committed read, which may lag
            offsets = await coordinator.partition_offsets(tps)
        except CoordinatorError:
            await asyncio.sleep(0.1)
            continue
        asked = [
            ShareFetchPartition(tp, n, records, log_start=o.log_start_offset, initial_start=0)
            for tp, n, o in zip(tps, wants, offsets, strict=True)
            if o is not None
        ]
        answer = await journal.run(
            queue,
            {"k": "acq", "m": name, "r": read_at},
            ShareAcquire(GROUP, name, asked, LIMITS),
            _acquired,
        )
        if answer is None:
            await asyncio.sleep(0.1)
            continue
        held = {
            tp: [o for r in got.acquired for o in range(r.first, r.last + 1)]
            for tp, got in answer.items()
        }
        if not any(held.values()):
            await asyncio.sleep(rng.uniform(0.02, 0.1))
        roll = rng.random()
        hold = rng.uniform(1.0, 1.3) if roll < 0.1 else rng.uniform(0.0, 0.3)
        await asyncio.sleep(hold * lock_s)
        acks: dict[TopicPartition, list[tuple[int, int]]] = {}
        for tp, offsets in held.items():
            pairs = [
                (o, int(rng.choices([k for k, _ in KINDS], [w for _, w in KINDS])[0]))
                for o in offsets
                if rng.random() >= UNACKED_CHANCE
            ]
            if rng.random() < STRAY_CHANCE:
                stray = rng.randrange(records)
                if stray not in offsets:
                    pairs.append((stray, int(AcknowledgeType.ACCEPT)))
            if pairs:
                acks[tp] = sorted(pairs)
        if acks:
            per_offset = rng.random() < 0.5
            await journal.run(
                queue,
                {"k": "ack", "m": name, "p": {str(tp.partition): p for tp, p in acks.items()}},
                ShareAcknowledge(
                    GROUP,
                    name,
                    {tp: ack_batches(p, per_offset) for tp, p in acks.items()},
                    LIMITS,
                ),
                _codes,
            )
        if rng.random() < LEAVE_CHANCE:
            await journal.run(
                queue,
                {"k": "rel", "m": name},
                ShareRelease(GROUP, name, tps, LIMITS),
                lambda _: None,
            )
            generation += 1


def open_backend(backend: str, target: str) -> BatchCoordinator:
    if backend == "sqlite":
        return SqliteBatchCoordinator(target)
    return PostgresBatchCoordinator(
        target,
        pool_size_max=2,
        connect_timeout_ms=1_000,
        command_timeout_ms=3_000,
        resolve_timeout_ms=3_000,
    )


async def main(
    backend: str, target: str, journal_path: str, broker: int, seed: int, records: int
) -> None:
    rng = random.Random(seed)
    coordinator = open_backend(backend, target)
    queue = ShareStepQueue(coordinator)
    journal = Journal(journal_path)
    assert ErrorCode.NONE == 0
    print("ready", flush=True)
    await asyncio.gather(
        *(
            member(
                i,
                broker,
                records,
                random.Random(rng.randrange(1 << 32)),
                coordinator,
                queue,
                journal,
            )
            for i in range(MEMBERS)
        )
    )


if __name__ == "__main__":
    backend, target, journal_path, broker, seed, records = sys.argv[1:7]
    asyncio.run(main(backend, target, journal_path, int(broker), int(seed), int(records)))
