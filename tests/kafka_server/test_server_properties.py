"""`--config server.properties`: the Java properties format (against Java's own reader),
Kafka's property names onto the server's settings, and a bad file or value refused in one line
naming the property; a client certificate's principal against Java's `X500Principal`.
"""

from __future__ import annotations

import asyncio
import os
import signal
import socket
import ssl
import subprocess
import sys
from pathlib import Path

import pytest
from confluent_kafka.admin import AdminClient

from diskless.coordinator import InMemoryBatchCoordinator, TopicConfig
from diskless.kafka_server import KafkaCluster, ServerConfig
from diskless.kafka_server.__main__ import main
from diskless.kafka_server._server.auth._x500 import subject_dn
from diskless.kafka_server._server.settings.inapplicable_properties import INAPPLICABLE, ignored
from diskless.kafka_server._server.settings.properties import PropertiesError, parse_properties
from diskless.kafka_server._server.settings.server_properties import (
    LISTENER_PROPERTIES,
    PROPERTIES,
    register,
    server_config,
)
from diskless.storage import MemoryObjectStore
from testkit.tls import Certs
from tests.kafka_server._java_oracle import java_properties, java_subjects

TRICKY = (
    "# a comment\n"
    "! another comment\n"
    "   \n"
    "plain=value\n"
    "spaced   =   value with trailing space \n"
    "colon: value\n"
    "blank value here\n"
    "tabbed\t\tvalue\n"
    "empty=\n"
    "bare\n"
    "escaped\\ key\\=x = a\\tb\\nc\\\\d\\:e\\=f\\q\n"
    "unicode=caf\\u00e9 \\u20ac\n"
    "continued=first,\\\n"
    "     second,\\\n"
    "\t# not a comment inside a continuation\n"
    "even=ends with a backslash\\\\\n"
    "listeners=PLAINTEXT://:9092\n"
    "listeners=SSL://:9093\n"
    "latin=\xe9t\xe9\n"
    "last=no newline at the end\\"
)


def test_the_properties_format_reads_as_java_reads_it(tmp_path: Path) -> None:
    file = tmp_path / "server.properties"
    file.write_bytes(TRICKY.encode("latin-1"))
    ours = parse_properties(file.read_bytes().decode("latin-1"))
    assert ours["escaped key=x"] == "a\tb\nc\\d:e=fq"
    assert ours["continued"] == "first,second,# not a comment inside a continuation"
    assert ours["listeners"] == "SSL://:9093"  # the later one wins
    assert ours["spaced"] == "value with trailing space "
    assert ours["unicode"] == "café €"
    assert ours == java_properties(tmp_path, file)


def test_a_malformed_unicode_escape_names_its_line() -> None:
    with pytest.raises(PropertiesError, match=r"^f:3: malformed \\uXXXX escape"):
        parse_properties("a=1\n\nb=\\u00zz\n", "f")


def test_kafka_property_names_set_the_server_s_settings() -> None:
    config = server_config(
        {
            "socket.request.max.bytes": " 1048576 ",
            "queued.max.request.bytes": "2097152",
            "connections.max.idle.ms": "60000",
            "broker.session.timeout.ms": "6000",
            "listeners": "PLAINTEXT://127.0.0.1:9092",
            "broker.rack": "eu-1a",
            "listener.name.plaintext.ssl.client.auth": "requested",
        }
    )
    assert (config.frame_bytes_max, config.queued_request_bytes_max) == (1048576, 2097152)
    assert (config.connections_idle_ms_max, config.broker_session_timeout_ms) == (60000, 6000)
    assert (config.listeners, config.broker_rack) == ("PLAINTEXT://127.0.0.1:9092", "eu-1a")
    assert config.tls_for("PLAINTEXT").client_auth == "requested"
    assert config.tls_for("OTHER").client_auth == "none"
    assert all(f in {f for f in ServerConfig.__struct_fields__} for f in PROPERTIES.values())


