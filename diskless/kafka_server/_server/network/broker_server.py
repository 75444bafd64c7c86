"""One broker's Kafka listeners: asyncio TCP servers, one per listener
(`_server.settings.listeners`; by default one PLAINTEXT listener on 127.0.0.1), each accepted
connection served by a `Connection` (framing, order, limits) with a `Session` naming its
listener, each request routed by the handler table. A TLS listener's connections are upgraded
before anything is read: one whose handshake fails or does not finish within
`ssl_handshake_timeout_ms` is closed with a rate-limited warning (a plaintext client on a TLS
port; a TLS client on a plaintext port sends a size prefix beyond any frame, and is closed for
that).

The listener knows no API: each frame goes to the broker's `Dispatcher` (`_dispatcher`), which
routes it by the handler table, and the handlers see the server as their `BrokerContext`: the
broker, its settings and the coordination it fronts.
"""

from __future__ import annotations

import asyncio
import collections
import functools
import logging
import socket
import ssl
from collections.abc import Sequence
from typing import Final

from diskless import DisklessBroker
from diskless._availability import log_failure
from diskless.kafka_server._coordination.acl_cache import AclCache
from diskless.kafka_server._coordination.cluster_view import BrokerAddress, ClusterView, Endpoint
from diskless.kafka_server._coordination.credentials import Credentials
from diskless.kafka_server._coordination.group_coordinator import GroupCoordinator
from diskless.kafka_server._coordination.share_front import ShareFront
from diskless.kafka_server._coordination.txn_front import TransactionFront
from diskless.kafka_server._handlers.context import BrokerSetting, Session
from diskless.kafka_server._protocol.apis import ApiKey
from diskless.kafka_server._server.auth._principal_rules import Rule, parse_rules
from diskless.kafka_server._server.auth.tls import NoMatchingRule
from diskless.kafka_server._server.network._authenticator import Authenticator
from diskless.kafka_server._server.network._connection import Connection, ConnectionSweeper
from diskless.kafka_server._server.network._dispatcher import Dispatcher
from diskless.kafka_server._server.network._log_limit import RateLimitedWarnings
from diskless.kafka_server._server.network._peer import peer_session
from diskless.kafka_server._server.network._request_budget import RequestBudget
from diskless.kafka_server._server.settings.config import ServerConfig
from diskless.kafka_server._server.settings.listeners import BrokerListener, ListenerPlan
from diskless.kafka_server._server.settings.server_properties import settings
from diskless.metrics import NULL_METRICS, Metrics

_log = logging.getLogger(__name__)


ACCEPTED_CALLBACK_ITERATIONS: Final = 2
"""Loop iterations from a listener's accept to its connection callback's first step."""


