"""The server side of a SCRAM-SHA-256 / SCRAM-SHA-512 exchange (RFC 5802, RFC 7677), as Kafka
speaks it (its `ScramSaslServer`).

    client-first   n,[a=authzid],n=user,r=cnonce[,extensions]
    server-first   r=cnonce+snonce,s=salt,i=iterations
    client-final   c=base64(gs2 header),r=cnonce+snonce[,extensions],p=proof
    server-final   v=server signature

Kafka's specifics kept: channel binding is not supported (the gs2 flag must be `n`); an
authorization id, if given, must be the user name; the `tokenauth` extension (delegation tokens)
is refused, other extensions are ignored; names escape `,` and `=` as `=2C` and `=3D`.

A failure says nothing about what was wrong. A user without a credential gets a server-first
message like any other (a decoy salt derived from the name, the minimum iteration count) and
fails at the proof, exactly as a wrong password does: neither the answer nor the number of
round trips tells whether the user exists. (Kafka fails an unknown user at the first message.)
"""

from __future__ import annotations

import base64
import binascii
import hmac
import secrets
from collections.abc import Awaitable, Callable
from typing import Final

from diskless._scram import (
    ITERATIONS_MIN,
    ScramCredential,
    ScramMechanism,
    hmac_digest,
    stored_key,
)

Lookup = Callable[[str, ScramMechanism], Awaitable[ScramCredential | None]]
"""The stored credential of (user, mechanism), None when there is none; raises on an
infrastructure failure (the exchange then ends without an answer)."""

TOKEN_AUTH: Final = "tokenauth"
NONCE_BYTES: Final = 24
"""Random bytes in the server's nonce part (32 characters once encoded)."""


class SaslFailure(Exception):
    """Authentication failed. `client_message` is what the client is told (None: Kafka's generic
    "invalid credentials" message); `str(self)` is the reason for the log, which never holds
    key material or passwords."""

    def __init__(self, reason: str, client_message: str | None = None) -> None:
        super().__init__(reason)
        self.client_message = client_message


def _printable(text: str) -> bool:
    return bool(text) and all("\x21" <= ch <= "\x7e" and ch != "," for ch in text)


def decode_saslname(name: str) -> str:
    """A `saslname` of RFC 5802: `=2C` is `,` and `=3D` is `=`; any other `=` is malformed."""
    if any(ch in ",\0" for ch in name):
        raise SaslFailure("malformed user name")
    parts = name.split("=")
    decoded = [parts[0]]
    for part in parts[1:]:
        if part[:2] == "2C":
            decoded.append("," + part[2:])
        elif part[:2] == "3D":
            decoded.append("=" + part[2:])
        else:
            raise SaslFailure("malformed user name")
    return "".join(decoded)


def _attributes(fields: list[str]) -> dict[str, str]:
    found: dict[str, str] = {}
    for entry in fields:
        key, eq, value = entry.partition("=")
        if not eq or not key.isalpha():
            raise SaslFailure("malformed SCRAM message")
        found[key] = value
    return found


