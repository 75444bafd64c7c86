"""`python -m diskless.kafka_server`: a real process on SQLite and local files, used by a client.

Integration test: starts the command on ephemeral ports, reads the bootstrap line it prints, runs
a kafka-python round trip against it, stops it with SIGTERM, and checks it exits cleanly.
"""

from __future__ import annotations

import os
import re
import signal
import socket
import struct
import subprocess
import sys
import time
from pathlib import Path
from typing import Final

import kio.schema.metadata.v1.request as metadata_v1
import pytest
from kafka import KafkaConsumer, KafkaProducer
from kafka import TopicPartition as KpTopicPartition

from diskless import BrokerConfig
from diskless.lifecycle import CleanerConfig
from diskless.wal import WalConfig
from testkit.wire import decode_response, encode_request

SESSION: Final = ("--server-option", "broker_session_timeout_ms=3000")
"""A session a third of the default's: a process that stops renewing leaves the others' views
three times as soon."""
FROZEN_AT_LEAST: Final = 50_000
"""Objects a started broker process holds from its start, well below the 130,000 or so there
are (imported modules, configuration, the brokers' state)."""


def _round_trip(bootstrap: str) -> list[bytes]:
    producer = KafkaProducer(bootstrap_servers=bootstrap, acks="all", enable_idempotence=True)
    futures = [producer.send("cli", value=b"%d" % i, partition=i % 2) for i in range(50)]
    for future in futures:
        future.get(timeout=30)
    producer.close()
    consumer = KafkaConsumer(
        bootstrap_servers=bootstrap, auto_offset_reset="earliest", consumer_timeout_ms=3000
    )
    consumer.assign([KpTopicPartition("cli", 0), KpTopicPartition("cli", 1)])
    values = [m.value for m in consumer]
    consumer.close()
    return values


def test_the_command_starts_a_cluster_that_clients_use(tmp_path: Path) -> None:
    env = dict(os.environ, PYTHONUNBUFFERED="1")
    process = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "diskless.kafka_server",
            "--brokers",
            "3",
            "--racks",
            "3",
            "--base-port",
            "0",
            "--data-dir",
            str(tmp_path),
            "--topic",
            "cli:2",
            "--log-level",
            "WARNING",
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )
    try:
        assert process.stdout is not None
        lines = []
        for line in process.stdout:
            lines.append(line)
            if line.startswith("bootstrap.servers="):
                break
        bootstrap = lines[-1].strip().partition("=")[2]
        rack_lines = [process.stdout.readline() for _ in range(3)]
        assert [r.split(":")[0].strip() for r in rack_lines] == ["rack-0", "rack-1", "rack-2"]
        assert len(bootstrap.split(",")) == 3
        assert all(address.startswith("127.0.0.1:") for address in bootstrap.split(","))
        values = _round_trip(bootstrap)
        assert sorted(values, key=int) == [b"%d" % i for i in range(50)]
    finally:
        process.send_signal(signal.SIGTERM)
        _, stderr = process.communicate(timeout=30)
    assert process.returncode == 0, stderr
    assert (tmp_path / "coordinator.sqlite").exists()
    assert any((tmp_path / "objects").rglob("*"))


def _start(tmp_path: Path, *options: str) -> tuple[subprocess.Popen[str], str]:
    """Start the command on `tmp_path`; returns the process and the bootstrap it printed."""
    argv = [
        sys.executable, "-m", "diskless.kafka_server", "--data-dir", str(tmp_path),
        "--base-port", "0", *options,
    ]  # fmt: skip
    process = subprocess.Popen(
        argv,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=dict(os.environ, PYTHONUNBUFFERED="1"),
    )
    assert process.stdout is not None
    for line in process.stdout:
        if line.startswith("bootstrap.servers="):
            return process, line.strip().partition("=")[2]
    process.kill()
    raise AssertionError(f"no bootstrap line: {process.communicate(timeout=30)[1]}")


def _broker_ids(address: str) -> set[int]:
    """The brokers that Metadata (v1, no topics) of the broker at `address` lists."""
    host, _, port = address.rpartition(":")
    with socket.create_connection((host, int(port)), timeout=10) as connection:
        connection.sendall(encode_request(metadata_v1.MetadataRequest(topics=()), 1))
        stream = connection.makefile("rb")
        (size,) = struct.unpack(">i", stream.read(4))
        frame = stream.read(size)
    response = decode_response(frame, 3, 1, 1)
    return {int(b.node_id) for b in response.brokers}


def _stop(process: subprocess.Popen[str]) -> None:
    process.send_signal(signal.SIGTERM)
    _, stderr = process.communicate(timeout=30)
    assert process.returncode == 0, stderr


