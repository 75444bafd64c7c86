"""TLS listeners with real certificates (made by `openssl`) and real clients: confluent-kafka,
kafka-python and aiokafka over SSL next to a PLAINTEXT listener of the same broker; client
certificates as principals (`ssl.client.auth`); what a client of the wrong kind, or one that
never finishes its handshake, costs the others (nothing); key stores in each PEM form.
"""

from __future__ import annotations

import asyncio
import logging
import re
import socket
import ssl
import warnings
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer
from aiokafka import TopicPartition as AioTopicPartition
from confluent_kafka import Consumer, Producer
from confluent_kafka import TopicPartition as CkTopicPartition
from kafka import KafkaConsumer, KafkaProducer
from kafka import TopicPartition as KpTopicPartition
from kio.schema.api_versions.v3.request import ApiVersionsRequest

from diskless.coordinator import InMemoryBatchCoordinator
from diskless.kafka_server import KafkaCluster, ServerConfig
from diskless.kafka_server._server.settings.server_properties import server_config
from diskless.storage import MemoryObjectStore
from testkit.cluster import local_cluster
from testkit.tls import CLIENT_DN, KEY_PASSWORD, Certs
from testkit.wire import WireClient, encode_request

TOPIC = "secure"


def _config(certs: Certs, client_auth: str, **more: str) -> ServerConfig:
    return server_config(
        {
            "listeners": "PLAINTEXT://127.0.0.1:0,SSL://127.0.0.1:0",
            "ssl.keystore.type": "PEM",
            "ssl.keystore.location": str(certs.server_keystore),
            "ssl.truststore.location": str(certs.ca),
            "ssl.client.auth": client_auth,
            **more,
        },
        ServerConfig(fetch_wait_ms_max=500, ssl_handshake_timeout_ms=500),
    )


async def _cluster(config: ServerConfig) -> AsyncIterator[KafkaCluster]:
    async with local_cluster(brokers=2, racks=1, server_config=config) as running:
        await running.create_topic(TOPIC, 2)
        yield running


@pytest.fixture
async def required(certs: Certs) -> AsyncIterator[KafkaCluster]:
    async for running in _cluster(_config(certs, "required")):
        yield running


@pytest.fixture
async def requested(certs: Certs) -> AsyncIterator[KafkaCluster]:
    async for running in _cluster(_config(certs, "requested")):
        yield running


def _address(bootstrap: str) -> tuple[str, int]:
    host, _, port = bootstrap.split(",")[0].rpartition(":")
    return host, int(port)


async def _principals(cluster: KafkaCluster, listener: str) -> set[str]:
    """Principals of the open connections of `listener` (on every broker), once there are."""
    for _ in range(300):
        found = {
            s.principal
            for server in cluster.live
            for s in server.sessions()
            if s.listener == listener
        }
        if found:
            return found
        await asyncio.sleep(0.01)
    return set()


# --- real clients ---------------------------------------------------------------------------------
def _confluent_round_trip(bootstrap: str, certs: Certs) -> list[bytes]:
    tls = {
        "bootstrap.servers": bootstrap,
        "security.protocol": "SSL",
        "ssl.ca.location": str(certs.ca),
        "ssl.certificate.location": str(certs.client_cert),
        "ssl.key.location": str(certs.client_key),
    }
    producer = Producer({**tls, "acks": "all", "enable.idempotence": True})
    for i in range(20):
        producer.produce(TOPIC, value=b"ck-%d" % i, partition=i % 2)
    assert producer.flush(30) == 0
    consumer = Consumer({**tls, "group.id": "tls-audit", "enable.auto.commit": False})
    consumer.assign([CkTopicPartition(TOPIC, p, 0) for p in (0, 1)])
    values: list[bytes] = []
    for _ in range(200):
        if len(values) >= 20:
            break
        message = consumer.poll(0.2)
        if message is not None and message.error() is None:
            values.append(message.value())
    consumer.close()
    return values


async def test_confluent_kafka_over_ssl_authenticates_as_its_certificate_subject(
    required: KafkaCluster, certs: Certs
) -> None:
    bootstrap = required.bootstrap(listener="SSL")
    plaintext = required.bootstrap(listener="PLAINTEXT")
    assert set(bootstrap.split(",")).isdisjoint(plaintext.split(","))
    values = await asyncio.to_thread(_confluent_round_trip, bootstrap, certs)
    assert sorted(values) == sorted(b"ck-%d" % i for i in range(20))