@pytest.mark.parametrize(
    ("properties", "refusal"),
    [
        ({"log.dirz": "/var/kafka"}, "log.dirz: unknown property"),
        ({"socket.request.max.bytes": "lots"}, "socket.request.max.bytes: expected an integer"),
        ({"socket.request.max.bytes": "0"}, "socket.request.max.bytes: frame_bytes_max must be"),
        ({"listener.name.x.sasl.magic": "1"}, "listener.name.x.sasl.magic: unknown property"),
        ({"listeners": "PLAINTEXT:/:1"}, "listeners: 'PLAINTEXT:/:1' is not NAME://HOST:PORT"),
        (
            {"queued.max.request.bytes": "10", "connections.max.idle.ms": "5"},
            "queued.max.request.bytes: queued_request_bytes_max",
        ),
    ],
)
def test_a_bad_property_is_refused_naming_it(properties: dict[str, str], refusal: str) -> None:
    with pytest.raises(ValueError) as refused:
        server_config(properties)
    assert str(refused.value).startswith(refusal), str(refused.value)


def test_other_settings_can_register_their_properties() -> None:
    register("test.only.wait.ms", "fetch_wait_ms_max")
    try:
        assert server_config({"test.only.wait.ms": "25"}).fetch_wait_ms_max == 25
        with pytest.raises(ValueError, match="no field"):
            register("test.only.missing", "no_such_field")
        register("test.only.sasl.jaas.config", None, per_listener=True)
        jaas = 'org.example.PlainLoginModule required user_alice="alice-secret";'
        config = server_config({"listener.name.sasl_ssl.test.only.sasl.jaas.config": jaas})
        assert config.listener_settings == {"SASL_SSL": {"test.only.sasl.jaas.config": jaas}}
        assert "alice-secret" not in repr(config)  # a JAAS configuration is a secret
        with pytest.raises(ValueError, match="unknown property"):
            server_config({"test.only.sasl.jaas.config": jaas})  # only per listener
    finally:
        del PROPERTIES["test.only.wait.ms"]
        LISTENER_PROPERTIES.discard("test.only.sasl.jaas.config")


def test_kafka_s_broker_defaults_become_the_cluster_s_topic_defaults() -> None:
    """`log.retention.*` in Kafka's precedence (ms, then minutes, then hours; negative: no
    limit), `log.retention.bytes` and `message.max.bytes`: what a topic created without its own
    gets, and whether the properties said so (STATIC_BROKER_CONFIG) or Kafka's defaults did."""
    week = 7 * 24 * 3_600_000
    defaults = ServerConfig().topic_defaults
    assert (defaults.config.retention_ms, defaults.config.retention_bytes) == (week, -1)
    assert defaults.config.max_message_bytes == 1048588 and defaults.static == frozenset()
    hours = server_config({"log.retention.hours": "168"}).topic_defaults
    assert hours.config.retention_ms == week and hours.static == {"retention.ms"}
    minutes = server_config({"log.retention.hours": "1", "log.retention.minutes": "5"})
    assert minutes.topic_defaults.config.retention_ms == 300_000
    given = server_config(
        {
            "log.retention.hours": "1",
            "log.retention.minutes": "5",
            "log.retention.ms": "1500",
            "log.retention.bytes": "1000000",
            "message.max.bytes": "2000000",
        }
    ).topic_defaults
    assert given.config == TopicConfig(
        retention_ms=1500, retention_bytes=1_000_000, max_message_bytes=2_000_000
    )
    assert given.static == {"retention.ms", "retention.bytes", "max.message.bytes"}
    unlimited = server_config({"log.retention.ms": "-5", "log.retention.hours": "1"})
    assert unlimited.topic_defaults.config.retention_ms == -1


def test_kafka_s_topic_creation_and_socket_properties_are_applied() -> None:
    config = server_config(
        {
            "num.partitions": "6",
            "auto.create.topics.enable": "true",
            "socket.send.buffer.bytes": "102400",
            "socket.receive.buffer.bytes": "-1",
        }
    )
    assert (config.num_partitions, config.auto_create_topics_enable) == (6, True)
    assert (config.socket_send_buffer_bytes, config.socket_receive_buffer_bytes) == (102400, -1)
    assert ServerConfig().auto_create_topics_enable is False  # embedded: only when asked
    for refused in (
        {"num.partitions": "0"},
        {"socket.send.buffer.bytes": "0"},
        {"log.retention.bytes": "-2"},
        {"log.retention.hours": "a week"},
    ):
        with pytest.raises(ValueError, match=f"^{next(iter(refused))}"):
            server_config(refused)