class BrokerServer:
    """The Kafka listener of one `DisklessBroker`; `start`, then `close` (or `abort`)."""

    def __init__(
        self,
        broker: DisklessBroker,
        cluster: ClusterView,
        transactions: TransactionFront,
        groups: GroupCoordinator,
        credentials: Credentials,
        shares: ShareFront,
        *,
        port: int = 0,
        config: ServerConfig | None = None,
        request_budget: RequestBudget | None = None,
        listeners: Sequence[BrokerListener] | None = None,
        metrics: Metrics = NULL_METRICS,
        acls: AclCache | None = None,
    ) -> None:
        """`request_budget`: the `queued_request_bytes_max` budget, when shared with other servers
        of the same process (a `KafkaCluster` passes one to all of its brokers). `listeners`:
        this broker's (`ListenerPlan.for_broker`); by default one PLAINTEXT listener on
        127.0.0.1 at `port` (0: a free one). `metrics`: where requests and connections are
        reported (handlers reach it as `context.metrics`). `acls`: the authorizer's ACLs (None:
        no authorizer, everything is allowed)."""
        self.acls = acls
        self.broker = broker
        self.metrics = metrics
        self.cluster = cluster
        self.transactions = transactions
        self.groups = groups
        self.shares = shares
        self.credentials = credentials
        self.config = config if config is not None else ServerConfig()
        self.request_budget = (
            request_budget
            if request_budget is not None
            else RequestBudget(self.config.queued_request_bytes_max)
        )
        self._listeners = (
            list(listeners)
            if listeners is not None
            else ListenerPlan((), {}, {}).for_broker(0, default_port=port)
        )
        if not self._listeners:
            raise ValueError(f"broker {broker.broker_id} has no listener")
        self._servers: dict[str, asyncio.Server] = {}
        """Listener name -> its server, while listening."""
        self._tls: dict[str, ssl.SSLContext] = {}
        """Listener name -> the TLS context its connections are upgraded with."""
        self._rules: dict[str, tuple[Rule, ...]] = {}
        """Listener name -> its `ssl.principal.mapping.rules`."""
        self._endpoints: tuple[Endpoint, ...] = ()
        """What this broker advertises, once listening."""
        self._connections: dict[asyncio.Task[None], asyncio.StreamWriter] = {}
        self._sessions: dict[asyncio.Task[None], Session] = {}
        self._sweeper = ConnectionSweeper(self.config)
        self._sweeping: asyncio.Task[None] | None = None
        self._dispatch = Dispatcher(self, inline_frame_bytes_max=self.config.inline_frame_bytes_max)
        self._close_warnings = RateLimitedWarnings(
            _log,
            interval_s=self.config.close_warning_interval_ms / 1000,
            burst=self.config.close_warnings_max,
            what="connection closes",
        )
        self._authenticator = Authenticator(
            self.config,
            credentials,
            self._dispatch,
            self.request_budget,
            broker_id=self.broker_id,
            metrics=metrics,
        )

    @property
    def broker_id(self) -> int:
        return self.broker.broker_id

    @property
    def rack(self) -> str | None:
        return self.broker.rack

    @property
    def broker_settings(self) -> list[BrokerSetting]:
        return settings(self.config)

    @property
    def address(self) -> BrokerAddress:
        """The broker as Metadata names it: its first listener's advertised endpoint, and all of
        them by listener name."""
        if not self._endpoints:
            raise RuntimeError("the server is not listening")
        first = self._endpoints[0]
        endpoints = self._endpoints if len(self._listeners) > 1 else ()
        return BrokerAddress(self.broker_id, first.host, first.port, self.rack, endpoints)

    @property
    def bootstrap(self) -> str:
        return self.bootstrap_on(self._endpoints[0].listener if self._endpoints else "")

    def bootstrap_on(self, listener: str) -> str:
        """`host:port` of this broker's advertised endpoint of `listener`."""
        where = self.address.on(listener)
        if where is None:
            raise KeyError(f"broker {self.broker_id} has no listener {listener}")
        host, port = where
        return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"

    async def start(self) -> None:
        if self._servers:
            return
        self._dispatch.open()
        endpoints = []
        try:
            for listener in self._listeners:
                if listener.protocol.uses_tls:
                    settings = self.config.tls_for(listener.name)
                    self._tls[listener.name] = settings.server_context()
                    self._rules[listener.name] = parse_rules(settings.principal_mapping_rules)
                server = await asyncio.start_server(
                    functools.partial(self._accept, listener),
                    listener.host or None,  # empty: every interface, as Kafka binds it
                    listener.port,
                )
                self._servers[listener.name] = server
                _set_buffers(server, self.config)
                port = listener.advertised_port or server.sockets[0].getsockname()[1]
                if listener.advertised:
                    endpoints.append(Endpoint(listener.name, listener.advertised_host, port))
        except BaseException:
            for server in self._servers.values():
                server.close()
            self._servers.clear()
            raise
        self._endpoints = tuple(endpoints)
        self._sweeping = asyncio.create_task(self._sweeper.run())
        self.cluster.join(self.address, self.broker.broker_epoch)
        _log.info(
            "broker %d (rack %s) listening on %s",
            self.broker_id,
            self.rack,
            ", ".join(self._describe(listener) for listener in self._listeners),
        )

    def _describe(self, listener: BrokerListener) -> str:
        advertised = self.bootstrap_on(listener.name) if listener.advertised else "not"
        bound = _bound(self._servers[listener.name])
        return f"{listener.name} {bound} ({listener.protocol.value}, advertised {advertised})"

    async def close(self) -> None:
        """Stop listening, leave the cluster, end every connection; the broker stays open."""
        await self._stop(abort=False)

    async def abort(self) -> None:
        """Like `close`, but connections are reset at once, answered or not (a crash)."""
        await self._stop(abort=True)

    async def _stop(self, *, abort: bool) -> None:
        servers = list(self._servers.values())
        if not servers:
            return
        address = self.address
        self._servers.clear()
        self.cluster.leave(self.broker_id)
        for server in servers:
            server.close()
        # A connection accepted just before the close has its callback still to run: it finds
        # no servers and aborts its transport (`_accept`). Its transport is made in one loop
        # iteration and the callback's task starts in the next, so these two let every such
        # callback run before the connections are counted, even when nothing below awaits.
        for _ in range(ACCEPTED_CALLBACK_ITERATIONS):
            await asyncio.sleep(0)
        if not abort:
            await self.cluster.withdraw(address, self.broker.broker_epoch)
        if self._sweeping is not None:
            self._sweeping.cancel()
            self._sweeping = None
        for task, writer in list(self._connections.items()):
            if abort:
                writer.transport.abort()
            else:
                writer.close()
            task.cancel()
        await asyncio.gather(*self._connections, return_exceptions=True)
        for server in servers:
            await server.wait_closed()
        self._close_warnings.flush()
        self._authenticator.failures.flush()
        self._dispatch.close()
        _log.info("broker %d stopped listening (abort=%s)", self.broker_id, abort)

    # --- connections --------------------------------------------------------------------------
    async def _accept(
        self, listener: BrokerListener, reader: asyncio.StreamReader, writer: asyncio.StreamWriter
    ) -> None:
        task = asyncio.current_task()
        assert task is not None
        if not self._servers:
            self.metrics.connection_rejected(listener.name, "closing")
            writer.transport.abort()
            return
        self._connections[task] = writer
        opened: str | None = None
        connection: Connection | None = None
        try:
            tls = self._tls.get(listener.name)
            if tls is not None and not await self._handshake(writer, tls, listener.name):
                return
            try:
                session = self._sessions[task] = peer_session(
                    writer,
                    listener=listener.name,
                    security_protocol=listener.protocol,
                    rules=self._rules.get(listener.name, ()),
                )
            except NoMatchingRule as refused:  # Kafka fails the authentication
                self.metrics.authentication_failed(listener.name, "SSL")
                self._close_warnings.warning(
                    "closing %s on broker %d: %s", _peer_text(writer), self.broker_id, refused
                )
                return
            opened = session.listener
            self.metrics.connection_opened(opened)
            connection = Connection(
                session,
                config=self.config,
                budget=self.request_budget,
                warnings=self._close_warnings,
                dispatch=self._dispatch,
                broker_id=self.broker_id,
                metrics=self.metrics,
            )
            self._sweeper.watch(connection)
            if session.security_protocol.uses_sasl and not await self._authenticator.authenticate(
                session, reader, writer
            ):
                return
            await connection.serve(reader, writer)
        except asyncio.CancelledError:
            # Only `_stop` cancels a connection; ending quietly keeps asyncio's stream callback
            # from reporting the cancellation as an error.
            pass
        except (OSError, asyncio.IncompleteReadError) as error:  # the client left (a reset)
            _log.debug("%s left broker %d: %r", _peer_text(writer), self.broker_id, error)
        except Exception as error:
            # Nothing else is expected here; ending the connection with one line (the others
            # are unaffected) keeps asyncio from reporting it as an unhandled callback error.
            log_failure(
                _log, error, "closing %s on broker %d", _peer_text(writer), self.broker_id,
                level=logging.ERROR,
            )  # fmt: skip
        finally:
            if opened is not None:
                self.metrics.connection_closed(opened)
            if connection is not None:
                self._sweeper.forget(connection)
            self._connections.pop(task, None)
            ended = self._sessions.pop(task, None)
            if ended is not None:  # its share sessions end with it, as in Kafka
                self.shares.disconnected(self.broker, ended)
            writer.transport.abort() if writer.transport.is_closing() else writer.close()

    async def _handshake(
        self, writer: asyncio.StreamWriter, tls: ssl.SSLContext, listener: str
    ) -> bool:
        """Upgrade an accepted connection to TLS within `ssl_handshake_timeout_ms`; False (the
        connection is to be closed, with a rate-limited warning naming only the peer and the
        TLS library's reason) when the client does not complete it: a plaintext client, one
        whose certificate is refused, one that says nothing."""
        try:
            await writer.start_tls(
                tls, ssl_handshake_timeout=self.config.ssl_handshake_timeout_ms / 1000
            )
        except (OSError, TimeoutError) as error:  # ssl.SSLError is an OSError
            reason = (error.reason if isinstance(error, ssl.SSLError) else None) or (
                str(error) or type(error).__name__  # e.g. asyncio's "taking longer than" abort
            )
            self._close_warnings.warning(
                "closing %s on broker %d: TLS handshake on listener %s failed: %s",
                _peer_text(writer),
                self.broker_id,
                listener,
                reason,
            )
            return False
        return True

    def sessions(self) -> list[Session]:
        """The sessions of the connections open now: who is connected, from where, on which
        listener."""
        return list(self._sessions.values())

    def received(self, api: ApiKey) -> collections.Counter[str]:
        """Requests of `api` this broker received, per client id (where routing sent whom)."""
        return self._dispatch.received(api)


def _set_buffers(server: asyncio.Server, config: ServerConfig) -> None:
    """`socket.send.buffer.bytes` / `socket.receive.buffer.bytes` on the listening sockets,
    which the connections they accept inherit (-1: the system's default, left alone)."""
    for sock in server.sockets:
        for option, size in (
            (socket.SO_SNDBUF, config.socket_send_buffer_bytes),
            (socket.SO_RCVBUF, config.socket_receive_buffer_bytes),
        ):
            if size != -1:
                sock.setsockopt(socket.SOL_SOCKET, option, size)


def _bound(server: asyncio.Server) -> str:
    host, port = server.sockets[0].getsockname()[:2]
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


def _peer_text(writer: asyncio.StreamWriter) -> str:
    peer = writer.get_extra_info("peername")
    return f"{peer[0]}:{peer[1]}" if isinstance(peer, tuple) and len(peer) >= 2 else str(peer)