async def test_a_client_certificate_s_subject_is_the_principal(
    required: KafkaCluster, certs: Certs
) -> None:
    host, port = _address(required.bootstrap(listener="SSL"))
    reader, writer = await asyncio.open_connection(host, port, ssl=certs.client_context())
    client = WireClient(reader, writer)
    try:
        answer = await client.request(
            ApiVersionsRequest(client_software_name="t", client_software_version="1")
        )
        assert answer.error_code == 0
        assert await _principals(required, "SSL") == {f"User:{CLIENT_DN}"}
    finally:
        await client.close()


def _kafka_python_round_trip(bootstrap: str, context: ssl.SSLContext) -> list[bytes]:
    producer = KafkaProducer(
        bootstrap_servers=bootstrap, security_protocol="SSL", ssl_context=context, acks="all"
    )
    for future in [producer.send(TOPIC, value=b"kp-%d" % i, partition=i % 2) for i in range(10)]:
        future.get(timeout=30)
    producer.close()
    consumer = KafkaConsumer(
        bootstrap_servers=bootstrap,
        security_protocol="SSL",
        ssl_context=context,
        auto_offset_reset="earliest",
        consumer_timeout_ms=3000,
    )
    consumer.assign([KpTopicPartition(TOPIC, 0), KpTopicPartition(TOPIC, 1)])
    values = [m.value for m in consumer]
    consumer.close()
    return values


async def _aiokafka_round_trip(bootstrap: str, context: ssl.SSLContext) -> list[bytes]:
    producer = AIOKafkaProducer(
        bootstrap_servers=bootstrap, security_protocol="SSL", ssl_context=context
    )
    await producer.start()
    try:
        for i in range(10):
            await producer.send_and_wait(TOPIC, b"aio-%d" % i, partition=i % 2)
    finally:
        await producer.stop()
    consumer = AIOKafkaConsumer(
        bootstrap_servers=bootstrap, security_protocol="SSL", ssl_context=context
    )
    await consumer.start()
    try:
        partitions = [AioTopicPartition(TOPIC, 0), AioTopicPartition(TOPIC, 1)]
        consumer.assign(partitions)
        await consumer.seek_to_beginning(*partitions)
        values: list[bytes] = []
        for _ in range(50):
            batches = await consumer.getmany(timeout_ms=200)
            values += [m.value for records in batches.values() for m in records if m.value]
            if sum(v.startswith(b"aio") for v in values) >= 10:
                break
    finally:
        await consumer.stop()
    return values


async def test_kafka_python_and_aiokafka_with_an_ssl_context(
    requested: KafkaCluster, certs: Certs
) -> None:
    bootstrap = requested.bootstrap(listener="SSL")
    got = await asyncio.to_thread(_kafka_python_round_trip, bootstrap, certs.client_context())
    assert sorted(got) == sorted(b"kp-%d" % i for i in range(10))
    # requested: a client without a certificate is served, anonymously
    got = await _aiokafka_round_trip(bootstrap, certs.client_context(certificate=False))
    assert sorted(v for v in got if v.startswith(b"aio")) == sorted(
        b"aio-%d" % i for i in range(10)
    )


async def test_without_a_certificate_a_requested_client_is_anonymous(
    requested: KafkaCluster, certs: Certs
) -> None:
    host, port = _address(requested.bootstrap(listener="SSL"))
    context = certs.client_context(certificate=False)
    reader, writer = await asyncio.open_connection(host, port, ssl=context)
    client = WireClient(reader, writer)
    try:
        answer = await client.request(
            ApiVersionsRequest(client_software_name="t", client_software_version="1")
        )
        assert answer.error_code == 0
        assert await _principals(requested, "SSL") == {"User:ANONYMOUS"}
    finally:
        await client.close()


# --- refused clients ----------------------------------------------------------------------------
async def _refused(host: str, port: int, context: ssl.SSLContext) -> bool:
    """Whether a TLS client with `context` is refused: its handshake fails, or (TLS 1.3 sends
    the server's verdict on the client certificate after the client's handshake completes) its
    first request is answered by a closed connection."""
    try:
        reader, writer = await asyncio.open_connection(host, port, ssl=context)
    except (ssl.SSLError, ConnectionError):
        return True
    client = WireClient(reader, writer)
    try:
        await client.send_raw(
            encode_request(
                ApiVersionsRequest(client_software_name="t", client_software_version="1"), 1
            )
        )
        return await client.read_frame() is None
    except (ssl.SSLError, ConnectionError):
        return True
    finally:
        writer.transport.abort()


async def test_required_client_auth_refuses_clients_without_a_trusted_certificate(
    required: KafkaCluster, certs: Certs
) -> None:
    host, port = _address(required.bootstrap(listener="SSL"))
    assert await _refused(host, port, certs.client_context(certificate=False))
    stranger = certs.client_context(certificate=False)
    stranger.load_cert_chain(str(certs.stranger_cert), str(certs.stranger_key))
    assert await _refused(host, port, stranger)
    assert not await _refused(host, port, certs.client_context())  # the control


