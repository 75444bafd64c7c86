"""One broker's Kafka listener: asyncio TCP on 127.0.0.1, requests in, responses out in order.

Per connection, requests are decoded in arrival order and each starts its handler at once (so a
producer's pipelined Produce requests reach the broker in order and overlap while they wait for
their commit); responses are written strictly in request order, as Kafka clients require. At
most `requests_inflight_max` requests of one connection are under way; further reads wait.

What one client can cost the others is bounded (see `ServerConfig` for each limit):
- memory: a frame's bytes are reserved from a budget shared by all connections
  (`queued_request_bytes_max`) before its body is read, and given back once it is answered;
- time on the event loop: a frame above `inline_frame_bytes_max` is decoded, and its response
  encoded, in a worker thread;
- connections: one that is idle for `connections_idle_ms_max`, or that takes longer than
  `frame_receive_ms_max` to send a frame's body, is closed.

What closes a connection (logged with the reason, at most `close_warnings_max` warnings per
`close_warning_interval_ms`; other connections are unaffected):
- a size prefix that is negative or above `frame_bytes_max`, or a frame cut short or too slow
  (the stream cannot be resynchronized);
- an API key this server does not know, or a version it does not advertise, other than
  ApiVersions: the protocol has no response shape for them, and Kafka closes too;
- a request that does not decode with the schema of its version;
- an unexpected failure inside a handler (a bug): the connection cannot answer that request.
ApiVersions of an unsupported version is answered, as Kafka does, with a v0 response carrying
UNSUPPORTED_VERSION and the supported ranges, so the client can retry with a version it finds.
"""

from __future__ import annotations

import asyncio
import collections
import concurrent.futures
import functools
import logging
from collections.abc import Awaitable, Callable
from typing import Final, TypeVar

from kio.static.protocol import ResponsePayload

from diskless import DisklessBroker
from diskless._availability import log_failure
from diskless.kafka_server._coordination.cluster_view import BrokerAddress, ClusterView
from diskless.kafka_server._coordination.group_coordinator import GroupCoordinator
from diskless.kafka_server._coordination.txn_front import TransactionFront
from diskless.kafka_server._handlers.context import Connection
from diskless.kafka_server._handlers.table import route, unsupported_version_answer
from diskless.kafka_server._protocol.apis import ApiKey
from diskless.kafka_server._protocol.codec import (
    FRAME_SIZE,
    DecodedRequest,
    FrameError,
    decode_request,
    encode_response,
    read_prefix,
    request_schema,
)
from diskless.kafka_server._server._log_limit import RateLimitedWarnings
from diskless.kafka_server._server._request_budget import RequestBudget, Reservation
from diskless.kafka_server._server.config import ServerConfig

_log = logging.getLogger(__name__)

LISTEN_HOST: Final = "127.0.0.1"
READ_CHUNK_BYTES: Final = 256 * 1024
"""A frame's body is read in pieces of at most this into its reserved buffer."""

_Result = TypeVar("_Result")


class _Close(Exception):
    """Stop serving this connection after what was already answered."""


class _Idle(Exception):
    """The connection has been idle for `connections_idle_ms_max`: close it quietly."""


