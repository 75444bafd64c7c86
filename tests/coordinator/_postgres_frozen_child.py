"""A child process that freezes inside a commit step, as a broker cut off from PostgreSQL.

    python -m tests.coordinator._postgres_frozen_child DSN EPOCH COMMAND_TIMEOUT_MS

Opens the coordinator with COMMAND_TIMEOUT_MS and commits, as broker 1 of epoch EPOCH, one batch
to partition 0 of TOPIC (`_postgres_child`) as "c/0". That first commit step prints "frozen" once
its loads hold their row locks, then stops the process (SIGSTOP) before its apply. Once
continued, the step goes on. Then it commits "c/1" the same way, without stopping. Prints one
JSON line per commit: ["committed", base_offset], ["refused", refusal] or ["failed", the
error's type].
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import sys
from typing import Any

from diskless._types import TopicPartition
from diskless.coordinator import PostgresBatchCoordinator
from diskless.coordinator._backends import postgres
from diskless.coordinator._backends.postgres_commit import PostgresCommitStep
from diskless.coordinator._store import Changes, Operation
from diskless.errors import DisklessError
from testkit.commits import batch

from ._postgres_child import TOPIC


class FreezingCommitStep(PostgresCommitStep):
    """The store's commit step, which stops the process before its first apply."""

    frozen = False

    async def apply(self, changes: Changes) -> list[int]:
        if not FreezingCommitStep.frozen:
            FreezingCommitStep.frozen = True
            print("frozen", flush=True)
            os.kill(os.getpid(), signal.SIGSTOP)
        return await super().apply(changes)


async def commit(coordinator: PostgresBatchCoordinator, key: str, epoch: int) -> list[Any]:
    try:
        outcome = await coordinator.commit_file(
            key, 1, epoch, 100, [batch(TopicPartition(TOPIC, 0))]
        )
    except DisklessError as error:
        return ["failed", type(error).__name__]
    if outcome.refused is not None:
        return ["refused", outcome.refused.name]
    (result,) = outcome.batches
    return ["committed", result.base_offset]


async def main(dsn: str, epoch: int, command_timeout_ms: int) -> None:
    postgres.NATIVE_STEPS[Operation.COMMIT_FILES] = FreezingCommitStep
    coordinator = PostgresBatchCoordinator(
        dsn, pool_size_max=1, command_timeout_ms=command_timeout_ms
    )
    try:
        for key in ("c/0", "c/1"):
            print(json.dumps(await commit(coordinator, key, epoch)), flush=True)
    finally:
        await coordinator.close()


if __name__ == "__main__":
    dsn, epoch, command_timeout_ms = sys.argv[1:4]
    asyncio.run(main(dsn, int(epoch), int(command_timeout_ms)))