class ScramServer:
    """One connection's exchange: `evaluate` each client message; `complete` once the client
    proved its password, then `user` is who it is."""

    def __init__(
        self,
        mechanism: ScramMechanism,
        lookup: Lookup,
        *,
        decoy_key: bytes,
        nonce: Callable[[], str] | None = None,
    ) -> None:
        """`decoy_key`: a secret of the process, from which an unknown user's decoy salt is
        derived (the same salt every time the name is tried); `nonce`: the server's nonce part
        (random by default; a test vector fixes it)."""
        self.mechanism = mechanism
        self._lookup = lookup
        self._decoy_key = decoy_key
        self._nonce = nonce if nonce is not None else lambda: secrets.token_urlsafe(NONCE_BYTES)
        self.complete = False
        self.user: str | None = None
        self._credential: ScramCredential | None = None
        self._gs2_header = ""
        self._client_first_bare = ""
        self._server_first = ""
        self._combined_nonce = ""
        self._step = 0

    async def evaluate(self, token: bytes) -> bytes:
        """The answer to the client's next message; SaslFailure when authentication fails."""
        try:
            text = token.decode("utf-8")
        except UnicodeDecodeError:
            raise SaslFailure("a SCRAM message is not UTF-8") from None
        self._step += 1
        if self._step == 1:
            return (await self._first(text)).encode()
        if self._step == 2:
            return self._final(text).encode()
        raise SaslFailure("SCRAM message after the exchange ended")

    async def _first(self, text: str) -> str:
        fields = text.split(",")
        if len(fields) < 4:
            raise SaslFailure("malformed SCRAM client-first message")
        flag, authzid = fields[0], fields[1]
        if flag != "n":
            raise SaslFailure(f"channel binding flag {flag[:1]!r} is not supported")
        if authzid and not authzid.startswith("a="):
            raise SaslFailure("malformed SCRAM authorization id")
        if fields[2][:2] != "n=" or fields[3][:2] != "r=":
            raise SaslFailure("malformed SCRAM client-first message")
        user = decode_saslname(fields[2][2:])
        client_nonce = fields[3][2:]
        if not user or not _printable(client_nonce):
            raise SaslFailure("malformed SCRAM client-first message")
        extensions = _attributes(fields[4:])
        if extensions.get(TOKEN_AUTH, "false").lower() == "true":
            raise SaslFailure("delegation tokens (the tokenauth extension) are not supported")
        if authzid and decode_saslname(authzid[2:]) != user:
            raise SaslFailure(
                "authorization id is not the user name",
                "Authentication failed: Client requested an authorization id that is different"
                " from username",
            )
        self.user = user
        self._gs2_header = f"{flag},{authzid},"
        self._client_first_bare = ",".join(fields[2:])
        self._credential = await self._lookup(user, self.mechanism)
        if self._credential is not None:
            salt, iterations = self._credential.salt, self._credential.iterations
        else:
            salt = hmac.digest(self._decoy_key, user.encode(), "sha256")
            iterations = ITERATIONS_MIN
        self._combined_nonce = client_nonce + self._nonce()
        salt_text = base64.b64encode(salt).decode()
        self._server_first = f"r={self._combined_nonce},s={salt_text},i={iterations}"
        return self._server_first

    def _final(self, text: str) -> str:
        without_proof, sep, proof_text = text.rpartition(",p=")
        fields = without_proof.split(",")
        if not sep or len(fields) < 2 or fields[0][:2] != "c=" or fields[1][:2] != "r=":
            raise SaslFailure("malformed SCRAM client-final message")
        _attributes(fields[2:])
        binding = base64.b64encode(self._gs2_header.encode()).decode()
        if fields[0][2:] != binding:
            raise SaslFailure("channel binding does not match the client-first message")
        if fields[1][2:] != self._combined_nonce:
            raise SaslFailure("invalid nonce in the SCRAM client-final message")
        try:
            proof = base64.b64decode(proof_text, validate=True)
        except binascii.Error:
            raise SaslFailure("malformed SCRAM client proof") from None
        credential = self._credential
        if credential is None:
            raise SaslFailure("no SCRAM credential for the user")
        auth_message = f"{self._client_first_bare},{self._server_first},{without_proof}".encode()
        signature = hmac_digest(self.mechanism, credential.stored_key, auth_message)
        if len(proof) != len(signature):
            raise SaslFailure("invalid client proof")
        client = bytes(a ^ b for a, b in zip(proof, signature, strict=True))
        if not hmac.compare_digest(stored_key(self.mechanism, client), credential.stored_key):
            raise SaslFailure("invalid client proof")
        self.complete = True
        server_signature = hmac_digest(self.mechanism, credential.server_key, auth_message)
        return "v=" + base64.b64encode(server_signature).decode()