def _wait_for_brokers(addresses: list[str], expected: set[int]) -> None:
    """Until every broker at `addresses` lists `expected`: each process reads the registry
    every second."""
    deadline = time.monotonic() + 30
    for address in addresses:
        while (seen := _broker_ids(address)) != expected:
            assert time.monotonic() < deadline, f"{address}: brokers {seen}, expected {expected}"
            time.sleep(0.5)


def test_a_second_process_joins_the_cluster_of_the_first(tmp_path: Path) -> None:
    first, first_bootstrap = _start(
        tmp_path, "--brokers", "3", "--topic", "cli:2", "--log-level", "WARNING", *SESSION
    )
    second = None
    try:
        second, second_bootstrap = _start(
            tmp_path, "--broker-ids", "4,5", "--log-level", "WARNING", *SESSION
        )
        assert len(second_bootstrap.split(",")) == 5  # its own brokers and the first's
        own = [a for a in second_bootstrap.split(",") if a not in first_bootstrap.split(",")]
        assert len(own) == 2
        first_brokers = first_bootstrap.split(",")
        _wait_for_brokers(own + first_brokers, {0, 1, 2, 4, 5})
        values = _round_trip(",".join(own))
        assert sorted(values, key=int) == [b"%d" % i for i in range(50)]
        _stop(second)
        second = None
        _wait_for_brokers(first_brokers, {0, 1, 2})  # withdrawn at shutdown
    finally:
        if second is not None:
            second.kill()
            second.communicate(timeout=30)
        _stop(first)


def test_the_wal_commit_interval_is_an_option_and_the_lease_covers_it(tmp_path: Path) -> None:
    from diskless.broker import txn_lease_budget_ms
    from diskless.kafka_server.__main__ import COMMIT_BOUNDS, _parser
    from diskless.kafka_server._server.process import cli

    def configured(*argv: str) -> BrokerConfig:
        args = _parser().parse_args(["--data-dir", str(tmp_path), *argv])
        return cli.configs(args, [0], COMMIT_BOUNDS).broker

    default, chosen = configured(), configured("--commit-interval-ms", "5000")
    assert chosen.wal.commit_interval_ms == 5000 != default.wal.commit_interval_ms
    assert chosen.txn_lease_ttl_ms == txn_lease_budget_ms(chosen.wal)
    assert (
        chosen.txn_lease_ttl_ms - default.txn_lease_ttl_ms == 5000 - default.wal.commit_interval_ms
    )
    with pytest.raises(cli.UsageError, match="--commit-interval-ms"):
        configured("--commit-interval-ms", "-1")


def test_the_wal_linger_and_rotation_floor_are_options(tmp_path: Path) -> None:
    from diskless.kafka_server.__main__ import COMMIT_BOUNDS, _parser
    from diskless.kafka_server._server.process import cli

    def configured(*argv: str) -> BrokerConfig:
        args = _parser().parse_args(["--data-dir", str(tmp_path), *argv])
        return cli.configs(args, [0], COMMIT_BOUNDS).broker

    default = configured().wal
    assert (default.linger_ms, default.rotate_interval_min_ms) == (2, 50)
    chosen = configured("--linger-ms", "7", "--rotate-interval-min-ms", "100").wal
    assert (chosen.linger_ms, chosen.rotate_interval_min_ms) == (7, 100)
    with pytest.raises(cli.UsageError, match="--linger-ms"):
        configured("--linger-ms", "-1")
    with pytest.raises(cli.UsageError, match="--rotate-interval-min-ms"):
        configured("--rotate-interval-min-ms", "-1")
    assert default.rotate_floor_bytes == 64 * 1024
    assert configured("--rotate-floor-bytes", "1048576").wal.rotate_floor_bytes == 1048576
    with pytest.raises(cli.UsageError, match="--rotate-floor-bytes"):
        configured("--rotate-floor-bytes", "-1")


