"""One broker's Kafka listener: asyncio TCP on 127.0.0.1, each accepted connection served by a
`Connection` (framing, order, limits), each request routed by the handler table.

The listener is where requests meet the APIs, and only through the handler table
(`_handlers.table`): a frame's API key and version pick its route, or none (the connection is
closed: an API key this server does not know, or a version it does not advertise, other than
ApiVersions, which is answered, as Kafka does, with a v0 response carrying UNSUPPORTED_VERSION and
the supported ranges). The listener knows no API beyond that; requests are counted per API key
and client id (`received`). Handlers see the listener as their `BrokerContext`.

A frame above `inline_frame_bytes_max` is decoded, and its response encoded, in a worker thread:
time on the event loop is shared by every broker of the process.
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
from diskless.kafka_server._coordination.acl_cache import AclCache
from diskless.kafka_server._coordination.cluster_view import BrokerAddress, ClusterView
from diskless.kafka_server._coordination.group_coordinator import GroupCoordinator
from diskless.kafka_server._coordination.txn_front import TransactionFront
from diskless.kafka_server._handlers.context import Session
from diskless.kafka_server._handlers.table import route, unsupported_version_answer
from diskless.kafka_server._protocol.apis import ApiKey
from diskless.kafka_server._protocol.codec import (
    DecodedRequest,
    FrameError,
    decode_request,
    encode_response,
    read_prefix,
    request_schema,
)
from diskless.kafka_server._server._connection import Answer, Connection
from diskless.kafka_server._server._log_limit import RateLimitedWarnings
from diskless.kafka_server._server._peer import peer_session
from diskless.kafka_server._server._request_budget import RequestBudget
from diskless.kafka_server._server.config import ServerConfig

_log = logging.getLogger(__name__)

LISTEN_HOST: Final = "127.0.0.1"
_Result = TypeVar("_Result")


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
        acls: AclCache | None = None,
    ) -> None:
        """`request_budget`: the `queued_request_bytes_max` budget, when shared with other servers
        of the same process (a `KafkaCluster` passes one to all of its brokers). `acls`: the
        authorizer's ACLs (None: no authorizer, everything is allowed)."""
        self.acls = acls
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
        self._sessions: dict[asyncio.Task[None], Session] = {}
        self._codec: concurrent.futures.ThreadPoolExecutor | None = None
        self._close_warnings = RateLimitedWarnings(
            _log,
            interval_s=self.config.close_warning_interval_ms / 1000,
            burst=self.config.close_warnings_max,
            what="connection closes",
        )
        self._received: collections.Counter[tuple[ApiKey, str]] = collections.Counter()

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
        session = self._sessions[task] = peer_session(writer)
        connection = Connection(
            session,
            config=self.config,
            budget=self.request_budget,
            warnings=self._close_warnings,
            dispatch=self._dispatch,
            broker_id=self.broker_id,
        )
        try:
            await connection.serve(reader, writer)
        except asyncio.CancelledError:
            # Only `_stop` cancels a connection; ending quietly keeps asyncio's stream callback
            # from reporting the cancellation as an error.
            pass
        finally:
            self._connections.pop(task, None)
            self._sessions.pop(task, None)
            writer.transport.abort() if writer.transport.is_closing() else writer.close()

    def sessions(self) -> list[Session]:
        """The sessions of the connections open now: who is connected, from where, on which
        listener."""
        return list(self._sessions.values())

    def received(self, api: ApiKey) -> collections.Counter[str]:
        """Requests of `api` this broker received, per client id (where routing sent whom)."""
        return collections.Counter(
            {client: n for (key, client), n in self._received.items() if key is api}
        )

    async def _dispatch(self, session: Session, frame: memoryview) -> Answer:
        """Decode one request and start its handler; FrameError when the connection must close
        (see `_connection.Dispatch`)."""
        prefix = read_prefix(frame)
        key, version = prefix.api_key, prefix.api_version
        handler = route(key, version)
        if handler is None:
            response = unsupported_version_answer(key)
            if response is None:
                raise FrameError(f"api key {key} v{version} is not supported")
            done: Answer = asyncio.get_running_loop().create_future()
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
        self._received[(handler.api.key, request.client_id or "")] += 1
        handling = handler(self, session, request.body)
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
