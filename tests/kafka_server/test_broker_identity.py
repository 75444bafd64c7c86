"""Acceptance: one process per broker id, with real server processes and real clients.

- A second `python -m diskless.kafka_server` started with the broker id of a live process waits
  for that registration to expire (it never does: it is renewed), then exits non-zero with one
  line on stderr naming the broker id; the first process keeps serving as before.
- A process paused (SIGSTOP) past its registration loses its broker id to a new process, which
  starts once the old registration expired. When the paused one resumes, its renewal is
  refused (a newer incarnation registered): it stops serving and exits non-zero, and clients
  go on through the new process.

- A process stopped cleanly (SIGTERM, SIGINT) withdraws its registration before it exits, so
  that a new process for its broker id starts at once instead of waiting for it to expire.

All run over a SQLite file in a shared data directory and over PostgreSQL.
"""

from __future__ import annotations

import asyncio
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Final

import pytest
from confluent_kafka import Consumer
from confluent_kafka import TopicPartition as CkTopicPartition

from diskless.coordinator import BatchCoordinator, PostgresBatchCoordinator, SqliteBatchCoordinator
from testkit.clients import confluent_consume, confluent_produce
from testkit.postgres import database_dsn
from testkit.processes import S3_ENV, BrokerProcess

TOPIC: Final = "identity"
PARTITIONS: Final = 2
REFUSED_WITHIN_S: Final = 20.0
"""The default session timeout (9 s) and the start's margin, with room to spare."""
FENCED_WITHIN_S: Final = 30.0
RENEWAL_S: Final = 3.0
"""A registration is renewed every third of the default session timeout (9 s)."""
SHORT_SESSION_MS: Final = 3_000


def _places(backend: str, tmp_path: Path) -> list[str]:
    data = ["--data-dir", str(tmp_path / "data")]
    if backend == "postgresql":
        return ["--coordinator", database_dsn(tmp_path, "cluster"), *data]
    return data


def _round_trip(address: str, name: str, count: int = 20) -> None:
    """An idempotent producer's records read back once each, through the broker at `address`."""
    acked = confluent_produce(address, TOPIC, name, count, PARTITIONS)
    consumer = Consumer({"bootstrap.servers": address, "group.id": "ends"})
    try:
        ends = {
            p: consumer.get_watermark_offsets(CkTopicPartition(TOPIC, p), timeout=30)[1]
            for p in range(PARTITIONS)
        }
    finally:
        consumer.close()
    audit = confluent_consume(address, TOPIC, ends)
    records = {data for entries in audit.records.values() for _, data in entries}
    assert {f"{name}:{s}".encode() for s in acked} <= records
    assert sorted(acked) == list(range(count))


@pytest.mark.parametrize("backend", ["sqlite", pytest.param("postgresql", marks=pytest.mark.slow)])
def test_a_second_process_for_a_live_broker_id_exits_with_one_line(
    tmp_path: Path, backend: str
) -> None:
    # The second process waits as long as the first one's session before it gives up: keep it
    # short.
    places = [
        *_places(backend, tmp_path),
        "--server-option", f"broker_session_timeout_ms={SHORT_SESSION_MS}",
    ]  # fmt: skip
    first = BrokerProcess(0, 1, [*places, "--topic", f"{TOPIC}:{PARTITIONS}"], tmp_path / "0.log")
    try:
        first.start()
        _round_trip(first.address, "before")
        started = time.monotonic()
        argv = [
            sys.executable, "-m", "diskless.kafka_server", *places,
            "--broker-ids", "0", "--racks", "1", "--base-port", "0", "--log-level", "ERROR",
        ]  # fmt: skip
        env = {**os.environ, **S3_ENV}
        timeout_s = REFUSED_WITHIN_S + 10
        second = subprocess.run(argv, capture_output=True, text=True, timeout=timeout_s, env=env)
        took = time.monotonic() - started
        print(f"the second process exited {second.returncode} after {took:.1f} s: {second.stderr}")
        assert second.returncode != 0
        assert took < REFUSED_WITHIN_S
        lines = second.stderr.strip().splitlines()
        assert len(lines) == 1, second.stderr
        assert re.match(r"cannot start: broker id 0 is registered by a live process", lines[0])
        assert "bootstrap.servers=" not in second.stdout
        # The first one was never fenced: still running, still serving, past a renewal.
        time.sleep(RENEWAL_S)
        assert first.process is not None and first.process.poll() is None, first.log_tail()
        _round_trip(first.address, "after")
        assert "fenced" not in first.log_tail(200)
    finally:
        first.kill()