async def test_clients_of_the_wrong_kind_are_closed_and_the_others_carry_on(
    required: KafkaCluster, certs: Certs, caplog: pytest.LogCaptureFixture
) -> None:
    tls_host, tls_port = _address(required.bootstrap(listener="SSL"))
    plain_host, plain_port = _address(required.bootstrap(listener="PLAINTEXT"))
    reader, writer = await asyncio.open_connection(tls_host, tls_port, ssl=certs.client_context())
    healthy = WireClient(reader, writer)
    request = ApiVersionsRequest(client_software_name="t", client_software_version="1")
    try:
        assert (await healthy.request(request)).error_code == 0
        # a plaintext request to the TLS port, a TLS handshake to the plaintext port
        plain_reader, plain_writer = await asyncio.open_connection(tls_host, tls_port)
        wrong = WireClient(plain_reader, plain_writer)
        await wrong.send_raw(encode_request(request, 1))
        assert await wrong.read_frame() is None
        await wrong.close()
        assert await _refused(plain_host, plain_port, certs.client_context())
        # one that connects and never says anything: closed at the handshake time limit
        silent_reader, silent_writer = await asyncio.open_connection(tls_host, tls_port)
        assert await asyncio.wait_for(silent_reader.read(), 30) == b""
        silent_writer.close()
        assert (await healthy.request(request)).error_code == 0
    finally:
        await healthy.close()
    warned = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    handshakes = [w for w in warned if "TLS handshake on listener SSL failed" in w]
    assert len(handshakes) == 2, warned  # the plaintext client and the silent one
    assert any("frame size" in w for w in warned), warned  # TLS on the plaintext port


# --- key stores -----------------------------------------------------------------------------------
async def _served(config: ServerConfig, certs: Certs) -> str:
    """The principal of a TLS client of a one-broker cluster with `config`."""
    async with KafkaCluster(
        MemoryObjectStore(), InMemoryBatchCoordinator(), brokers=1, racks=1, server_config=config
    ) as running:
        host, port = _address(running.bootstrap(listener="SSL"))
        reader, writer = await asyncio.open_connection(host, port, ssl=certs.client_context())
        client = WireClient(reader, writer)
        try:
            request = ApiVersionsRequest(client_software_name="t", client_software_version="1")
            assert (await client.request(request)).error_code == 0
            (principal,) = await _principals(running, "SSL")
            return principal
        finally:
            await client.close()


