"""Who is at the other end of an accepted connection, as the `Session` names it."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Sequence

from diskless.kafka_server._handlers.context import ANONYMOUS, DEFAULT_LISTENER, Session
from diskless.kafka_server._protocol.security_protocol import SecurityProtocol
from diskless.kafka_server._server.auth._principal_rules import Rule
from diskless.kafka_server._server.auth.tls import principal

_log = logging.getLogger(__name__)


def peer_session(
    writer: asyncio.StreamWriter,
    *,
    listener: str = DEFAULT_LISTENER,
    security_protocol: SecurityProtocol = SecurityProtocol.PLAINTEXT,
    rules: Sequence[Rule] = (),
) -> Session:
    """The session of a connection just accepted on `listener`: the peer's IP address and port
    from its socket; the principal is the subject of its verified TLS client certificate, else
    anonymous until something (SASL) authenticates it. `rules`: the listener's
    `ssl.principal.mapping.rules` (`tls.NoMatchingRule` when none applies to the subject)."""
    peername = writer.get_extra_info("peername")
    if isinstance(peername, tuple) and len(peername) >= 2:
        host, port = str(peername[0]), peername[1]
        peer = f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
    else:  # not an IP socket (a Unix socket in a test): nothing to match hosts against
        host, peer = "", str(peername)
    certified = principal(writer.get_extra_info("ssl_object"), rules)
    if certified is not None:
        _log.debug("%s on listener %s authenticated as %s", peer, listener, certified)
    return Session(
        peer,
        client_host=host,
        listener=listener,
        security_protocol=security_protocol,
        principal=certified or ANONYMOUS,
    )