@pytest.mark.parametrize("backend", ["sqlite", pytest.param("postgresql", marks=pytest.mark.slow)])
def test_a_paused_process_fenced_by_a_new_one_stops_serving(tmp_path: Path, backend: str) -> None:
    places = _places(backend, tmp_path)
    options = [
        *places,
        "--topic", f"{TOPIC}:{PARTITIONS}",
        "--server-option", f"broker_session_timeout_ms={SHORT_SESSION_MS}",
    ]  # fmt: skip
    old = BrokerProcess(0, 1, options, tmp_path / "old.log")
    new = BrokerProcess(0, 1, options, tmp_path / "new.log")
    try:
        old.start()
        _round_trip(old.address, "old")
        assert old.process is not None
        os.killpg(old.process.pid, signal.SIGSTOP)
        paused_at = time.monotonic()
        new.start()  # waits until the paused process's registration expired
        took_over = time.monotonic() - paused_at
        _round_trip(new.address, "new")
        os.killpg(old.process.pid, signal.SIGCONT)
        resumed_at = time.monotonic()
        try:
            status = old.process.wait(FENCED_WITHIN_S)
        except subprocess.TimeoutExpired:
            raise AssertionError(f"the fenced process kept running: {old.log_tail()}") from None
        exited_after = time.monotonic() - resumed_at
        print(
            f"the new process took over {took_over:.1f} s after the pause; the fenced one"
            f" exited {status} {exited_after:.1f} s after resuming: {old.log_tail(3)}"
        )
        assert status != 0
        assert "broker 0 was fenced" in old.log_tail(5)
        assert new.process is not None and new.process.poll() is None, new.log_tail()
        _round_trip(new.address, "after")
    finally:
        if old.process is not None and old.process.poll() is None:
            os.killpg(old.process.pid, signal.SIGCONT)
        old.kill()
        new.kill()


def _coordinator(backend: str, tmp_path: Path) -> BatchCoordinator:
    """The coordinator the processes of `_places` share, opened by the test."""
    if backend == "postgresql":
        return PostgresBatchCoordinator(database_dsn(tmp_path, "cluster"))
    return SqliteBatchCoordinator(tmp_path / "data" / "coordinator.sqlite")


async def _registered(backend: str, tmp_path: Path) -> list[tuple[int, int]]:
    coordinator = _coordinator(backend, tmp_path)
    try:
        return [(r.broker_id, r.broker_epoch) for r in await coordinator.live_brokers()]
    finally:
        await coordinator.close()


@pytest.mark.parametrize(
    ("backend", "sig"),
    [
        ("sqlite", signal.SIGTERM),
        ("sqlite", signal.SIGINT),
        pytest.param("postgresql", signal.SIGTERM, marks=pytest.mark.slow),
    ],
)
def test_a_cleanly_stopped_process_is_unregistered_and_its_id_restarts_at_once(
    tmp_path: Path, backend: str, sig: signal.Signals
) -> None:
    places = _places(backend, tmp_path)
    options = [*places, "--topic", f"{TOPIC}:{PARTITIONS}"]
    broker = BrokerProcess(0, 1, options, tmp_path / "0.log")
    try:
        broker.start()
        _round_trip(broker.address, "before")
        time.sleep(RENEWAL_S)  # past a renewal of its registration
        assert [b for b, _ in asyncio.run(_registered(backend, tmp_path))] == [0]
        assert broker.process is not None
        broker.process.send_signal(sig)
        assert broker.process.wait(REFUSED_WITHIN_S) == 0, broker.log_tail()
        broker.kill()  # nothing left to kill: collects its output pipe
        assert asyncio.run(_registered(backend, tmp_path)) == []  # withdrawn before the exit
        started = time.monotonic()
        broker.start()
        print(f"restarted after {signal.Signals(sig).name}: serving in"
              f" {time.monotonic() - started:.1f} s")  # fmt: skip
        assert "waiting up to" not in broker.log_tail(200)  # no old registration to outwait
        _round_trip(broker.address, "after")
    finally:
        broker.kill()
