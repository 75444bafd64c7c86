"""A connection's responses, written in request order as they become ready.

Kafka clients match responses to requests by order, so a response waits for every earlier one.
Each answer's completion writes what is ready at the head of the line, from the answer's own
done callback: no task, queue or wake-up per request (an idle long-polling consumer costs the
broker a few of those per fetch, which added up to a tenth of its cost).

A response made of several buffers (a Fetch response refers to its records) is written buffer
by buffer, never joined, and paced: a buffer (of at most `SEND_BYTES_MAX`) is handed to the
transport only once the transport holds nothing, so that the socket takes it directly and the
transport copies at most what the socket did not take of it, not the rest of the response (plain
TCP). Over TLS each buffer is encrypted in turn.
"""

from __future__ import annotations

import asyncio
import collections
import logging
from typing import Final

from diskless._availability import log_failure
from diskless.kafka_server._protocol.codec import Frame

_log = logging.getLogger(__name__)

SEND_BYTES_MAX: Final = 256 * 1024
"""A response's buffers are handed to the transport in pieces of at most this."""

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
        self._unsent: collections.deque[bytes | memoryview] = collections.deque()
        """Buffers of answers taken off `_waiting`, not yet handed to the transport."""
        self._sending: asyncio.Task[None] | None = None
        """Hands `_unsent` over as the transport empties, while there is any."""
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
        if self._sending is not None:
            await asyncio.wait([self._sending])

    def cancel(self) -> None:
        self.broken = True
        for answer in self._waiting:
            answer.cancel()
        self._waiting.clear()
        self._unsent.clear()
        if self._sending is not None:
            self._sending.cancel()
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
            if data is not None:
                self._send(data)
        self._wake()

    def _send(self, data: Frame) -> None:
        unsent = self._unsent
        if isinstance(data, bytes):
            if not unsent:
                self._writer.write(data)
                return
            unsent.append(data)
        else:
            for part in data:
                if len(part) <= SEND_BYTES_MAX:
                    unsent.append(part)
                    continue
                view = memoryview(part)
                unsent.extend(
                    view[at : at + SEND_BYTES_MAX] for at in range(0, len(view), SEND_BYTES_MAX)
                )
        self._hand_over()
        if unsent and self._sending is None:
            # Told when the transport holds nothing (its protocol pauses above 0 bytes).
            self._writer.transport.set_write_buffer_limits(high=0)
            self._sending = asyncio.ensure_future(self._send_unsent())

    def _hand_over(self) -> None:
        """Unsent buffers to the transport, each once it holds nothing."""
        transport = self._writer.transport
        unsent = self._unsent
        while unsent and not transport.get_write_buffer_size():
            self._writer.write(unsent.popleft())

    async def _send_unsent(self) -> None:
        transport = self._writer.transport
        try:
            while self._unsent and not self.broken:
                await self._writer.drain()
                self._hand_over()
        except Exception:  # drain refuses once the stream's reading ended
            # (the client left, or a time limit ended the connection's reading): the transport
            # keeps what is left, as it would have without pacing, unless it is closing.
            while self._unsent and not transport.is_closing():
                self._writer.write(self._unsent.popleft())
            self._unsent.clear()
        finally:
            self._sending = None
            if not transport.is_closing():
                transport.set_write_buffer_limits()

    def _wake(self) -> None:
        if self._room is not None and not self._room.done():
            self._room.set_result(None)
