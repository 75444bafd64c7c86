"""Acceptance: a PostgreSQL outage under load is two log lines per broker, not one per failed call.

Three `python -m diskless.kafka_server` processes (one broker each) share a PostgreSQL coordinator
on the test run's server; a confluent-kafka producer keeps sending to all of them. The server is
stopped for a few seconds (`pg_ctl stop -m immediate`, a crash) and started again. Every broker
process's log (at INFO) then holds, beside its start-up lines, one WARNING that the coordinator is
unreachable and one that it is back with the outage's duration and failed calls, whatever the
number of calls that failed; no traceback anywhere; and the producer's records all land.
"""

from __future__ import annotations

import re
import threading
import time
from pathlib import Path
from typing import Final

import pytest
from confluent_kafka import KafkaError, Producer

from testkit.postgres import database_dsn, server
from testkit.processes import BrokerProcess, bootstrap, broker_processes

BROKERS: Final = 3
PARTITIONS: Final = 6
WARM_UP_ACKS: Final = 500
RECOVERY_TIMEOUT_S: Final = 30.0
_LEVEL: Final = re.compile(r"^\S+ \S+ (DEBUG|INFO|WARNING|ERROR|CRITICAL) ")
_BACK: Final = re.compile(r"coordinator reachable again after ([\d.]+) s; (\d+) calls failed")


class Load:
    """One idempotent producer sending to every partition until stopped."""

    def __init__(self, servers: str) -> None:
        self.acked = 0
        self.errors: list[str] = []
        self._stop = threading.Event()
        self._producer = Producer(
            {
                "bootstrap.servers": servers,
                "acks": "all",
                "enable.idempotence": True,
                "linger.ms": 5,
                "message.timeout.ms": 120_000,
            }
        )
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _delivered(self, error: KafkaError | None, _: object) -> None:
        if error is None:
            self.acked += 1
        else:
            self.errors.append(str(error))

    def _run(self) -> None:
        sent = 0
        while not self._stop.is_set():
            try:
                self._producer.produce(
                    "load", b"x" * 100, partition=sent % PARTITIONS, on_delivery=self._delivered
                )
                sent += 1
            except BufferError:
                self._producer.poll(0.05)
            self._producer.poll(0)
            if sent % 50 == 0:
                time.sleep(0.005)

    def wait_for(self, acked: int, timeout_s: float) -> None:
        deadline = time.monotonic() + timeout_s
        while self.acked < acked:
            assert time.monotonic() < deadline, f"{self.acked} acked, waiting for {acked}"
            time.sleep(0.05)

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(30)
        assert self._producer.flush(RECOVERY_TIMEOUT_S) == 0, "records still undelivered"


def _log_lines(broker: BrokerProcess) -> list[tuple[str, str]]:
    """(level, line) of each log record of the broker's process."""
    text = broker._log.read_text(errors="replace")
    return [
        (match[1], line) for line in text.splitlines() if (match := _LEVEL.match(line)) is not None
    ]


def _until_back(brokers: list[BrokerProcess], timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    while not all(_BACK.search(b._log.read_text(errors="replace")) for b in brokers):
        assert time.monotonic() < deadline, "\n".join(b.log_tail() for b in brokers)
        time.sleep(0.2)


def _outage_under_load(tmp_path: Path, outage_s: float) -> None:
    pg = server()
    options = [
        "--coordinator", database_dsn(tmp_path),
        "--data-dir", str(tmp_path / "data"),
        "--topic", f"load:{PARTITIONS}",
        "--log-level", "INFO",
    ]  # fmt: skip
    with broker_processes(BROKERS, tmp_path, options) as brokers:
        load = Load(bootstrap(brokers))
        try:
            load.wait_for(WARM_UP_ACKS, RECOVERY_TIMEOUT_S)
            pg.stop()
            try:
                time.sleep(outage_s)
            finally:
                pg.start()
            _until_back(brokers, RECOVERY_TIMEOUT_S)
            after = load.acked
            load.wait_for(after + WARM_UP_ACKS, RECOVERY_TIMEOUT_S)  # serving again
        finally:
            load.stop()
        assert load.errors == []
        failed_calls = 0
        for broker in brokers:
            lines = _log_lines(broker)
            text = broker._log.read_text(errors="replace")
            assert "Traceback" not in text, broker.log_tail()
            warnings = [line for level, line in lines if level != "INFO" and level != "DEBUG"]
            down = [w for w in warnings if "coordinator unreachable" in w]
            back = [w for w in warnings if _BACK.search(w)]
            assert len(down) == len(back) == 1, "\n".join(warnings)
            # A small constant per broker, whatever the number of calls that failed.
            assert len(warnings) == 2, "\n".join(warnings)
            match = _BACK.search(back[0])
            assert match is not None
            assert float(match[1]) >= outage_s * 0.5  # roughly the outage, as this broker saw it
            failed_calls += int(match[2])
        assert failed_calls > 2 * BROKERS  # more calls failed than lines were written


def test_a_short_coordinator_outage_is_two_lines_per_broker(tmp_path: Path) -> None:
    _outage_under_load(tmp_path, outage_s=3.0)


@pytest.mark.slow
def test_a_longer_coordinator_outage_is_still_two_lines_per_broker(tmp_path: Path) -> None:
    _outage_under_load(tmp_path, outage_s=12.0)
