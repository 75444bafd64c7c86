"""A cluster with a SASL_PLAINTEXT listener for the SASL tests, and a raw SCRAM client.

The listener offers PLAIN (users from its JAAS line: `admin` and `alice`) and both SCRAM
mechanisms (users created through AlterUserScramCredentials). Without ACLs, any authenticated
user may create SCRAM users, so the tests bootstrap them through PLAIN's `admin`.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import secrets
from typing import Any, Final

import kio.schema.sasl_authenticate.v2 as sasl_authenticate_v2
import kio.schema.sasl_handshake.v1 as sasl_handshake_v1
from confluent_kafka import KafkaError
from confluent_kafka.admin import (
    AdminClient,
    ScramCredentialInfo,
    ScramMechanism,
    UserScramCredentialUpsertion,
)

from diskless.kafka_server import ServerConfig
from diskless.kafka_server._protocol.fields import build
from testkit.wire import WireClient

LISTENER: Final = "SASL_PLAINTEXT"
JAAS: Final = (
    "org.apache.kafka.common.security.plain.PlainLoginModule required"
    ' username="admin" password="admin-secret"'
    ' user_admin="admin-secret" user_alice="alice-secret";'
)
MECHANISMS: Final = ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512")


def sasl_server_config(**overrides: Any) -> ServerConfig:
    settings: dict[str, Any] = {
        "fetch_wait_ms_max": 500,
        "listeners": f"{LISTENER}://127.0.0.1:0",
        "sasl_enabled_mechanisms": ",".join(MECHANISMS),
        "listener_settings": {LISTENER: {"plain.sasl.jaas.config": JAAS}},
    }
    settings.update(overrides)
    return ServerConfig(**settings)


def client_settings(mechanism: str, user: str, password: str) -> dict[str, object]:
    """librdkafka's settings for authenticating as `user`."""
    return {
        "security.protocol": "SASL_PLAINTEXT",
        "sasl.mechanism": mechanism,
        "sasl.username": user,
        "sasl.password": password,
    }


async def handshake(client: WireClient, mechanism: str) -> Any:
    return await client.request(build(sasl_handshake_v1.SaslHandshakeRequest, mechanism=mechanism))


async def authenticate(client: WireClient, token: bytes) -> Any:
    return await client.request(
        build(sasl_authenticate_v2.SaslAuthenticateRequest, auth_bytes=token)
    )


async def scram_login(client: WireClient, mechanism: str, user: str, password: str) -> Any:
    """RFC 5802's client over SaslHandshake v1 and SaslAuthenticate v2: the last response (the
    server-final message's, or the first error)."""
    hash_name = "sha256" if mechanism == "SCRAM-SHA-256" else "sha512"
    shake = await handshake(client, mechanism)
    assert shake.error_code == 0, shake
    client_nonce = secrets.token_urlsafe(18)
    bare = f"n={user},r={client_nonce}"
    first = await authenticate(client, f"n,,{bare}".encode())
    if first.error_code != 0:
        return first
    server_first = first.auth_bytes.decode()
    attributes = dict(part.split("=", 1) for part in server_first.split(","))
    salted = hashlib.pbkdf2_hmac(
        hash_name, password.encode(), base64.b64decode(attributes["s"]), int(attributes["i"])
    )
    client_key = hmac.digest(salted, b"Client Key", hash_name)
    without_proof = f"c=biws,r={attributes['r']}"
    auth = f"{bare},{server_first},{without_proof}".encode()
    signature = hmac.digest(hashlib.new(hash_name, client_key).digest(), auth, hash_name)
    proof = base64.b64encode(bytes(a ^ b for a, b in zip(client_key, signature, strict=True)))
    final = await authenticate(client, f"{without_proof},p={proof.decode()}".encode())
    if final.error_code == 0:
        server_signature = hmac.digest(
            hmac.digest(salted, b"Server Key", hash_name), auth, hash_name
        )
        assert final.auth_bytes == b"v=" + base64.b64encode(server_signature)
    return final


ADMIN = client_settings("PLAIN", "admin", "admin-secret")


def create_scram_user(
    bootstrap: str,
    user: str,
    password: str,
    mechanisms: tuple[ScramMechanism, ...],
    login: dict[str, object] = ADMIN,
) -> None:
    """Through confluent-kafka's AdminClient, logged in as `login` (PLAIN's admin)."""
    admin = AdminClient({"bootstrap.servers": bootstrap, **login})
    alterations = [
        UserScramCredentialUpsertion(user, ScramCredentialInfo(m, 8192), password.encode())
        for m in mechanisms
    ]
    for m in alterations:  # one alteration per user and request (Kafka's rule)
        for future in admin.alter_user_scram_credentials([m]).values():
            future.result(30)


SHA_512: Final = (ScramMechanism.SCRAM_SHA_512,)


def librdkafka_login(bootstrap: str, user: str, password: str) -> list[KafkaError]:
    """A SCRAM-SHA-512 login of librdkafka's AdminClient, which then asks for the metadata: the
    errors it reported (none: logged in and answered)."""
    errors: list[KafkaError] = []
    settings = client_settings("SCRAM-SHA-512", user, password)
    admin = AdminClient({"bootstrap.servers": bootstrap, "error_cb": errors.append, **settings})
    metadata = admin.list_topics(timeout=20)
    assert metadata.brokers, metadata
    admin.poll(0.5)  # serves the error callbacks
    return errors
