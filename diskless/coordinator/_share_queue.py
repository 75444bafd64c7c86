"""One process's share requests, batched: those that wait behind a step go in the next one.

Every ShareFetch and ShareAcknowledge is a coordinator step (`BatchCoordinator.share_steps`).
Under load they queue behind the coordinator, as produce commits do (`diskless.wal`), and one
step for all that wait costs about what one did: one load, one apply, one durable write. So a
request goes at once when no step of this queue is in flight, and otherwise waits for the one in
flight to end and goes with every other request that arrived meanwhile (up to
`SHARE_STEP_REQUESTS_MAX`), in arrival order.

A request whose caller stops waiting still goes: a step cannot be taken back once sent, and an
acquisition nobody receives is released by its lock's deadline.
"""

from __future__ import annotations

import asyncio
import collections
from typing import Final

from diskless.coordinator._api import BatchCoordinator
from diskless.coordinator._rules.share import ShareAnswer, ShareRequest

SHARE_STEP_REQUESTS_MAX: Final = 256
"""The most requests one step carries (a step's load and apply grow with them)."""


class ShareStepQueue:
    def __init__(
        self, coordinator: BatchCoordinator, requests_max: int = SHARE_STEP_REQUESTS_MAX
    ) -> None:
        assert requests_max >= 1
        self._coordinator = coordinator
        self._requests_max = requests_max
        self._waiting: collections.deque[tuple[ShareRequest, asyncio.Future[ShareAnswer]]] = (
            collections.deque()
        )
        self._sender: asyncio.Task[None] | None = None
        self.steps = 0
        """Steps sent (for measuring what batching saves)."""

    async def run(self, request: ShareRequest) -> ShareAnswer:
        """`request`'s answer, from the step that carried it (its `CoordinatorError` if that
        step failed: then none of the step's requests was applied, or, for
        `CommitOutcomeUnknownError`, it is unknown whether they were)."""
        future: asyncio.Future[ShareAnswer] = asyncio.get_running_loop().create_future()
        self._waiting.append((request, future))
        if self._sender is None:
            self._sender = asyncio.create_task(self._send())
        return await asyncio.shield(future)

    async def _send(self) -> None:
        try:
            while self._waiting:
                count = min(len(self._waiting), self._requests_max)
                batch = [self._waiting.popleft() for _ in range(count)]
                self.steps += 1
                try:
                    answers = await self._coordinator.share_steps([r for r, _ in batch])
                except Exception as error:  # the callers' to handle: each gets the step's error
                    for _, future in batch:
                        if not future.done():
                            future.set_exception(error)
                    continue
                assert len(answers) == len(batch)
                for (_, future), answer in zip(batch, answers, strict=True):
                    if not future.done():
                        future.set_result(answer)
        finally:
            self._sender = None

    async def close(self) -> None:
        """Wait until every request queued so far has been sent and answered."""
        while self._sender is not None:
            await asyncio.shield(self._sender)
