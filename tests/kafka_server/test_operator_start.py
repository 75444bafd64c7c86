"""An operator's first start: Kafka's own sample `server.properties`, unchanged, and no
configuration at all, each a real broker process used by a stock client; the cluster's topic
defaults (`log.retention.*`) applied by retention; `--version`.

Kafka's sample listens on port 9092, as the command does with nothing said: those tests run the
broker in a network namespace of its own (`testkit.netns`), whose port 9092 no other process of
this machine can hold, and its client in the same namespace.

`data/kafka-server.properties` is Kafka's KRaft sample as shipped (`config/kraft/server.properties`
of apache/kafka at 1eb7644349cb, which Kafka 4.0 moved to `config/server.properties`), license
header included; it is never edited.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import textwrap
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Final

import pytest
from confluent_kafka import Consumer, Producer
from confluent_kafka import TopicPartition as CkTopicPartition
from confluent_kafka.admin import AdminClient, ConfigResource, ConfigSource

from testkit.netns import REPOSITORY, Host, network

STOCK: Final = Path(__file__).parent / "data" / "kafka-server.properties"
NOT_APPLIED: Final = [
    "log.dirs",  # the data directory is --data-dir's here
    "process.roles",
    "controller.quorum.voters",
    "inter.broker.listener.name",
    "controller.listener.names",
    "num.network.threads",
    "num.io.threads",
    "num.recovery.threads.per.data.dir",
    "offsets.topic.replication.factor",
    "transaction.state.log.replication.factor",
    "transaction.state.log.min.isr",
    "share.coordinator.state.topic.replication.factor",
    "share.coordinator.state.topic.min.isr",
    "log.segment.bytes",
]
"""What the broker names as not applied when started from the sample, in this order."""
START_TIMEOUT_S: Final = 60

CLIENT: Final = textwrap.dedent(
    """
    import json, sys, time
    from confluent_kafka import Consumer, Producer
    from confluent_kafka.admin import AdminClient, ConfigResource

    bootstrap, topic = sys.argv[1], sys.argv[2]
    producer = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True})
    for i in range(20):
        producer.produce(topic, b"event %d" % i)
    assert producer.flush(30) == 0
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "first-hour",
                         "auto.offset.reset": "earliest"})
    consumer.subscribe([topic])
    values, deadline = [], time.monotonic() + 30
    while len(values) < 20 and time.monotonic() < deadline:
        message = consumer.poll(0.5)
        if message is not None and message.error() is None:
            values.append(message.value().decode())
    consumer.close()
    admin = AdminClient({"bootstrap.servers": bootstrap})
    metadata = admin.list_topics(timeout=10)
    (future,) = admin.describe_configs([ConfigResource("topic", topic)]).values()
    retention = future.result(10)["retention.ms"]
    print(json.dumps({
        "values": values,
        "brokers": sorted(f"{b.id}@{b.host}:{b.port}" for b in metadata.brokers.values()),
        "partitions": len(metadata.topics[topic].partitions),
        "retention": [retention.value, retention.source],
    }))
    """
)
"""Produces 20 records to a topic that does not exist yet, consumes them in a group, and reads
the brokers, the topic's partitions and its retention back: what a client of the host sees."""


@pytest.fixture
def host() -> Iterator[Host]:
    """A host of its own: a network namespace, where port 9092 is free."""
    with network(1) as net:
        yield net.hosts[0]


def _start_in(host: Host, *argv: str) -> tuple[subprocess.Popen[str], str]:
    """`python -m diskless.kafka_server ARGV` in `host`; the process and its bootstrap line."""
    process = host.popen(
        [sys.executable, "-m", "diskless.kafka_server", *argv],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd=REPOSITORY,
        env={**os.environ, "PYTHONPATH": str(REPOSITORY), "PYTHONUNBUFFERED": "1"},
    )
    return process, _bootstrap_line(process)


def _bootstrap_line(process: subprocess.Popen[str]) -> str:
    assert process.stdout is not None
    for line in process.stdout:
        if line.startswith("bootstrap.servers="):
            return line.strip().removeprefix("bootstrap.servers=")
    process.kill()
    raise AssertionError(f"no bootstrap line: {process.communicate(timeout=30)[1]}")


def _stop(process: subprocess.Popen[str]) -> str:
    """SIGTERM; its stderr, once it exited cleanly."""
    process.send_signal(signal.SIGTERM)
    _, stderr = process.communicate(timeout=30)
    assert process.returncode == 0, stderr
    return stderr


def _client(host: Host, bootstrap: str, topic: str) -> dict[str, object]:
    out = host.python(CLIENT, bootstrap, topic, timeout=120)
    seen: dict[str, object] = json.loads(out.stdout.splitlines()[-1])
    return seen


