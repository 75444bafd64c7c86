"""`python -m diskless.kafka_server`: a real process on SQLite and local files, used by a client.

Integration test: starts the command on ephemeral ports, reads the bootstrap line it prints, runs
a kafka-python round trip against it, stops it with SIGTERM, and checks it exits cleanly.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

from kafka import KafkaConsumer, KafkaProducer
from kafka import TopicPartition as KpTopicPartition


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