def test_the_wal_settings_are_also_kafka_style_properties(tmp_path: Path) -> None:
    from diskless.kafka_server.__main__ import COMMIT_BOUNDS, _parser
    from diskless.kafka_server._server.process import cli, cli_properties

    def configured(*argv: str) -> WalConfig:
        args = _parser().parse_args(["--data-dir", str(tmp_path), *argv])
        properties = cli_properties.Properties(args)
        named = properties.flag_values(args)
        base = properties.server_config(args)
        return cli.configs(args, [0], COMMIT_BOUNDS, base, named).broker.wal

    file = tmp_path / "server.properties"
    file.write_text(
        "diskless.produce.linger.ms=7\n"
        "diskless.produce.rotate.interval.min.ms=100\n"
        "diskless.produce.commit.interval.ms=500\n"
        "diskless.produce.upload.timeout.ms=9000\n"
        "diskless.produce.rotate.floor.bytes=262144\n"
    )
    wal = configured("--config", str(file))
    assert (wal.linger_ms, wal.rotate_interval_min_ms) == (7, 100)
    assert wal.rotate_floor_bytes == 262144
    assert (wal.commit_interval_ms, wal.upload_timeout_ms) == (500, 9000)
    overridden = configured(
        "--config", str(file), "--override", "diskless.produce.linger.ms=3",
        "--commit-interval-ms", "400",
    )  # fmt: skip
    assert (overridden.linger_ms, overridden.commit_interval_ms) == (3, 400)  # the flag wins
    with pytest.raises(cli.UsageError, match=r"^diskless\.produce\.linger\.ms: -1"):
        configured("--override", "diskless.produce.linger.ms=-1")
    with pytest.raises(cli.UsageError, match=r"^--override: diskless\.produce\.linger\.ms=x"):
        configured("--override", "diskless.produce.linger.ms=x")


def test_the_cleaners_map_is_kafkas_dedupe_buffer_property_or_a_flag(tmp_path: Path) -> None:
    from diskless.kafka_server.__main__ import COMMIT_BOUNDS, _parser
    from diskless.kafka_server._server.process import cli, cli_properties

    def map_bytes(*argv: str) -> int:
        args = _parser().parse_args(["--data-dir", str(tmp_path), *argv])
        properties = cli_properties.Properties(args)
        named = properties.flag_values(args)
        base = properties.server_config(args)
        lifecycle = cli.configs(args, [0], COMMIT_BOUNDS, base, named).lifecycle
        return lifecycle.cleaning().map_bytes

    assert map_bytes() == CleanerConfig().map_bytes
    prop = "log.cleaner.dedupe.buffer.size"
    assert map_bytes("--override", f"{prop}=1048576") == 1 << 20
    flag = ("--cleaner-dedupe-buffer-bytes", "4096")
    assert map_bytes("--override", f"{prop}=1048576", *flag) == 4096  # the flag wins
    with pytest.raises(cli.UsageError, match=r"^log\.cleaner\.dedupe\.buffer\.size: 10"):
        map_bytes("--override", f"{prop}=10")


def _metadata(path: Path) -> tuple[int, int]:
    """(batch rows, extent rows) of the coordinator at `path`, read as another process would."""
    import asyncio

    from diskless.coordinator import SqliteBatchCoordinator

    async def read() -> tuple[int, int]:
        coordinator = SqliteBatchCoordinator(path)
        try:
            stats = await coordinator.metadata_stats()
            return stats.batch_rows, stats.extent_rows
        finally:
            await coordinator.close()

    return asyncio.run(read())


def _produce(bootstrap: str, topic: str, count: int) -> None:
    producer = KafkaProducer(bootstrap_servers=bootstrap, acks="all", enable_idempotence=True)
    for future in [producer.send(topic, value=b"%d" % i, partition=0) for i in range(count)]:
        future.get(timeout=30)
    producer.close()


def test_the_process_consolidates_old_batches_and_enforces_retention(tmp_path: Path) -> None:
    """With the lifecycle on (the default), batches older than the consolidation age move into
    consolidated objects that consumers read as before, and a topic's retention.ms deletes its
    old records."""
    from kafka.admin import KafkaAdminClient, NewTopic

    process, bootstrap = _start(
        tmp_path,
        "--brokers", "1", "--topic", "cli:2", "--log-level", "WARNING",
        "--consolidation-age-ms", "0", "--consolidation-period-ms", "200",
        "--retention-check-interval-ms", "200",
    )  # fmt: skip
    try:
        admin = KafkaAdminClient(bootstrap_servers=bootstrap)
        admin.create_topics([NewTopic("short", 1, 1, topic_configs={"retention.ms": "500"})])
        admin.close()
        _produce(bootstrap, "cli", 50)
        deadline = time.monotonic() + 30
        while (rows := _metadata(tmp_path / "coordinator.sqlite"))[1] == 0 or rows[0] != 0:
            assert time.monotonic() < deadline, f"not consolidated: {rows}"
            time.sleep(0.2)
        consumer = KafkaConsumer(
            bootstrap_servers=bootstrap, auto_offset_reset="earliest", consumer_timeout_ms=3000
        )
        consumer.assign([KpTopicPartition("cli", 0)])
        assert [m.value for m in consumer] == [b"%d" % i for i in range(50)]
        _produce(bootstrap, "short", 10)
        short = KpTopicPartition("short", 0)
        while consumer.beginning_offsets([short])[short] < 10:
            assert time.monotonic() < deadline + 30, "retention never ran"
            time.sleep(0.2)
        consumer.close()
    finally:
        _stop(process)


