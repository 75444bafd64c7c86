"""SCRAM credentials as Kafka keeps them (RFC 5802, RFC 7677): the mechanisms and the formulas.

A credential is what a server needs to check a password without knowing it: the salt, the
iteration count, StoredKey = H(HMAC(SaltedPassword, "Client Key")) and
ServerKey = HMAC(SaltedPassword, "Server Key"), where
SaltedPassword = PBKDF2-HMAC(password, salt, iterations). A client that creates a user sends the
SaltedPassword (KIP-554), never the password; the coordinator stores the credential, and the
broker's SCRAM exchange (`diskless.kafka_server`) checks a client's proof against it. Both
derive the keys here, so the two cannot disagree.
"""

from __future__ import annotations

import enum
import hashlib
import hmac
from typing import Final

import msgspec

ITERATIONS_MIN: Final = 4096
"""Kafka's minimum for both SHA mechanisms: fewer is refused (UNACCEPTABLE_CREDENTIAL)."""
ITERATIONS_MAX: Final = 16384
"""Kafka's maximum: more would let one credential cost a broker seconds per authentication."""


class ScramMechanism(enum.IntEnum):
    """Kafka's SCRAM mechanisms, numbered as AlterUserScramCredentials and
    DescribeUserScramCredentials number them (0 is Kafka's UNKNOWN, which names none)."""

    SCRAM_SHA_256 = 1
    SCRAM_SHA_512 = 2

    @property
    def mechanism_name(self) -> str:
        """The SASL mechanism name: "SCRAM-SHA-256" or "SCRAM-SHA-512"."""
        return self.name.replace("_", "-")

    @property
    def hash_name(self) -> str:
        return "sha256" if self is ScramMechanism.SCRAM_SHA_256 else "sha512"

    @classmethod
    def of_type(cls, number: int) -> ScramMechanism | None:
        """The mechanism a request's number names; None for an unknown one."""
        try:
            return cls(number)
        except ValueError:
            return None

    @classmethod
    def of_name(cls, name: str) -> ScramMechanism | None:
        """The mechanism of a SASL mechanism name; None when it names no SCRAM mechanism."""
        return next((m for m in cls if m.mechanism_name == name), None)


class ScramCredential(msgspec.Struct, frozen=True):
    """One user's credential for one mechanism: what is stored, never the password."""

    salt: bytes
    stored_key: bytes
    server_key: bytes
    iterations: int

    def __repr__(self) -> str:
        # Key material stays out of logs and assertion messages.
        return f"ScramCredential(iterations={self.iterations}, salt=[hidden], keys=[hidden])"


def hmac_digest(mechanism: ScramMechanism, key: bytes, message: bytes) -> bytes:
    return hmac.digest(key, message, mechanism.hash_name)


def hash_digest(mechanism: ScramMechanism, data: bytes) -> bytes:
    return hashlib.new(mechanism.hash_name, data).digest()


def salted_password(
    mechanism: ScramMechanism, password: bytes, salt: bytes, iterations: int
) -> bytes:
    """Hi(password, salt, i) of RFC 5802: PBKDF2 with the mechanism's HMAC."""
    return hashlib.pbkdf2_hmac(mechanism.hash_name, password, salt, iterations)


def client_key(mechanism: ScramMechanism, salted: bytes) -> bytes:
    return hmac_digest(mechanism, salted, b"Client Key")


def stored_key(mechanism: ScramMechanism, client: bytes) -> bytes:
    return hash_digest(mechanism, client)


def server_key(mechanism: ScramMechanism, salted: bytes) -> bytes:
    return hmac_digest(mechanism, salted, b"Server Key")


def credential(
    mechanism: ScramMechanism, salted: bytes, salt: bytes, iterations: int
) -> ScramCredential:
    """The stored credential of a salted password (what Kafka's controller derives from an
    upsertion)."""
    return ScramCredential(
        salt=salt,
        stored_key=stored_key(mechanism, client_key(mechanism, salted)),
        server_key=server_key(mechanism, salted),
        iterations=iterations,
    )


def credential_of_password(
    mechanism: ScramMechanism, password: str, salt: bytes, iterations: int
) -> ScramCredential:
    """The credential of a password (for tools and tests; clients send salted passwords)."""
    salted = salted_password(mechanism, password.encode(), salt, iterations)
    return credential(mechanism, salted, salt, iterations)
