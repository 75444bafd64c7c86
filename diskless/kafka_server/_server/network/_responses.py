"""A connection's responses, written in request order as they become ready.

Kafka clients match responses to requests by order, so a response waits for every earlier one.
Each answer's completion writes what is ready at the head of the line, from the answer's own
done callback: no task, queue or wake-up per request (an idle long-polling consumer costs the
broker a few of those per fetch, which added up to a tenth of its cost).

A response made of several buffers (a Fetch response refers to its records) is written buffer
by buffer, never joined: the transport sends what the socket takes at once and keeps only the
rest (plain TCP), or encrypts each in turn (TLS).
"""

from __future__ import annotations

import asyncio
import collections
import logging

from diskless._availability import log_failure
from diskless.kafka_server._protocol.codec import Frame

_log = logging.getLogger(__name__)

Answer = asyncio.Future[Frame | None]
"""A request's framed response, once its handler is done; None: nothing to send (acks=0)."""


class InOrderResponses:
    """The answers of one connection not yet written, oldest first."""

    def __init__(self, writer: asyncio.StreamWriter, peer: str, broker_id: int) -> None:
        self._writer = writer
        self._peer = peer
        self._broker_id = broker_id
        self._waiting: collections.deque[Answer] = collections.deque()
        self._room: asyncio.Future[None] | None = None
        self.broken = False
        """A handler failed (the connection was aborted) or the answers were cancelled."""

    def __len__(self) -> int:
        return len(self._waiting)

    def add(self, answer: Answer) -> None:
        self._waiting.append(answer)
        answer.add_done_callback(self._ready)

    async def room(self, most: int) -> None:
        """Until fewer than `most` answers wait (or none ever will again)."""
        while len(self._waiting) >= most and not self.broken:
            self._room = asyncio.get_running_loop().create_future()
            await self._room

    async def drained(self) -> None:
        """Until every answer added was written, or the connection broke."""
        while self._waiting and not self.broken:
            await asyncio.wait([self._waiting[0]])
            self._ready(None)

    def cancel(self) -> None:
        self.broken = True
        for answer in self._waiting:
            answer.cancel()
        self._waiting.clear()
        self._wake()

    def _ready(self, _: object) -> None:
        waiting = self._waiting
        while waiting and waiting[0].done() and not self.broken:
            answer = waiting.popleft()
            if answer.cancelled():
                self.cancel()
                return
            error = answer.exception()
            if error is not None:
                log_failure(
                    _log,
                    error,
                    "closing %s on broker %d: a handler failed",
                    self._peer,
                    self._broker_id,
                    level=logging.ERROR,
                )
                self._writer.transport.abort()
                self.cancel()
                return
            data = answer.result()
            if isinstance(data, bytes):
                self._writer.write(data)
            elif data is not None:
                for part in data:
                    self._writer.write(part)
        self._wake()

    def _wake(self) -> None:
        if self._room is not None and not self._room.done():
            self._room.set_result(None)
