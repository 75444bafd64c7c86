"""One broker's Kafka listener: asyncio TCP on 127.0.0.1, requests in, responses out in order.

Per connection, requests are decoded in arrival order and each starts its handler at once (so a
producer's pipelined Produce requests reach the broker in order and overlap while they wait for
their commit); responses are written strictly in request order, as Kafka clients require. At
most `requests_inflight_max` requests of one connection are under way; further reads wait.

What closes a connection (always logged with the reason; other connections are unaffected):
- a size prefix that is negative or above `frame_bytes_max`, or a frame cut short (the stream
  cannot be resynchronized);
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
import logging
from typing import Any, Final

import msgspec
from kio.schema.errors import ErrorCode as WireError

from diskless import DisklessBroker
from diskless.kafka_server._codec import (
    FRAME_BYTES_MAX,
    FRAME_SIZE,
    FrameError,
    decode_request,
    encode_response,
    read_prefix,
    request_schema,
)
from diskless.kafka_server._groups import GroupCoordinator
from diskless.kafka_server._handlers import HANDLERS, api_versions_response
from diskless.kafka_server._metadata import BrokerAddress, ClusterView
from diskless.kafka_server._txn import TransactionFront
from diskless.kafka_server._versions import API_VERSIONS_FALLBACK, ApiKey, supported

_log = logging.getLogger(__name__)

LISTEN_HOST: Final = "127.0.0.1"


class ServerConfig(msgspec.Struct, frozen=True):
    frame_bytes_max: int = FRAME_BYTES_MAX
    requests_inflight_max: int = 16
    """Requests of one connection decoded but not yet answered."""
    fetch_wait_ms_max: int = 5_000
    """Caps a Fetch's max_wait: how long an empty fetch may be held before answering."""
    fetch_poll_ms: int = 10
    """How often a held fetch asks the coordinator again (any broker may append)."""
    auto_create_topic_partitions: int = 0
    """Metadata for an unknown topic creates it with this many partitions when the client allows
    it (Kafka's auto.create.topics.enable with num.partitions); 0 never creates."""

    def __post_init__(self) -> None:
        if not 0 < self.frame_bytes_max <= 2**31 - 1:
            raise ValueError("frame_bytes_max must be in (0, 2**31)")
        if self.requests_inflight_max < 1:
            raise ValueError("requests_inflight_max must be >= 1")
        if self.fetch_wait_ms_max < 0 or self.fetch_poll_ms < 1:
            raise ValueError("fetch_wait_ms_max must be >= 0 and fetch_poll_ms >= 1")
        if self.auto_create_topic_partitions < 0:
            raise ValueError("auto_create_topic_partitions must be >= 0")


class Connection:
    """What the server learns about one client connection."""

    __slots__ = ("client_rack", "peer")

    def __init__(self, peer: str) -> None:
        self.peer = peer
        self.client_rack: str | None = None
        """Set from Fetch's rack_id (the consumer's client.rack); None until then."""


class _Close(Exception):
    """Stop serving this connection after what was already answered."""


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
    ) -> None:
        self.broker = broker
        self.cluster = cluster
        self.transactions = transactions
        self.groups = groups
        self.config = config if config is not None else ServerConfig()
        self._port = port
        self._server: asyncio.Server | None = None
        self._connections: dict[asyncio.Task[None], asyncio.StreamWriter] = {}
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
        self._server = await asyncio.start_server(self._accept, LISTEN_HOST, self._port)
        self._port = self._server.sockets[0].getsockname()[1]
        self.cluster.join(self.address)
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
        server.close()
        for task, writer in list(self._connections.items()):
            if abort:
                writer.transport.abort()
            else:
                writer.close()
            task.cancel()
        await asyncio.gather(*self._connections, return_exceptions=True)
        await server.wait_closed()
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
            await self._serve(Connection(peer), reader, writer)
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
                    frame = await self._read_frame(reader)
                except _Close as e:
                    _log.warning("closing %s on broker %d: %s", connection.peer, self.broker_id, e)
                    break
                if frame is None:
                    break  # the client closed the connection
                try:
                    answer = self._dispatch(connection, frame)
                except FrameError as e:
                    _log.warning("closing %s on broker %d: %s", connection.peer, self.broker_id, e)
                    break
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

    async def _read_frame(self, reader: asyncio.StreamReader) -> bytes | None:
        try:
            prefix = await reader.readexactly(FRAME_SIZE.size)
        except asyncio.IncompleteReadError as e:
            if e.partial:
                raise _Close("connection ended inside a size prefix") from None
            return None
        (size,) = FRAME_SIZE.unpack(prefix)
        if size < 0 or size > self.config.frame_bytes_max:
            raise _Close(f"frame size {size} outside [0, {self.config.frame_bytes_max}]")
        try:
            return await reader.readexactly(size)
        except asyncio.IncompleteReadError as e:
            raise _Close(f"connection ended after {len(e.partial)} of {size} bytes") from None

    def _dispatch(self, connection: Connection, frame: bytes) -> asyncio.Future[bytes | None]:
        """Decode one request and start its handler; FrameError when the connection must close.

        Synchronous: handlers start in the order their requests arrived.
        """
        prefix = read_prefix(frame)
        key, version = prefix.api_key, prefix.api_version
        if key == ApiKey.API_VERSIONS and not supported(key, version):
            response = api_versions_response(API_VERSIONS_FALLBACK, WireError.unsupported_version)
            done: asyncio.Future[bytes | None] = asyncio.get_running_loop().create_future()
            done.set_result(encode_response(prefix.correlation_id, response))
            return done
        if not supported(key, version):
            raise FrameError(f"api key {key} v{version} is not supported")
        schema = request_schema(key, version)
        assert schema is not None, (key, version)  # every advertised version is modelled
        request = decode_request(frame, schema)
        if key == ApiKey.PRODUCE:
            self.produce_requests[request.client_id or ""] += 1
        handler = HANDLERS[ApiKey(key)]
        return asyncio.ensure_future(
            self._answer(handler(self, connection, version, request.body), prefix.correlation_id)
        )

    @staticmethod
    async def _answer(handling: Any, correlation_id: int) -> bytes | None:
        response = await handling
        return None if response is None else encode_response(correlation_id, response)

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
            except Exception:
                _log.exception(
                    "closing %s on broker %d: a handler failed", connection.peer, self.broker_id
                )
                writer.transport.abort()
                return
            if data is not None:
                writer.write(data)
                await writer.drain()