@pytest.mark.parametrize(
    ("name", "refusal"),
    [
        ("zookeeper.connect", "a Kafka broker property that a diskless broker does not support: "),
        ("sasl.kerberos.service.name", "a Kafka broker property that a diskless broker does not"),
        ("log.cleanup.policy", "a Kafka broker property that a diskless broker does not support"),
        ("remote.log.storage.system.enable", "a Kafka broker property that a diskless broker"),
        ("log.retention.hourz", "unknown property"),
    ],
)
def test_a_property_neither_applied_nor_accepted_is_refused_for_what_it_is(
    name: str, refusal: str
) -> None:
    with pytest.raises(ValueError) as refused:
        server_config({name: "x"})
    assert str(refused.value).startswith(f"{name}: {refusal}"), str(refused.value)


KRAFT_ONLY = {
    "process.roles": "broker,controller",
    "controller.quorum.voters": "1@localhost:9093",
    "controller.listener.names": "CONTROLLER",
    "inter.broker.listener.name": "PLAINTEXT",
    "log.segment.bytes": "1073741824",
    "min.insync.replicas": "2",
    "default.replication.factor": "3",
    "log.flush.interval.ms": "1000",
    "log.cleaner.threads": "2",
    "num.network.threads": "3",
    "num.io.threads": "8",
    "num.recovery.threads.per.data.dir": "1",
    "offsets.topic.replication.factor": "1",
    "transaction.state.log.replication.factor": "1",
    "transaction.state.log.min.isr": "1",
}
"""Lines of Kafka's KRaft sample `server.properties` that mean nothing to a diskless broker."""


def test_kafka_properties_that_do_not_apply_are_accepted_and_not_applied() -> None:
    applied = {
        "listeners": "PLAINTEXT://127.0.0.1:9092,CONTROLLER://127.0.0.1:9093",
        "advertised.listeners": "PLAINTEXT://localhost:9092, controller://localhost:9093",
        "listener.security.protocol.map": "CONTROLLER:PLAINTEXT,PLAINTEXT:PLAINTEXT",
        "socket.request.max.bytes": "104857600",
    }
    config = server_config({**KRAFT_ONLY, **applied})
    assert config == server_config(
        {
            **applied,
            "listeners": "PLAINTEXT://127.0.0.1:9092",  # the controller's is not served
            "advertised.listeners": "PLAINTEXT://localhost:9092",
        }
    )
    assert config.frame_bytes_max == 104857600
    assert ignored({**applied, **KRAFT_ONLY}) == list(KRAFT_ONLY)
    assert ignored(applied) == []
    # a truly unknown name is still refused beside them, and named
    with pytest.raises(ValueError, match=r"^log\.dirz: unknown property"):
        server_config({**KRAFT_ONLY, "log.dirz": "/var/kafka"})
    # a property diskless honours is not among them
    honoured = ["num.partitions", "log.retention.hours", "socket.send.buffer.bytes", "log.dirs"]
    assert ignored(honoured) == [] and not set(honoured) & set(INAPPLICABLE)


# --- the command line -----------------------------------------------------------------------------
def _refusal(argv: list[str], capsys: pytest.CaptureFixture[str]) -> str:
    with pytest.raises(SystemExit) as exit_info:
        main(argv)
    assert exit_info.value.code == 2
    (line,) = capsys.readouterr().err.splitlines()
    assert line.startswith("python -m diskless.kafka_server: error: "), line
    return line.removeprefix("python -m diskless.kafka_server: error: ")


