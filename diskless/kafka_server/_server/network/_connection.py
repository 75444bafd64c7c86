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
  `frame_receive_ms_max` to send a frame's body, is closed. Both limits are checked by one
  `ConnectionSweeper` per server rather than by a timer per read: a timer armed and cancelled
  for every frame was a fifth of what an idle long-polling consumer cost the broker. A limit
  is therefore enforced up to one sweep late (`sweep_interval_s`).
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

from diskless.kafka_server._handlers.context import Session
from diskless.kafka_server._protocol.codec import FRAME_SIZE, FrameError
from diskless.kafka_server._server.network._log_limit import RateLimitedWarnings
from diskless.kafka_server._server.network._request_budget import RequestBudget, Reservation
from diskless.kafka_server._server.network._responses import Answer, InOrderResponses
from diskless.kafka_server._server.settings.config import ServerConfig
from diskless.metrics import NULL_METRICS, Metrics

_log = logging.getLogger(__name__)

READ_CHUNK_BYTES: Final = 256 * 1024
"""A frame's body is read in pieces of at most this into its reserved buffer."""
SWEEP_INTERVAL_S_MAX: Final = 1.0
SWEEP_INTERVAL_S_MIN: Final = 0.01
"""The sweeper looks four times per shortest limit, within these bounds."""

Dispatch = Callable[[Session, memoryview], Coroutine[None, None, Answer]]
"""Decode a frame and start its handler; raises FrameError when the connection must close.
Handlers start in the order their requests arrived: the connection awaits this before it reads
its next frame."""


class _Close(Exception):
    """Stop serving this connection after what was already answered."""


class _Expired(Exception):
    """Set on a connection's reader by the sweeper: a time limit ended its reading."""


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
        metrics: Metrics = NULL_METRICS,
    ) -> None:
        self.session = session
        self._metrics = metrics
        self._config = config
        self._budget = budget
        self._warnings = warnings
        self._dispatch = dispatch
        self._broker_id = broker_id
        self._last_active = asyncio.get_running_loop().time()
        """Event-loop time of the last frame read or response written (for the idle timeout)."""
        self._unanswered = 0
        """Requests read and not yet answered: while there are some, the connection is busy."""
        self._body_since: float | None = None
        """Event-loop time the frame body being read began (its prefix was read), else None."""
        self._expired: str | None = None
        """Why the sweeper ended the connection's reading (`expire`)."""
        self._reader: asyncio.StreamReader | None = None

    async def serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self._reader = reader
        responses = InOrderResponses(writer, self.session.peer, self._broker_id)
        most = self._config.requests_inflight_max
        try:
            while not responses.broken:
                if len(responses) >= most:
                    await responses.room(most)
                if writer.transport.get_write_buffer_size():
                    await writer.drain()  # a client that does not read gets no more answers
                try:
                    received = await self._read_frame(reader)
                except _Close as e:
                    self._warn_close(str(e), "bad_frame")
                    break
                if received is None:
                    if self._expired is not None:  # idle: closed quietly, as Kafka does
                        _log.debug(
                            "closing %s on broker %d: %s",
                            self.session.peer,
                            self._broker_id,
                            self._expired,
                        )
                    break  # the client closed the connection, or was idle
                frame, reservation = received
                try:
                    answer = await self._dispatch(self.session, frame)
                except BaseException as e:
                    reservation.release()
                    if not isinstance(e, FrameError):
                        raise
                    self._warn_close(str(e), "unsupported_request")
                    break
                del frame  # the decoded request is all that is kept
                self._unanswered += 1
                answer.add_done_callback(functools.partial(self._answered, reservation))
                responses.add(answer)
            await responses.drained()  # answer what was accepted, then stop
        except (ConnectionError, asyncio.IncompleteReadError):
            pass
        finally:
            responses.cancel()  # nothing, unless the connection failed or was cancelled

    def _warn_close(self, reason: str, kind: str) -> None:
        self._metrics.connection_rejected(self.session.listener, kind)
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
        """Wait for a size prefix; None at a clean EOF, or once the sweeper found the connection
        idle."""
        try:
            return await reader.readexactly(FRAME_SIZE.size)
        except _Expired:
            return None
        except asyncio.IncompleteReadError as e:
            if e.partial:
                raise _Close("connection ended inside a size prefix") from None
            return None

    async def _read_body(self, reader: asyncio.StreamReader, size: int) -> memoryview:
        """Read `size` bytes into one buffer of that size (no growth, no final copy), within
        `frame_receive_ms_max` (the sweeper's watch)."""
        buffer = bytearray(size)
        view = memoryview(buffer)
        received = 0
        self._body_since = asyncio.get_running_loop().time()
        try:
            while received < size:
                chunk = await reader.read(min(size - received, READ_CHUNK_BYTES))
                if not chunk:
                    raise _Close(f"connection ended after {received} of {size} bytes")
                view[received : received + len(chunk)] = chunk
                received += len(chunk)
        except _Expired:
            raise _Close(f"{self._expired} ({received} of {size} bytes)") from None
        finally:
            self._body_since = None
        return view.toreadonly()  # kio reads only read-only buffers

    def overdue(self, now: float) -> str | None:
        """Why the connection is past one of its limits at event-loop time `now`, or None."""
        if self._expired is not None or self._reader is None:
            return None
        config = self._config
        if self._body_since is not None:
            if now - self._body_since >= config.frame_receive_ms_max / 1000:
                return f"frame body not received within {config.frame_receive_ms_max} ms"
            return None
        idle = now - self._last_active >= config.connections_idle_ms_max / 1000
        if idle and self._unanswered == 0:
            return f"idle for {config.connections_idle_ms_max} ms"
        return None

    def expire(self, reason: str) -> None:
        """End the connection's reading (`overdue`'s reason): its current or next read fails;
        what was already accepted is still answered."""
        assert self._reader is not None
        self._expired = reason
        self._reader.set_exception(_Expired(reason))


class ConnectionSweeper:
    """Checks every connection of a server against its time limits, once per
    `sweep_interval_s`, and ends those past one (see `Connection.overdue`)."""

    def __init__(self, config: ServerConfig) -> None:
        limits_s = min(config.connections_idle_ms_max, config.frame_receive_ms_max) / 1000
        self.sweep_interval_s = min(SWEEP_INTERVAL_S_MAX, max(SWEEP_INTERVAL_S_MIN, limits_s / 4))
        self._connections: set[Connection] = set()

    def watch(self, connection: Connection) -> None:
        self._connections.add(connection)

    def forget(self, connection: Connection) -> None:
        self._connections.discard(connection)

    async def run(self) -> None:
        loop = asyncio.get_running_loop()
        while True:
            await asyncio.sleep(self.sweep_interval_s)
            now = loop.time()
            for connection in list(self._connections):
                reason = connection.overdue(now)
                if reason is not None:
                    connection.expire(reason)