def test_no_lifecycle_leaves_the_batches_where_they_are(tmp_path: Path) -> None:
    process, bootstrap = _start(
        tmp_path,
        "--brokers", "1", "--topic", "cli:2", "--log-level", "WARNING", "--no-lifecycle",
        "--consolidation-age-ms", "0", "--consolidation-period-ms", "200",
    )  # fmt: skip
    try:
        _produce(bootstrap, "cli", 20)
        time.sleep(1.0)  # five consolidation periods, had it been running
        batch_rows, extent_rows = _metadata(tmp_path / "coordinator.sqlite")
        assert batch_rows > 0 and extent_rows == 0
    finally:
        _stop(process)


def _extent_keys(path: Path, topic: str) -> set[str]:
    """The objects holding the consolidated data of `topic`'s partition 0."""
    import asyncio

    from diskless import TopicPartition
    from diskless.coordinator import FindBatchesRequest, SqliteBatchCoordinator

    async def read() -> set[str]:
        coordinator = SqliteBatchCoordinator(path)
        try:
            request = FindBatchesRequest(TopicPartition(topic, 0), 0, 1 << 30)
            (found,) = await coordinator.find_batches([request], 1 << 30)
            return {b.object_key for b in found.batches if b.extent is not None}
        finally:
            await coordinator.close()

    return asyncio.run(read())


def _wait_consolidated(path: Path) -> None:
    deadline = time.monotonic() + 30
    while (rows := _metadata(path))[1] == 0 or rows[0] != 0:
        assert time.monotonic() < deadline, f"not consolidated: {rows}"
        time.sleep(0.2)


def test_only_the_process_with_the_lowest_live_broker_runs_the_lifecycle(tmp_path: Path) -> None:
    """Two processes over one data directory: the lifecycle runs in the one holding broker 0
    (its consolidated objects are named after node 0), and moves to the other one (node 4) when
    that process stops."""
    fast = ("--consolidation-age-ms", "0", "--consolidation-period-ms", "200", *SESSION)
    first, first_bootstrap = _start(
        tmp_path, "--brokers", "1", "--topic", "a:1", "--topic", "b:1", *fast
    )
    second = None
    try:
        second, second_bootstrap = _start(tmp_path, "--broker-ids", "4", *fast)
        _wait_for_brokers(first_bootstrap.split(","), {0, 4})
        _produce(second_bootstrap, "a", 20)
        _wait_consolidated(tmp_path / "coordinator.sqlite")
        keys = _extent_keys(tmp_path / "coordinator.sqlite", "a")
        assert keys and all("-b0-" in key for key in keys), keys
        _stop(first)
        first = None
        own_address = second_bootstrap.split(",")[-1]
        _wait_for_brokers([own_address], {4})
        # Not the printed bootstrap: it still lists the stopped process, and kafka-python leaks
        # the socket of a refused connection (closed only by the garbage collector, later, in
        # whichever test is running then).
        _produce(own_address, "b", 20)
        _wait_consolidated(tmp_path / "coordinator.sqlite")
        keys = _extent_keys(tmp_path / "coordinator.sqlite", "b")
        assert keys and all("-b4-" in key for key in keys), keys
    finally:
        for process in (first, second):
            if process is not None:
                _stop(process)


def test_the_process_freezes_its_start_up_heap_once_it_serves(tmp_path: Path) -> None:
    """Full collections skip what starting built (`_server.process.heap`): the debug line says
    how much, and it is the bulk of a started process's objects."""
    log = tmp_path / "stderr.log"
    argv = [
        sys.executable, "-m", "diskless.kafka_server", "--data-dir", str(tmp_path / "data"),
        "--base-port", "0", "--log-level", "DEBUG",
    ]  # fmt: skip
    with log.open("w") as stderr:
        process = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=stderr, text=True)
    assert process.stdout is not None
    try:
        served = any(line.startswith("bootstrap.servers=") for line in process.stdout)
    finally:
        process.send_signal(signal.SIGTERM)
        process.communicate(timeout=30)
    text = log.read_text()
    assert served, text[-2000:]
    frozen = [int(n) for n in re.findall(r"start-up heap of (\d+) objects frozen", text)]
    assert len(frozen) == 1, text[-2000:]
    assert frozen[0] >= FROZEN_AT_LEAST, frozen
