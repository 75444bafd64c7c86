"""One client connection: frames in, responses out in request order, within the server's limits.

Requests are read in arrival order, and each is handed to `dispatch` before the next is read,
which starts its handler at once (so a producer's pipelined Produce requests reach the broker in
order and overlap while they wait for their commit); responses are written strictly in request
order, as Kafka clients require. At most `requests_inflight_max` requests are under way; further
reads wait. Nothing here knows an API: a request reaches the handlers only through `dispatch`,
and what the handlers know of the connection is its `Session`.

What one client can cost the others is bounded (see `ServerConfig` for each limit):
- memory: a frame's bytes are reserved from a budget shared by all connections
  (`queued_request_bytes_max`) before its body is read, and given back once it is answered;
- connections: one that is idle for `connections_idle_ms_max`, or that takes longer than
  `frame_receive_ms_max` to send a frame's body, is closed.
What closes a connection (logged with the reason, rate-limited; other connections are
unaffected): a size prefix that is negative or above `frame_bytes_max`, a frame cut short or too
slow (the stream cannot be resynchronized), a request `dispatch` refuses (`FrameError`), and an
unexpected failure inside a handler (a bug: the connection cannot answer that request).
"""

from __future__ import annotations

import asyncio
import functools
import logging
from collections.abc import Callable, Coroutine
from typing import Final

from diskless._availability import log_failure
from diskless.kafka_server._handlers.context import Session
from diskless.kafka_server._protocol.codec import FRAME_SIZE, FrameError
from diskless.kafka_server._server._log_limit import RateLimitedWarnings
from diskless.kafka_server._server._request_budget import RequestBudget, Reservation
from diskless.kafka_server._server.config import ServerConfig

_log = logging.getLogger(__name__)

READ_CHUNK_BYTES: Final = 256 * 1024
"""A frame's body is read in pieces of at most this into its reserved buffer."""

Answer = asyncio.Future[bytes | None]
"""A request's framed response, once its handler is done; None: nothing to send (acks=0)."""
Dispatch = Callable[[Session, memoryview], Coroutine[None, None, Answer]]
"""Decode a frame and start its handler; raises FrameError when the connection must close.
Handlers start in the order their requests arrived: the connection awaits this before it reads
its next frame."""


class _Close(Exception):
    """Stop serving this connection after what was already answered."""


class _Idle(Exception):
    """The connection has been idle for `connections_idle_ms_max`: close it quietly."""