def test_kafka_s_sample_server_properties_starts_unchanged(host: Host, tmp_path: Path) -> None:
    """Only `--data-dir` is added: the sample's `log.dirs` (/tmp/kraft-combined-logs) would be
    honoured, and a directory shared with any other run of this test on the machine would put
    both brokers, both `node.id=1`, in one cluster."""
    process, bootstrap = _start_in(host, "--config", str(STOCK), "--data-dir", str(tmp_path))
    try:
        assert bootstrap == "localhost:9092"  # the sample's advertised PLAINTEXT listener
        seen = _client(host, bootstrap, "quickstart-events")
    finally:
        stderr = _stop(process)
    assert seen["values"] == [f"event {i}" for i in range(20)]
    assert seen["brokers"] == ["1@localhost:9092"]  # node.id=1; the controller's not served
    assert seen["partitions"] == 1  # num.partitions=1, auto.create.topics.enable's default
    # log.retention.hours=168, given in the file: Kafka's STATIC_BROKER_CONFIG
    assert seen["retention"] == [str(168 * 3_600_000), ConfigSource.STATIC_BROKER_CONFIG.value]
    (line,) = [line for line in stderr.splitlines() if "do not apply" in line]
    assert line.endswith(
        "ignoring Kafka properties that do not apply to a diskless broker: "
        + ", ".join(NOT_APPLIED)
    ), line
    assert (tmp_path / "coordinator.sqlite").exists() and any((tmp_path / "objects").rglob("*"))


def test_with_nothing_said_one_broker_serves_on_kafka_s_default_port(
    host: Host, tmp_path: Path
) -> None:
    """Kafka's `listeners=PLAINTEXT://:9092`: every interface (the client bootstraps from the
    host's network address), advertised under the host's name, as Kafka advertises it; one
    broker, id 0; topics created on first use with one partition, kept 7 days."""
    process, bootstrap = _start_in(host, "--data-dir", str(tmp_path))
    try:
        assert bootstrap == f"{socket.getfqdn()}:9092"
        seen = _client(host, f"{host.address}:9092", "first")
    finally:
        _stop(process)
    assert seen["values"] == [f"event {i}" for i in range(20)]
    assert seen["brokers"] == [f"0@{socket.getfqdn()}:9092"]
    assert seen["partitions"] == 1
    assert seen["retention"] == [str(7 * 24 * 3_600_000), ConfigSource.DEFAULT_CONFIG.value]


def test_version_prints_the_version() -> None:
    out = subprocess.run(
        [sys.executable, "-m", "diskless.kafka_server", "--version"],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    assert out.stdout.strip().startswith("diskless ")
    assert out.stdout.strip().removeprefix("diskless ")[0].isdigit(), out.stdout


# --- the cluster's retention default -------------------------------------------------------------
def _low_watermark_after(bootstrap: str, topic: str, deadline_s: float) -> tuple[int, int]:
    """Produce 5 records to `topic` (created on first use), then wait until retention moved its
    start: (low, high) watermarks as last read."""
    producer = Producer({"bootstrap.servers": bootstrap})
    for i in range(5):
        producer.produce(topic, b"%d" % i)
    assert producer.flush(30) == 0
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "watermarks"})
    try:
        deadline = time.monotonic() + deadline_s
        while True:
            low, high = consumer.get_watermark_offsets(CkTopicPartition(topic, 0), timeout=10)
            if low > 0 or time.monotonic() > deadline:
                return low, high
            time.sleep(0.2)
    finally:
        consumer.close()


def _retention_entry(bootstrap: str, topic: str) -> tuple[str, ConfigSource]:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    (future,) = admin.describe_configs([ConfigResource("topic", topic)]).values()
    entry = future.result(10)["retention.ms"]
    return entry.value, ConfigSource(entry.source)


def test_a_topic_without_its_own_retention_is_deleted_by_the_cluster_s_default(
    tmp_path: Path,
) -> None:
    """`log.retention.ms` and `log.retention.check.interval.ms`, Kafka's property names, on a
    topic created on first use: its records go once older than the default. The data directory
    is the first of `log.dirs`. On ephemeral ports of 127.0.0.1 (`--base-port 0`), as nothing
    here needs 9092."""
    first, second = tmp_path / "first", tmp_path / "second"
    process = subprocess.Popen(
        [
            sys.executable, "-m", "diskless.kafka_server",
            "--base-port", "0", "--log-level", "WARNING",
            "--override", f"log.dirs={first},{second}",
            "--override", "log.retention.ms=500",
            "--override", "log.retention.check.interval.ms=100",
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=dict(os.environ, PYTHONUNBUFFERED="1"),
    )  # fmt: skip
    try:
        bootstrap = _bootstrap_line(process)
        low, high = _low_watermark_after(bootstrap, "short-lived", deadline_s=60)
        retention = _retention_entry(bootstrap, "short-lived")
    finally:
        _stop(process)
    assert (low, high) == (5, 5)  # all five records deleted by retention
    assert retention == ("500", ConfigSource.STATIC_BROKER_CONFIG)
    assert (first / "coordinator.sqlite").exists() and not second.exists()
