"""Unit: the SASL mechanisms' server side, and the JAAS lines PLAIN users come from.

SCRAM-SHA-256 is checked against RFC 7677's test vector (user "user", password "pencil"), byte
for byte; SCRAM-SHA-512 against a client written here from RFC 5802's formulas.
"""

from __future__ import annotations

import base64
import hashlib
import hmac

import pytest

from diskless._scram import ScramCredential, ScramMechanism, credential_of_password
from diskless.kafka_server._server.auth._jaas import parse_jaas, plain_users
from diskless.kafka_server._server.auth._sasl_plain import PlainServer
from diskless.kafka_server._server.auth._sasl_scram import SaslFailure, ScramServer

SHA256 = ScramMechanism.SCRAM_SHA_256
SHA512 = ScramMechanism.SCRAM_SHA_512
RFC7677_SALT = base64.b64decode("W22ZaJ0SNY7soEsUEjb6gQ==")
RFC7677_CLIENT_FIRST = b"n,,n=user,r=rOprNGfwEbeRWgbNEkqO"
RFC7677_SERVER_NONCE = "%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0"
RFC7677_SERVER_FIRST = (
    b"r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,s=W22ZaJ0SNY7soEsUEjb6gQ==,i=4096"
)
RFC7677_CLIENT_FINAL = (
    b"c=biws,r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,"
    b"p=dHzbZapWIk4jUhN+Ute9ytag9zjfMHgsqmmiz7AndVQ="
)
RFC7677_SERVER_FINAL = b"v=6rriTRBi23WpRR/wtup+mMhUZUn/dB5nLTJRsjl95G4="
JAAS = (
    "org.apache.kafka.common.security.plain.PlainLoginModule required"
    ' username="admin" password="admin-secret" user_admin="admin-secret"'
    ' user_alice="alice-secret";'
)


def server(
    credentials: dict[str, ScramCredential], mechanism: ScramMechanism = SHA256
) -> ScramServer:
    async def lookup(user: str, asked: ScramMechanism) -> ScramCredential | None:
        assert asked is mechanism
        return credentials.get(user)

    return ScramServer(mechanism, lookup, decoy_key=b"k" * 32, nonce=lambda: RFC7677_SERVER_NONCE)


def pencil() -> dict[str, ScramCredential]:
    return {"user": credential_of_password(SHA256, "pencil", RFC7677_SALT, 4096)}


async def test_scram_sha_256_matches_rfc_7677s_test_vector() -> None:
    exchange = server(pencil())
    assert await exchange.evaluate(RFC7677_CLIENT_FIRST) == RFC7677_SERVER_FIRST
    assert not exchange.complete
    assert await exchange.evaluate(RFC7677_CLIENT_FINAL) == RFC7677_SERVER_FINAL
    assert exchange.complete and exchange.user == "user"


def client_final(
    mechanism: ScramMechanism,
    password: str,
    client_first: bytes,
    server_first: bytes,
    gs2_header: bytes = b"n,,",
) -> bytes:
    """RFC 5802's client: the final message proving `password`."""
    attributes = dict(part.split("=", 1) for part in server_first.decode().split(","))
    salt, iterations = base64.b64decode(attributes["s"]), int(attributes["i"])
    salted = hashlib.pbkdf2_hmac(mechanism.hash_name, password.encode(), salt, iterations)
    client_key = hmac.digest(salted, b"Client Key", mechanism.hash_name)
    stored = hashlib.new(mechanism.hash_name, client_key).digest()
    without_proof = f"c={base64.b64encode(gs2_header).decode()},r={attributes['r']}"
    bare = client_first[len(gs2_header) :]
    auth = b",".join([bare, server_first, without_proof.encode()])
    signature = hmac.digest(stored, auth, mechanism.hash_name)
    proof = bytes(a ^ b for a, b in zip(client_key, signature, strict=True))
    return f"{without_proof},p={base64.b64encode(proof).decode()}".encode()


async def test_scram_sha_512_authenticates_the_right_password_only() -> None:
    stored = {"alice": credential_of_password(SHA512, "alice-secret", b"salty", 4096)}
    first = b"n,,n=alice,r=abcdefghijklmnop"
    for password, accepted in (("alice-secret", True), ("alice-secreT", False)):
        exchange = server(stored, SHA512)
        server_first = await exchange.evaluate(first)
        final = client_final(SHA512, password, first, server_first)
        if accepted:
            assert (await exchange.evaluate(final)).startswith(b"v=")
            assert exchange.complete and exchange.user == "alice"
        else:
            with pytest.raises(SaslFailure) as failed:
                await exchange.evaluate(final)
            assert failed.value.client_message is None  # Kafka's generic message
            assert not exchange.complete