class BrokerServer:
    """The Kafka listener of one `DisklessBroker`; `start`, then `close` (or `abort`)."""

    def __init__(
        self,
        broker: DisklessBroker,
        cluster: ClusterView,
        transactions: TransactionFront,
        groups: GroupCoordinator,
        *,
        port: int = 0,
        config: ServerConfig | None = None,
        request_budget: RequestBudget | None = None,
    ) -> None:
        """`request_budget`: the `queued_request_bytes_max` budget, when shared with other servers
        of the same process (a `KafkaCluster` passes one to all of its brokers)."""
        self.broker = broker
        self.cluster = cluster
        self.transactions = transactions
        self.groups = groups
        self.config = config if config is not None else ServerConfig()
        self.request_budget = (
            request_budget
            if request_budget is not None
            else RequestBudget(self.config.queued_request_bytes_max)
        )
        self._port = port
        self._server: asyncio.Server | None = None
        self._connections: dict[asyncio.Task[None], asyncio.StreamWriter] = {}
        self._codec: concurrent.futures.ThreadPoolExecutor | None = None
        self._close_warnings = RateLimitedWarnings(
            _log,
            interval_s=self.config.close_warning_interval_ms / 1000,
            burst=self.config.close_warnings_max,
            what="connection closes",
        )
        self.produce_requests: collections.Counter[str] = collections.Counter()
        """Produce requests answered by this broker, per client id: where routing sent whom."""

    @property
    def broker_id(self) -> int:
        return self.broker.broker_id

    @property
    def rack(self) -> str | None:
        return self.broker.rack

    @property
    def address(self) -> BrokerAddress:
        if self._server is None:
            raise RuntimeError("the server is not listening")
        return BrokerAddress(self.broker_id, LISTEN_HOST, self._port, self.rack)

    @property
    def bootstrap(self) -> str:
        return f"{LISTEN_HOST}:{self.address.port}"

    async def start(self) -> None:
        if self._server is not None:
            return
        # One thread: the codec is pure Python under the GIL, more would not make it faster.
        self._codec = concurrent.futures.ThreadPoolExecutor(
            1, thread_name_prefix=f"kafka-codec-{self.broker_id}"
        )
        self._server = await asyncio.start_server(self._accept, LISTEN_HOST, self._port)
        self._port = self._server.sockets[0].getsockname()[1]
        self.cluster.join(self.address, self.broker.broker_epoch)
        _log.info("broker %d (rack %s) listening on %s", self.broker_id, self.rack, self.bootstrap)

    async def close(self) -> None:
        """Stop listening, leave the cluster, end every connection; the broker stays open."""
        await self._stop(abort=False)

    async def abort(self) -> None:
        """Like `close`, but connections are reset at once, answered or not (a crash)."""
        await self._stop(abort=True)

    async def _stop(self, *, abort: bool) -> None:
        server, self._server = self._server, None
        if server is None:
            return
        self.cluster.leave(self.broker_id)
        if not abort:
            address = BrokerAddress(self.broker_id, LISTEN_HOST, self._port, self.rack)
            await self.cluster.withdraw(address, self.broker.broker_epoch)
        server.close()
        for task, writer in list(self._connections.items()):
            if abort:
                writer.transport.abort()
            else:
                writer.close()
            task.cancel()
        await asyncio.gather(*self._connections, return_exceptions=True)
        await server.wait_closed()
        self._close_warnings.flush()
        if self._codec is not None:
            self._codec.shutdown(wait=False, cancel_futures=True)
            self._codec = None
        _log.info("broker %d stopped listening (abort=%s)", self.broker_id, abort)

    # --- connections --------------------------------------------------------------------------
    async def _accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        if self._server is None:
            writer.transport.abort()
            return
        self._connections[task] = writer
        peer = str(writer.get_extra_info("peername"))
        try:
            now = asyncio.get_running_loop().time()
            await self._serve(Connection(peer, now), reader, writer)
        except asyncio.CancelledError:
            # Only `_stop` cancels a connection; ending quietly keeps asyncio's stream callback
            # from reporting the cancellation as an error.
            pass
        finally:
            self._connections.pop(task, None)
            writer.transport.abort() if writer.transport.is_closing() else writer.close()

    async def _serve(
        self, connection: Connection, reader: asyncio.StreamReader, writer: asyncio.StreamWriter
    ) -> None:
        pending: asyncio.Queue[asyncio.Future[bytes | None] | None] = asyncio.Queue(
            self.config.requests_inflight_max
        )
        responder = asyncio.create_task(self._respond(connection, pending, writer))
        try:
            while not responder.done():
                try:
                    received = await self._read_frame(connection, reader)
                except _Idle:
                    _log.debug("closing idle %s on broker %d", connection.peer, self.broker_id)
                    break
                except _Close as e:
                    self._warn_close(connection, str(e))
                    break
                if received is None:
                    break  # the client closed the connection
                frame, reservation = received
                try:
                    answer = await self._dispatch(connection, frame)
                except BaseException as e:
                    reservation.release()
                    if not isinstance(e, FrameError):
                        raise
                    self._warn_close(connection, str(e))
                    break
                del frame  # the decoded request is all that is kept
                connection.unanswered += 1
                answer.add_done_callback(functools.partial(self._answered, connection, reservation))
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

    def _warn_close(self, connection: Connection, reason: str) -> None:
        self._close_warnings.warning(
            "closing %s on broker %d: %s", connection.peer, self.broker_id, reason
        )

    @staticmethod
    def _answered(connection: Connection, reservation: Reservation, _: object) -> None:
        reservation.release()
        connection.unanswered -= 1
        connection.last_active = asyncio.get_running_loop().time()

    async def _read_frame(
        self, connection: Connection, reader: asyncio.StreamReader
    ) -> tuple[memoryview, Reservation] | None:
        """The next frame, in a buffer reserved from the request budget; None at a clean EOF."""
        prefix = await self._read_prefix(connection, reader)
        if prefix is None:
            return None
        (size,) = FRAME_SIZE.unpack(prefix)
        if size < 0 or size > self.config.frame_bytes_max:
            raise _Close(f"frame size {size} outside [0, {self.config.frame_bytes_max}]")
        reservation = await self.request_budget.reserve(size)
        try:
            frame = await self._read_body(reader, size)
        except BaseException:
            reservation.release()
            raise
        connection.last_active = asyncio.get_running_loop().time()
        return frame, reservation

    async def _read_prefix(
        self, connection: Connection, reader: asyncio.StreamReader
    ) -> bytes | None:
        """Wait for a size prefix; a connection with nothing under way for too long is `_Idle`.

        A cancelled `readexactly` consumes nothing, so waiting again after a timeout is safe.
        """
        idle_s = self.config.connections_idle_ms_max / 1000
        loop = asyncio.get_running_loop()
        while True:
            deadline = connection.last_active + idle_s
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
                if connection.unanswered == 0 and loop.time() >= connection.last_active + idle_s:
                    raise _Idle from None
                # busy (a held fetch, a join waiting for its group): busy is not idle

    async def _read_body(self, reader: asyncio.StreamReader, size: int) -> memoryview:
        """Read `size` bytes into one buffer of that size (no growth, no final copy), in time."""
        buffer = bytearray(size)
        view = memoryview(buffer)
        received = 0
        timeout_ms = self.config.frame_receive_ms_max
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

    async def _dispatch(
        self, connection: Connection, frame: memoryview
    ) -> asyncio.Future[bytes | None]:
        """Decode one request and start its handler; FrameError when the connection must close.

        Handlers start in the order their requests arrived: the caller awaits this before it
        reads the next frame of the connection.
        """
        prefix = read_prefix(frame)
        key, version = prefix.api_key, prefix.api_version
        handler = route(key, version)
        if handler is None:
            response = unsupported_version_answer(key)
            if response is None:
                raise FrameError(f"api key {key} v{version} is not supported")
            done: asyncio.Future[bytes | None] = asyncio.get_running_loop().create_future()
            done.set_result(encode_response(prefix.correlation_id, response))
            return done
        schema = request_schema(key, version)
        assert schema is not None, (key, version)  # every advertised version is modelled
        large = len(frame) > self.config.inline_frame_bytes_max
        request: DecodedRequest
        if large:
            request = await self._in_codec_thread(functools.partial(decode_request, frame, schema))
        else:
            request = decode_request(frame, schema)
        if key == ApiKey.PRODUCE:
            self.produce_requests[request.client_id or ""] += 1
        handling = handler(self, connection, request.body)
        return asyncio.ensure_future(self._answer(handling, prefix.correlation_id, large=large))

    async def _answer(
        self, handling: Awaitable[ResponsePayload | None], correlation_id: int, *, large: bool
    ) -> bytes | None:
        """The framed response; a large request's response is encoded off the event loop
        (its size grows with the request's: 100,000 topics in, 100,000 out)."""
        response = await handling
        if response is None:
            return None
        if large:
            return await self._in_codec_thread(
                functools.partial(encode_response, correlation_id, response)
            )
        return encode_response(correlation_id, response)

    async def _in_codec_thread(self, function: Callable[[], _Result]) -> _Result:
        if self._codec is None:
            raise ConnectionError("the server is closing")
        return await asyncio.get_running_loop().run_in_executor(self._codec, function)

    async def _respond(
        self,
        connection: Connection,
        pending: asyncio.Queue[asyncio.Future[bytes | None] | None],
        writer: asyncio.StreamWriter,
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
                    connection.peer,
                    self.broker_id,
                    level=logging.ERROR,
                )
                writer.transport.abort()
                return
            if data is not None:
                writer.write(data)
                await writer.drain()
                connection.last_active = asyncio.get_running_loop().time()