async def test_inline_pem_an_encrypted_key_and_per_listener_settings(
    certs: Certs, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    inline = server_config(
        {
            "listeners": "SSL://127.0.0.1:0",
            "ssl.keystore.certificate.chain": certs.server_cert.read_text(),
            "ssl.keystore.key": certs.server_key.read_text(),
            "listener.name.ssl.ssl.truststore.certificates": certs.ca.read_text(),
            "listener.name.ssl.ssl.client.auth": "required",
        }
    )
    assert await _served(inline, certs) == f"User:{CLIENT_DN}"
    encrypted = server_config(
        {
            "listeners": "SSL://127.0.0.1:0",
            "listener.name.SSL.ssl.keystore.location": str(certs.server_encrypted_keystore),
            "listener.name.SSL.ssl.key.password": KEY_PASSWORD,
            "ssl.client.auth": "none",
        }
    )
    assert await _served(encrypted, certs) == "User:ANONYMOUS"  # no certificate asked for
    assert "[hidden]" in repr(encrypted) and KEY_PASSWORD not in repr(encrypted)
    direct = ServerConfig(
        ssl_key_password=KEY_PASSWORD,
        ssl_keystore_key="-----BEGIN",
        ssl_keystore_certificate_chain="chain",
    )
    assert KEY_PASSWORD not in repr(direct) and "BEGIN" not in repr(direct)
    assert direct.ssl_key_password == KEY_PASSWORD  # the value itself is unchanged
    logged = "\n".join(r.getMessage() for r in caplog.records)
    assert "PRIVATE KEY" not in logged and KEY_PASSWORD not in logged
    assert f"authenticated as User:{CLIENT_DN}" in logged


def test_key_material_that_cannot_be_loaded_is_refused_naming_its_property(
    certs: Certs, tmp_path: Path
) -> None:
    wrong_password = _config(
        certs, "none", **{"ssl.keystore.location": str(certs.server_encrypted_keystore)}
    )
    wrong_password = server_config({"ssl.key.password": "not-it"}, wrong_password)
    with pytest.raises(
        ValueError, match="^" + re.escape("ssl.keystore.location: cannot load")
    ) as refused:
        wrong_password.tls_for("SSL").server_context()
    assert "not-it" not in str(refused.value)
    missing = _config(certs, "none", **{"ssl.truststore.location": str(tmp_path / "no.pem")})
    with pytest.raises(ValueError, match="^" + re.escape("ssl.truststore.location: cannot load")):
        missing.tls_for("SSL").server_context()
    with pytest.raises(
        ValueError, match="^" + re.escape("ssl.keystore.location: listener SSL uses TLS")
    ):
        server_config({"listeners": "SSL://127.0.0.1:0"})
    with pytest.raises(
        ValueError, match="^" + re.escape("ssl.client.auth: 'sometimes' is not one of")
    ):
        _config(certs, "sometimes")
    with pytest.raises(
        ValueError, match="^" + re.escape("ssl.enabled.protocols: 'TLSv1.1,TLSv1.2'")
    ):
        _config(certs, "none", **{"ssl.enabled.protocols": "TLSv1.1,TLSv1.2"})
    with pytest.raises(ValueError, match="^" + re.escape("ssl.keystore.type: only PEM")):
        _config(certs, "none", **{"ssl.keystore.type": "JKS"})


def _tls_version(host: str, port: int, context: ssl.SSLContext) -> str | None:
    """The TLS version a handshake with `context` agrees on; None when the server refuses it."""
    try:
        with (
            socket.create_connection((host, port), timeout=10) as raw,
            context.wrap_socket(raw, server_hostname=host) as tls,
        ):
            return tls.version()
    except (ssl.SSLError, ConnectionError):
        return None


def _versions(context: ssl.SSLContext, lowest: ssl.TLSVersion, highest: ssl.TLSVersion) -> None:
    with warnings.catch_warnings():  # naming TLS 1.0 and 1.1 is deprecated, as it should be
        warnings.simplefilter("ignore", DeprecationWarning)
        context.set_ciphers("ALL:@SECLEVEL=0")  # offer what the server must refuse
        context.minimum_version, context.maximum_version = lowest, highest


async def _old_tls_possible(certs: Certs, old: ssl.SSLContext) -> bool:
    """Whether this machine's OpenSSL speaks TLS 1.1 at all: a server that allows it (Python's
    own) accepts `old`."""
    server = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    _versions(server, ssl.TLSVersion.TLSv1, ssl.TLSVersion.TLSv1_3)
    server.load_cert_chain(str(certs.server_keystore))

    async def accept(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        writer.close()

    listening = await asyncio.start_server(accept, "127.0.0.1", 0, ssl=server)
    async with listening:
        port = listening.sockets[0].getsockname()[1]
        return await asyncio.to_thread(_tls_version, "127.0.0.1", port, old) == "TLSv1.1"


async def test_tls_older_than_1_2_is_never_accepted(certs: Certs) -> None:
    def client(lowest: ssl.TLSVersion, highest: ssl.TLSVersion) -> ssl.SSLContext:
        context = certs.client_context(certificate=False)
        _versions(context, lowest, highest)
        return context

    old = client(ssl.TLSVersion.TLSv1, ssl.TLSVersion.TLSv1_1)
    twelve = client(ssl.TLSVersion.TLSv1_2, ssl.TLSVersion.TLSv1_2)
    newest = client(ssl.TLSVersion.TLSv1_2, ssl.TLSVersion.TLSv1_3)
    async for running in _cluster(_config(certs, "none")):
        host, port = _address(running.bootstrap(listener="SSL"))
        if await _old_tls_possible(certs, old):
            assert await asyncio.to_thread(_tls_version, host, port, old) is None
        assert await asyncio.to_thread(_tls_version, host, port, twelve) == "TLSv1.2"
    only_13 = _config(certs, "none", **{"ssl.enabled.protocols": "TLSv1.3"})
    async for running in _cluster(only_13):
        host, port = _address(running.bootstrap(listener="SSL"))
        assert await asyncio.to_thread(_tls_version, host, port, twelve) is None
        assert await asyncio.to_thread(_tls_version, host, port, newest) == "TLSv1.3"


async def test_principal_mapping_rules_name_the_client_or_refuse_it(
    certs: Certs, caplog: pytest.LogCaptureFixture
) -> None:
    rules = "RULE:^CN=([^,]*),OU=clients,.*$/$1/U,DEFAULT"
    mapped = _config(certs, "required", **{"ssl.principal.mapping.rules": rules})
    assert await _served(mapped, certs) == "User:ALICE"
    nobody = _config(certs, "required", **{"ssl.principal.mapping.rules": "RULE:^CN=bob$/bob/"})
    async for running in _cluster(nobody):
        host, port = _address(running.bootstrap(listener="SSL"))
        assert await _refused(host, port, certs.client_context())
    assert any(
        "no ssl.principal.mapping.rules rule applies to" in r.getMessage() for r in caplog.records
    )
