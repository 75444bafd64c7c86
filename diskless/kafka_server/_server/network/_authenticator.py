"""SASL authentication of a connection on a SASL listener, before any request reaches the
handlers (Kafka's `SaslServerAuthenticator`, which runs before `KafkaApis`).

The exchange is sequential (one frame in, one answer out), as Kafka's is:
1. ApiVersions is answered by the handler table (again after one of a version it does not
   serve); SaslHandshake names a mechanism of the listener's `sasl.enabled.mechanisms`
   (otherwise UNSUPPORTED_SASL_MECHANISM, then the connection closes). Any other request
   closes the connection unanswered.
2. After SaslHandshake v1, each SaslAuthenticate carries the mechanism's next message; after v0,
   the messages come as raw size-prefixed tokens. Anything else closes the connection.
3. Success makes the session's principal `User:<name>`; then the connection serves requests
   (`_connection`). SaslAuthenticate's session lifetime is 0: no re-authentication is required.
4. Failure is answered with SASL_AUTHENTICATION_FAILED (58) after
   `connection.failed.authentication.delay.ms`, then the connection closes. The message is the
   mechanism's where Kafka gives one (PLAIN's "Invalid username or password"), else Kafka's
   generic one; neither says whether the user or the password was wrong.
The whole exchange must end within `sasl_handshake_ms_max`, and an unauthenticated client may
send frames of at most `sasl.server.max.receive.size`, reserved from the request budget.

When the batch coordinator cannot look a SCRAM credential up, the connection closes without a
verdict: a client treats SASL_AUTHENTICATION_FAILED as final, a closed connection as something
to retry. Failed authentications are logged rate-limited; no credential, password or token is
ever logged.
"""

from __future__ import annotations

import asyncio
import datetime
import logging
import secrets
from collections.abc import Awaitable
from typing import Final, Protocol

from kio.schema.errors import ErrorCode as WireError
from kio.static.protocol import RequestPayload

from diskless._availability import log_failure
from diskless.coordinator import ScramMechanism
from diskless.errors import DisklessError
from diskless.kafka_server._coordination.credentials import Credentials
from diskless.kafka_server._handlers.context import Session
from diskless.kafka_server._handlers.table import route
from diskless.kafka_server._protocol.apis import ApiKey
from diskless.kafka_server._protocol.codec import (
    FRAME_SIZE,
    FrameError,
    RequestPrefix,
    decode_request,
    encode_response,
    read_prefix,
    request_schema,
)
from diskless.kafka_server._protocol.fields import build
from diskless.kafka_server._server.auth._jaas import plain_users
from diskless.kafka_server._server.auth._sasl_plain import PlainServer
from diskless.kafka_server._server.auth._sasl_scram import SaslFailure, ScramServer
from diskless.kafka_server._server.network._connection import Dispatch
from diskless.kafka_server._server.network._log_limit import RateLimitedWarnings
from diskless.kafka_server._server.network._request_budget import RequestBudget
from diskless.kafka_server._server.settings.config import ServerConfig
from diskless.metrics import NULL_METRICS, Metrics

_log = logging.getLogger(__name__)

NO_SESSION_LIFETIME: Final = datetime.timedelta(0)
GENERIC_FAILURE: Final = (
    "Authentication failed during authentication due to invalid credentials with SASL mechanism "
)


class SaslServer(Protocol):
    """A mechanism's server side (`_sasl_plain`, `_sasl_scram`)."""

    complete: bool
    user: str | None

    def evaluate(self, token: bytes) -> Awaitable[bytes]: ...


class _Refused(Exception):
    """The client broke the protocol: close the connection, logging why."""


class _Failed(Exception):
    """Authentication failed: answer `response` (if any) after the delay, then close."""

    def __init__(self, mechanism: str, reason: str, response: bytes | None) -> None:
        super().__init__(f"{mechanism}: {reason}")
        self.mechanism = mechanism
        self.response = response


