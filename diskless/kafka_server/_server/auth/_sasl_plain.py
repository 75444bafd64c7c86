"""The server side of SASL/PLAIN (RFC 4616), as Kafka speaks it (its `PlainSaslServer`): one
message, `authzid NUL user NUL password`, checked against the users of the listener's JAAS entry
(`_jaas`). PLAIN sends the password itself: use it over TLS (SASL_SSL)."""

from __future__ import annotations

import hmac
from collections.abc import Mapping

from diskless.kafka_server._server.auth._sasl_scram import SaslFailure


class PlainServer:
    """One connection's exchange; `complete` once the password matched, then `user` is who it is."""

    mechanism_name = "PLAIN"

    def __init__(self, users: Mapping[str, str]) -> None:
        self._users = users
        self.complete = False
        self.user: str | None = None

    async def evaluate(self, token: bytes) -> bytes:
        if self.complete:
            raise SaslFailure("PLAIN message after the exchange ended")
        try:
            text = token.decode("utf-8")
        except UnicodeDecodeError:
            raise SaslFailure("the PLAIN message is not UTF-8") from None
        parts = text.split("\0")
        if len(parts) != 3:
            raise SaslFailure(f"invalid SASL/PLAIN response: expected 3 tokens, got {len(parts)}")
        authzid, user, password = parts
        if not user:
            raise SaslFailure("no user name", "Authentication failed: username not specified")
        if not password:
            raise SaslFailure("no password", "Authentication failed: password not specified")
        expected = self._users.get(user)
        # Compared in constant time, and compared even for an unknown user, so that the time
        # taken does not tell whether the user exists.
        matched = hmac.compare_digest(
            password.encode(), (expected if expected is not None else "\0" + password).encode()
        )
        if expected is None or not matched:
            message = "Authentication failed: Invalid username or password"
            raise SaslFailure("invalid user name or password", message)
        if authzid and authzid != user:
            raise SaslFailure(
                "authorization id is not the user name",
                "Authentication failed: Client requested an authorization id that is different"
                " from username",
            )
        self.user = user
        self.complete = True
        return b""