async def test_an_unknown_user_fails_exactly_where_a_wrong_password_does() -> None:
    exchange = server(pencil())
    server_first = await exchange.evaluate(b"n,,n=nobody,r=abcdefghijklmnop")
    # A server-first message like any other, the same salt each time the name is tried.
    assert (await server(pencil()).evaluate(b"n,,n=nobody,r=x")).split(b",")[1:] == (
        server_first.split(b",")[1:]
    )
    with pytest.raises(SaslFailure) as failed:
        await exchange.evaluate(
            client_final(SHA256, "pencil", b"n,,n=nobody,r=abcdefghijklmnop", server_first)
        )
    assert failed.value.client_message is None


@pytest.mark.parametrize(
    ("first", "final"),
    [
        (b"y,,n=user,r=abc", None),  # channel binding is not supported
        (b"p=tls-unique,,n=user,r=abc", None),
        (b"n,,n=user,r=abc,tokenauth=true", None),  # delegation tokens are refused
        (b"n,,n=us=er,r=abc", None),  # a bare '=' in a name
        (b"n,,r=abc,n=user", None),
        (b"n,,n=user,r=a\x7fc", None),
        (b"\xff", None),
        (
            RFC7677_CLIENT_FIRST,
            b"c=biws,r=rOprNGfwEbeRWgbNEkqO,p=dHzbZapWIk4jUhN+Ute9ytag9zjfMHgsqmmiz7AndVQ=",
        ),
        (RFC7677_CLIENT_FIRST, RFC7677_CLIENT_FINAL.replace(b"c=biws", b"c=eSws")),
        (RFC7677_CLIENT_FIRST, RFC7677_CLIENT_FINAL[:-5] + b"!!!!="),
        (RFC7677_CLIENT_FIRST, RFC7677_CLIENT_FINAL.replace(b"dHzb", b"dHzc")),
    ],
)
async def test_malformed_or_refused_messages_fail(first: bytes, final: bytes | None) -> None:
    exchange = server(pencil())
    with pytest.raises(SaslFailure):
        await exchange.evaluate(first)
        assert final is not None
        await exchange.evaluate(final)
    assert not exchange.complete


async def test_escaped_names_and_a_matching_authorization_id_are_accepted() -> None:
    stored = {"a,b=c": credential_of_password(SHA256, "pw", b"salt", 4096)}
    gs2 = b"n,a=a=2Cb=3Dc,"
    first = gs2 + b"n=a=2Cb=3Dc,r=nonce"
    exchange = server(stored)
    server_first = await exchange.evaluate(first)
    final = client_final(SHA256, "pw", first, server_first, gs2)
    assert (await exchange.evaluate(final)).startswith(b"v=")
    assert exchange.user == "a,b=c"


async def test_an_authorization_id_other_than_the_user_is_refused_with_kafkas_message() -> None:
    with pytest.raises(SaslFailure) as failed:
        await server(pencil()).evaluate(b"n,a=admin,n=user,r=abc")
    assert failed.value.client_message == (
        "Authentication failed: Client requested an authorization id that is different"
        " from username"
    )


async def test_plain_accepts_the_jaas_users_and_nothing_else() -> None:
    users = plain_users(JAAS)
    assert users == {"admin": "admin-secret", "alice": "alice-secret"}
    ok = PlainServer(users)
    assert await ok.evaluate(b"\0alice\0alice-secret") == b""
    assert ok.complete and ok.user == "alice"
    for token, message in [
        (b"\0alice\0wrong", "Authentication failed: Invalid username or password"),
        (b"\0nobody\0alice-secret", "Authentication failed: Invalid username or password"),
        (b"\0\0x", "Authentication failed: username not specified"),
        (b"\0alice\0", "Authentication failed: password not specified"),
        (
            b"admin\0alice\0alice-secret",
            "Authentication failed: Client requested an authorization id that is different"
            " from username",
        ),
        (b"alice\0alice-secret", None),
    ]:
        refused = PlainServer(users)
        with pytest.raises(SaslFailure) as failed:
            await refused.evaluate(token)
        assert failed.value.client_message == message
        assert not refused.complete


def test_jaas_lines_parse_as_kafka_writes_them() -> None:
    entry = parse_jaas('com.example.Module  optional\n  a="x y;\\"z" b=bare\tc="";')
    assert entry.login_module == "com.example.Module" and entry.flag == "optional"
    assert entry.options == {"a": 'x y;"z', "b": "bare", "c": ""}


@pytest.mark.parametrize(
    "text",
    [
        "",
        'org.apache.kafka.common.security.plain.PlainLoginModule required user_a="x"',
        'org.apache.kafka.common.security.plain.PlainLoginModule always user_a="x";',
        "org.apache.kafka.common.security.plain.PlainLoginModule required user_a;",
        'org.apache.kafka.common.security.plain.PlainLoginModule required user_a="x',
        'org.apache.kafka.common.security.plain.PlainLoginModule required user_a="x" user_a="y";',
        'org.apache.kafka.common.security.scram.ScramLoginModule required user_a="x";',
        "org.apache.kafka.common.security.plain.PlainLoginModule required; other required;",
    ],
)
def test_malformed_jaas_lines_are_refused(text: str) -> None:
    with pytest.raises(ValueError):
        plain_users(text)