class Authenticator:
    """Authenticates the connections of one broker's SASL listeners."""

    def __init__(
        self,
        config: ServerConfig,
        credentials: Credentials,
        dispatch: Dispatch,
        budget: RequestBudget,
        *,
        broker_id: int,
        metrics: Metrics = NULL_METRICS,
    ) -> None:
        self._config = config
        self._metrics = metrics
        self._credentials = credentials
        self._dispatch = dispatch
        self._budget = budget
        self._broker_id = broker_id
        self._plain_users: dict[str, dict[str, str]] = {}
        """Listener name -> PLAIN's users there (read from the JAAS line once, when first used)."""
        self._decoy_key = secrets.token_bytes(32)
        """Derives the decoy salts shown for unknown SCRAM users (`_sasl_scram`)."""
        self.failures = RateLimitedWarnings(
            _log,
            interval_s=config.close_warning_interval_ms / 1000,
            burst=1,
            what="failed authentications",
        )
        """One line per interval, then how many more there were."""

    async def authenticate(
        self, session: Session, reader: asyncio.StreamReader, writer: asyncio.StreamWriter
    ) -> bool:
        """Run the exchange; True once the session is authenticated, False when the connection
        must close (it has been answered as far as Kafka answers)."""
        limit_ms = self._config.sasl_handshake_ms_max
        try:
            async with asyncio.timeout(limit_ms / 1000):
                user = await self._exchange(session, reader, writer)
        except _Failed as failed:
            self._metrics.authentication_failed(session.listener, failed.mechanism)
            self.failures.warning(
                "failed authentication of %s on broker %d (listener %s): %s",
                session.peer,
                self._broker_id,
                session.listener,
                failed,
            )
            await asyncio.sleep(self._config.connection_failed_authentication_delay_ms / 1000)
            if failed.response is not None:
                try:
                    writer.write(failed.response)
                    await writer.drain()
                except OSError as error:  # the client left without waiting for the answer
                    _log.debug("%s left before its failure was answered: %r", session.peer, error)
            return False
        except _Refused as refused:
            self.failures.warning(
                "closing %s on broker %d (listener %s) before authentication: %s",
                session.peer,
                self._broker_id,
                session.listener,
                refused,
            )
            return False
        except TimeoutError:
            self.failures.warning(
                "closing %s on broker %d (listener %s): not authenticated within %d ms",
                session.peer,
                self._broker_id,
                session.listener,
                limit_ms,
            )
            return False
        except DisklessError as error:
            log_failure(
                _log, error, "closing %s unauthenticated: no credential lookup", session.peer
            )
            return False
        except (OSError, asyncio.IncompleteReadError) as error:  # the client left (TLS too)
            _log.debug("%s left during authentication: %r", session.peer, error)
            return False
        session.principal = f"User:{user}"
        _log.debug("%s authenticated as %s on broker %d", session.peer, user, self._broker_id)
        return True

    async def _exchange(
        self, session: Session, reader: asyncio.StreamReader, writer: asyncio.StreamWriter
    ) -> str:
        versions_answered = False
        while True:
            frame = await self._read(reader)
            prefix = _prefix(frame)
            if prefix.api_key == ApiKey.API_VERSIONS and not versions_answered:
                # An unsupported version is answered with the ranges, and the client asks again.
                versions_answered = route(prefix.api_key, prefix.api_version) is not None
                try:
                    answer = await (await self._dispatch(session, memoryview(frame)))
                except FrameError as e:
                    raise _Refused(str(e)) from None
                if answer is not None:  # ApiVersions: small, one buffer
                    writer.write(answer if isinstance(answer, bytes) else b"".join(answer))
                    await writer.drain()
                continue
            if prefix.api_key != ApiKey.SASL_HANDSHAKE:
                raise _Refused(
                    f"unexpected request (api key {prefix.api_key}) before SaslHandshake"
                )
            mechanism = getattr(self._decode(frame, prefix), "mechanism", "")
            enabled = self._config.sasl_mechanisms_for(session.listener)
            known = mechanism in enabled
            code = WireError.none if known else WireError.unsupported_sasl_mechanism
            writer.write(self._encode(prefix, error_code=code, mechanisms=enabled))
            await writer.drain()
            if not known:
                raise _Refused(f"unsupported SASL mechanism {mechanism[:64]!r}")
            server = self._server(session, mechanism)
            if prefix.api_version == 0:
                return await self._raw_tokens(server, mechanism, reader, writer)
            return await self._requests(server, mechanism, reader, writer)

    async def _requests(
        self,
        server: SaslServer,
        mechanism: str,
        reader: asyncio.StreamReader,
        writer: asyncio.StreamWriter,
    ) -> str:
        """SaslAuthenticate requests, each carrying the mechanism's next message."""
        while True:
            frame = await self._read(reader)
            prefix = _prefix(frame)
            if prefix.api_key != ApiKey.SASL_AUTHENTICATE:
                raise _Refused(f"unexpected request (api key {prefix.api_key}) during SASL")
            token = getattr(self._decode(frame, prefix), "auth_bytes", b"")
            try:
                answer = await server.evaluate(token)
            except SaslFailure as failure:
                message = failure.client_message or GENERIC_FAILURE + mechanism
                response = self._encode(
                    prefix,
                    error_code=WireError.sasl_authentication_failed,
                    error_message=message,
                    auth_bytes=b"",
                    session_lifetime=NO_SESSION_LIFETIME,
                )
                raise _Failed(mechanism, str(failure), response) from None
            writer.write(
                self._encode(
                    prefix,
                    error_code=WireError.none,
                    error_message=None,
                    auth_bytes=answer,
                    session_lifetime=NO_SESSION_LIFETIME,
                )
            )
            await writer.drain()
            if server.complete:
                assert server.user is not None
                return server.user

    async def _raw_tokens(
        self,
        server: SaslServer,
        mechanism: str,
        reader: asyncio.StreamReader,
        writer: asyncio.StreamWriter,
    ) -> str:
        """After SaslHandshake v0: the mechanism's messages as bare size-prefixed tokens, with no
        way to say why one failed (the connection just closes, after the delay)."""
        while True:
            token = await self._read(reader)
            try:
                answer = await server.evaluate(token)
            except SaslFailure as failure:
                raise _Failed(mechanism, str(failure), None) from None
            writer.write(FRAME_SIZE.pack(len(answer)) + answer)
            await writer.drain()
            if server.complete:
                assert server.user is not None
                return server.user

    def _server(self, session: Session, mechanism: str) -> SaslServer:
        scram = ScramMechanism.of_name(mechanism)
        if scram is None:
            users = self._plain_users.get(session.listener)
            if users is None:
                text = self._config.plain_jaas_config_for(session.listener)
                users = self._plain_users[session.listener] = plain_users(text) if text else {}
            return PlainServer(users)
        return ScramServer(scram, self._credentials.scram, decoy_key=self._decoy_key)

    async def _read(self, reader: asyncio.StreamReader) -> bytes:
        (size,) = FRAME_SIZE.unpack(await reader.readexactly(FRAME_SIZE.size))
        size_max = self._config.sasl_server_max_receive_size
        if not 0 <= size <= size_max:
            raise _Refused(f"frame of {size} bytes before authentication (at most {size_max})")
        reservation = await self._budget.reserve(size)
        try:
            return await reader.readexactly(size)
        finally:
            reservation.release()

    def _decode(self, frame: bytes, prefix: RequestPrefix) -> RequestPayload:
        handler = route(prefix.api_key, prefix.api_version)
        if handler is None:
            raise _Refused(f"api key {prefix.api_key} v{prefix.api_version} is not supported")
        request_class = request_schema(prefix.api_key, prefix.api_version)
        assert request_class is not None
        try:
            return decode_request(frame, request_class).body
        except FrameError as e:
            raise _Refused(str(e)) from None

    def _encode(self, prefix: RequestPrefix, **values: object) -> bytes:
        handler = route(prefix.api_key, prefix.api_version)
        assert handler is not None  # decoded already
        schema = handler.api.response_schema(prefix.api_version)
        return encode_response(prefix.correlation_id, build(schema, **values))


def _prefix(frame: bytes) -> RequestPrefix:
    try:
        return read_prefix(frame)
    except FrameError as e:
        raise _Refused(str(e)) from None