class Connection:
    """Serves one accepted connection until the client leaves, a limit closes it, or `serve` is
    cancelled."""

    def __init__(
        self,
        session: Session,
        *,
        config: ServerConfig,
        budget: RequestBudget,
        warnings: RateLimitedWarnings,
        dispatch: Dispatch,
        broker_id: int,
    ) -> None:
        self.session = session
        self._config = config
        self._budget = budget
        self._warnings = warnings
        self._dispatch = dispatch
        self._broker_id = broker_id
        self._last_active = asyncio.get_running_loop().time()
        """Event-loop time of the last frame read or response written (for the idle timeout)."""
        self._unanswered = 0
        """Requests read and not yet answered: while there are some, the connection is busy."""

    async def serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        pending: asyncio.Queue[Answer | None] = asyncio.Queue(self._config.requests_inflight_max)
        responder = asyncio.create_task(self._respond(pending, writer))
        try:
            while not responder.done():
                try:
                    received = await self._read_frame(reader)
                except _Idle:
                    _log.debug("closing idle %s on broker %d", self.session.peer, self._broker_id)
                    break
                except _Close as e:
                    self._warn_close(str(e))
                    break
                if received is None:
                    break  # the client closed the connection
                frame, reservation = received
                try:
                    answer = await self._dispatch(self.session, frame)
                except BaseException as e:
                    reservation.release()
                    if not isinstance(e, FrameError):
                        raise
                    self._warn_close(str(e))
                    break
                del frame  # the decoded request is all that is kept
                self._unanswered += 1
                answer.add_done_callback(functools.partial(self._answered, reservation))
                await pending.put(answer)
        except (ConnectionError, asyncio.IncompleteReadError):
            pass
        except asyncio.CancelledError:
            responder.cancel()
            raise
        finally:
            try:
                pending.put_nowait(None)  # answer what was accepted, then stop
            except asyncio.QueueFull:
                responder.cancel()
            await asyncio.gather(responder, return_exceptions=True)
            while not pending.empty():
                leftover = pending.get_nowait()
                if leftover is not None:
                    leftover.cancel()

    def _warn_close(self, reason: str) -> None:
        self._warnings.warning(
            "closing %s on broker %d: %s", self.session.peer, self._broker_id, reason
        )

    def _answered(self, reservation: Reservation, _: object) -> None:
        reservation.release()
        self._unanswered -= 1
        self._last_active = asyncio.get_running_loop().time()

    async def _read_frame(
        self, reader: asyncio.StreamReader
    ) -> tuple[memoryview, Reservation] | None:
        """The next frame, in a buffer reserved from the request budget; None at a clean EOF."""
        prefix = await self._read_prefix(reader)
        if prefix is None:
            return None
        (size,) = FRAME_SIZE.unpack(prefix)
        if size < 0 or size > self._config.frame_bytes_max:
            raise _Close(f"frame size {size} outside [0, {self._config.frame_bytes_max}]")
        reservation = await self._budget.reserve(size)
        try:
            frame = await self._read_body(reader, size)
        except BaseException:
            reservation.release()
            raise
        self._last_active = asyncio.get_running_loop().time()
        return frame, reservation

    async def _read_prefix(self, reader: asyncio.StreamReader) -> bytes | None:
        """Wait for a size prefix; a connection with nothing under way for too long is `_Idle`.

        A cancelled `readexactly` consumes nothing, so waiting again after a timeout is safe.
        """
        idle_s = self._config.connections_idle_ms_max / 1000
        loop = asyncio.get_running_loop()
        while True:
            deadline = self._last_active + idle_s
            if deadline <= loop.time():  # busy past the deadline: look again in a while
                deadline = loop.time() + idle_s
            try:
                async with asyncio.timeout_at(deadline):
                    return await reader.readexactly(FRAME_SIZE.size)
            except asyncio.IncompleteReadError as e:
                if e.partial:
                    raise _Close("connection ended inside a size prefix") from None
                return None
            except TimeoutError:
                if self._unanswered == 0 and loop.time() >= self._last_active + idle_s:
                    raise _Idle from None
                # busy (a held fetch, a join waiting for its group): busy is not idle

    async def _read_body(self, reader: asyncio.StreamReader, size: int) -> memoryview:
        """Read `size` bytes into one buffer of that size (no growth, no final copy), in time."""
        buffer = bytearray(size)
        view = memoryview(buffer)
        received = 0
        timeout_ms = self._config.frame_receive_ms_max
        try:
            async with asyncio.timeout(timeout_ms / 1000):
                while received < size:
                    chunk = await reader.read(min(size - received, READ_CHUNK_BYTES))
                    if not chunk:
                        raise _Close(f"connection ended after {received} of {size} bytes")
                    view[received : received + len(chunk)] = chunk
                    received += len(chunk)
        except TimeoutError:
            raise _Close(
                f"frame body not received within {timeout_ms} ms ({received} of {size} bytes)"
            ) from None
        return view.toreadonly()  # kio reads only read-only buffers

    async def _respond(
        self, pending: asyncio.Queue[Answer | None], writer: asyncio.StreamWriter
    ) -> None:
        while True:
            answer = await pending.get()
            if answer is None:
                return
            try:
                data = await answer
            except asyncio.CancelledError:
                raise
            except Exception as error:
                log_failure(
                    _log,
                    error,
                    "closing %s on broker %d: a handler failed",
                    self.session.peer,
                    self._broker_id,
                    level=logging.ERROR,
                )
                writer.transport.abort()
                return
            if data is not None:
                writer.write(data)
                await writer.drain()
                self._last_active = asyncio.get_running_loop().time()