def test_the_command_refuses_a_bad_file_in_one_line_before_starting(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    file = tmp_path / "server.properties"
    data = ["--data-dir", str(tmp_path / "data")]
    file.write_text("listeners=PLAINTEXT://127.0.0.1:0\nlog.dirs=/var/kafka\nlog.dirz=/var/k\n")
    assert _refusal([*data, "--config", str(file)], capsys) == (
        f"--config: {file}: log.dirz: unknown property"
    )
    missing = tmp_path / "missing.properties"
    assert _refusal([*data, "--config", str(missing)], capsys).startswith(
        f"--config: cannot read '{missing}'"
    )
    file.write_text("node.id=one\n")
    assert _refusal([*data, "--config", str(file)], capsys).startswith(
        f"--config: {file}: node.id: 'one'"
    )
    file.write_text("listeners=SSL://127.0.0.1:0\nssl.keystore.location=/nonexistent.pem\n")
    assert _refusal([*data, "--config", str(file)], capsys).startswith(
        f"--config: {file}: ssl.keystore.location: cannot load"
    )
    file.write_text("listeners=PLAINTEXT://127.0.0.1:65535\n")
    assert "would use port 65536" in _refusal(
        [*data, "--config", str(file), "--brokers", "2"], capsys
    )
    # an override is blamed as one
    file.write_text("socket.request.max.bytes=1048576\n")
    line = _refusal(
        [*data, "--config", str(file), "--override", "queued.max.request.bytes=1"], capsys
    )
    assert line.startswith("--override: queued.max.request.bytes=1: "), line
    assert _refusal([*data, "--override", "no-equals-sign"], capsys).startswith("--override")
    assert _refusal([*data, "--override", "zookeeper.connect=zk:2181"], capsys).startswith(
        "--override: zookeeper.connect=zk:2181: a Kafka broker property that a diskless broker"
        " does not support: ZooKeeper mode"
    )
    file.write_text("log.dirs=\n")
    assert _refusal(["--config", str(file)], capsys) == (
        f"--config: {file}: log.dirs: '': expected a directory"
    )
    assert not (tmp_path / "data").exists()  # refused before anything was created


def _admin_brokers(bootstrap: str, certs: Certs) -> set[str]:
    admin = AdminClient(
        {
            "bootstrap.servers": bootstrap,
            "security.protocol": "SSL",
            "ssl.ca.location": str(certs.ca),
        }
    )
    return {f"{b.host}:{b.port}" for b in admin.list_topics(timeout=10).brokers.values()}


async def test_a_process_started_from_a_file_serves_each_listener_as_configured(
    tmp_path: Path, certs: Certs
) -> None:
    file = tmp_path / "server.properties"
    file.write_text(
        "# two brokers, each with a PLAINTEXT and an SSL listener\n"
        "node.id=7\n"
        "broker.rack=eu-1a\n"
        "listeners=PLAINTEXT://127.0.0.1:0,SSL://127.0.0.1:0\n"
        f"ssl.keystore.location={certs.server_keystore}\n"
        "ssl.client.auth=none\n"
    )
    process = _broker_process(
        tmp_path, file, "--brokers", "2", "--log-level", "WARNING",
        "--override", "connections.max.idle.ms=60000",
    )  # fmt: skip
    try:
        assert process.stdout is not None
        lines = [process.stdout.readline() for _ in range(4)]
        assert lines[0].startswith("bootstrap.servers="), lines
        assert lines[1].strip().startswith("eu-1a: "), lines
        listeners = dict(line.strip().removeprefix("listener ").split(": ") for line in lines[2:])
        assert set(listeners) == {"PLAINTEXT", "SSL"}, lines
        assert listeners["PLAINTEXT"] == lines[0].strip().removeprefix("bootstrap.servers=")
        seen = await asyncio.to_thread(_admin_brokers, listeners["SSL"], certs)
        assert seen == set(listeners["SSL"].split(","))
    finally:
        process.send_signal(signal.SIGTERM)
        _, stderr = process.communicate(timeout=30)
    assert process.returncode == 0, stderr


def test_a_kraft_server_properties_starts_naming_what_it_ignores_in_one_line(
    tmp_path: Path,
) -> None:
    file = tmp_path / "server.properties"
    file.write_text(
        "node.id=1\n"
        + "".join(f"{name}={value}\n" for name, value in KRAFT_ONLY.items())
        + "listeners=PLAINTEXT://127.0.0.1:0,CONTROLLER://127.0.0.1:0\n"
        + "listener.security.protocol.map=CONTROLLER:PLAINTEXT,PLAINTEXT:PLAINTEXT\n"
    )
    process = _broker_process(tmp_path, file, "--log-level", "INFO")
    try:
        assert process.stdout is not None
        started = process.stdout.readline()
        assert started.startswith("bootstrap.servers=127.0.0.1:"), started
        bootstrap = started.strip().removeprefix("bootstrap.servers=")
        admin = AdminClient({"bootstrap.servers": bootstrap})
        brokers = admin.list_topics(timeout=10).brokers.values()
        assert {f"{b.host}:{b.port}" for b in brokers} == {bootstrap}  # serving, as configured
    finally:
        process.send_signal(signal.SIGTERM)
        stdout, stderr = process.communicate(timeout=30)
    assert process.returncode == 0, stderr
    assert "listener " not in stdout  # one listener: the controller's is not served
    (line,) = [line for line in stderr.splitlines() if "do not apply" in line]
    assert line.endswith(
        "ignoring Kafka properties that do not apply to a diskless broker: " + ", ".join(KRAFT_ONLY)
    ), line


def _broker_process(tmp_path: Path, properties: Path, *options: str) -> subprocess.Popen[str]:
    """`python -m diskless.kafka_server --config PROPERTIES OPTIONS`, its output piped."""
    argv = [
        sys.executable, "-m", "diskless.kafka_server", "--data-dir", str(tmp_path / "data"),
        "--config", str(properties), *options,
    ]  # fmt: skip
    return subprocess.Popen(
        argv,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=dict(os.environ, PYTHONUNBUFFERED="1"),
    )


# --- principals ---------------------------------------------------------------------------------
SUBJECTS = [
    "/C=US/ST=CA/L=Palo Alto/O=Diskless, Inc./OU=eng+OU=ops/CN=alice",
    '/DC=org/DC=example/UID=u42/CN=#hash; <semi> "quoted"/emailAddress=a@example.org',
    "/CN= leading and trailing /serialNumber=1234/O=\\+plus",
]


def _certificate(directory: Path, subject: str) -> Path:
    directory.mkdir()
    key, certificate = directory / "k.pem", directory / "c.pem"
    subprocess.run(
        [
            "openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256",
            "-nodes", "-keyout", str(key), "-out", str(certificate), "-days", "1",
            "-subj", subject, "-multivalue-rdn",
        ],
        check=True,
        capture_output=True,
        timeout=60,
    )  # fmt: skip
    return certificate


def test_a_certificate_s_principal_is_java_s_x500_name(tmp_path: Path) -> None:
    """Multi-valued names, escapes, attributes without an RFC 2253 keyword (emailAddress,
    serialNumber), leading and trailing blanks: as Java's X500Principal names them."""
    certificates = [_certificate(tmp_path / str(i), s) for i, s in enumerate(SUBJECTS)]
    ours = [subject_dn(ssl.PEM_cert_to_DER_cert(c.read_text())) for c in certificates]
    assert ours == java_subjects(tmp_path, certificates)
    assert ours[0] == "CN=alice,OU=eng+OU=ops,O=Diskless\\, Inc.,L=Palo Alto,ST=CA,C=US"


async def test_socket_buffer_properties_size_the_listeners_sockets() -> None:
    """SO_SNDBUF / SO_RCVBUF as `socket.send.buffer.bytes` / `socket.receive.buffer.bytes` say
    (Linux reports twice the size asked, its bookkeeping included); -1 leaves the system's."""
    asked = {socket.SO_SNDBUF: 65536, socket.SO_RCVBUF: 131072}
    system = socket.socket()
    defaults = {option: system.getsockopt(socket.SOL_SOCKET, option) for option in asked}
    system.close()
    sized = {"socket.send.buffer.bytes": "65536", "socket.receive.buffer.bytes": "131072"}
    for config, expected in (
        (server_config(sized), {option: 2 * size for option, size in asked.items()}),
        (server_config({"socket.send.buffer.bytes": "-1"}), defaults),
    ):
        coordinator = InMemoryBatchCoordinator()
        async with KafkaCluster(
            MemoryObjectStore(), coordinator, brokers=1, racks=1, server_config=config
        ) as cluster:
            # the listening sockets: those they accept inherit their sizes
            (listening,) = cluster.servers[0]._servers["PLAINTEXT"].sockets
            sizes = {o: listening.getsockopt(socket.SOL_SOCKET, o) for o in asked}
        await coordinator.close()
        assert sizes == expected
