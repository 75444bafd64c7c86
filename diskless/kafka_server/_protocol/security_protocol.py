"""Kafka's security protocols: how a listener's connections are carried (TLS or not) and whether
they authenticate with SASL before any other request (Kafka's `SecurityProtocol`).

It lives with the protocol, below the handlers, because a connection's `Session` names its
listener's protocol; the server's modules import it from here.
"""

from __future__ import annotations

import enum


class SecurityProtocol(enum.Enum):
    """The names are Kafka's, as they appear in `listeners` and
    `listener.security.protocol.map`."""

    PLAINTEXT = "PLAINTEXT"
    SSL = "SSL"
    SASL_PLAINTEXT = "SASL_PLAINTEXT"
    SASL_SSL = "SASL_SSL"

    @property
    def uses_tls(self) -> bool:
        """Connections are TLS from their first byte."""
        return self in (SecurityProtocol.SSL, SecurityProtocol.SASL_SSL)

    @property
    def uses_sasl(self) -> bool:
        """A client must authenticate (SaslHandshake, SaslAuthenticate) before other requests."""
        return self in (SecurityProtocol.SASL_PLAINTEXT, SecurityProtocol.SASL_SSL)
