"""Acceptance: queues (KIP-932) with real share consumers, confluent-kafka's `ShareConsumer`,
three members in processes of their own, against broker processes 0 and 1 over a PostgreSQL
batch coordinator.

The group starts at the earliest offset and its locks last 2 s (`share.auto.offset.reset` and
`share.record.lock.duration.ms`, set through IncrementalAlterConfigs on the GROUP resource; the
brokers' `group.share.min.record.lock.duration.ms` allows it); a record is delivered at most 3
times (the brokers' `group.share.delivery.count.limit`). Two members work (`_share_member`);
the third takes records, holds them, is frozen (SIGSTOP: its connection stays open, so only
the locks' expiry frees what it holds) and is then SIGKILLed. Explicit mode, each record
decided by its value:
- every record neither rejected nor released to the limit is accepted exactly once;
- a record released at its first delivery comes back with a higher delivery count;
- a rejected record never comes back;
- the held records reach the working members after the lock ran out, delivered again;
- a record released every time is delivered exactly 3 times, then archived.
Implicit mode: every record is accepted exactly once, the held ones by the working members.
"""

from __future__ import annotations

import collections
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, Final

import pytest
from confluent_kafka import Producer
from confluent_kafka.admin import (
    AdminClient,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    ResourceType,
)

from testkit.postgres import database_dsn
from testkit.processes import BrokerProcess

TOPIC: Final = "jobs"
GROUP: Final = "workers"
RECORDS: Final = 300
LOCK_MS: Final = 2_000
DELIVERY_LIMIT: Final = 3
DEADLINE_S: Final = 120.0
CONFIGS_SPREAD_S: Final = 1.5
"""Every broker process reads the group configs again within a second."""
ROOT: Final = Path(__file__).resolve().parents[2]


def _brokers(tmp_path: Path) -> list[BrokerProcess]:
    options = [
        "--coordinator", database_dsn(tmp_path, "cluster"), "--data-dir", str(tmp_path / "data"),
        "--topic", f"{TOPIC}:1", "--log-level", "INFO",
        "--override", f"group.share.min.record.lock.duration.ms={LOCK_MS // 2}",
        "--override", f"group.share.delivery.count.limit={DELIVERY_LIMIT}",
    ]  # fmt: skip
    return [BrokerProcess(i, 2, options, tmp_path / f"broker-{i}.log") for i in range(2)]


def _configure_the_group(address: str) -> None:
    """The group starts at the earliest offset and holds its locks for `LOCK_MS`."""
    admin = AdminClient({"bootstrap.servers": address})
    configs = {"share.auto.offset.reset": "earliest", "share.record.lock.duration.ms": LOCK_MS}
    resource = ConfigResource(
        ResourceType.GROUP,
        GROUP,
        incremental_configs=[
            ConfigEntry(name, str(value), incremental_operation=AlterConfigOpType.SET)
            for name, value in configs.items()
        ],
    )
    for future in admin.incremental_alter_configs([resource]).values():
        future.result(30)
    time.sleep(CONFIGS_SPREAD_S)


def _produce(address: str) -> None:
    producer = Producer({"bootstrap.servers": address, "linger.ms": 5})
    for value in range(RECORDS):
        producer.produce(TOPIC, str(value).encode())
    assert producer.flush(30) == 0


class _Member:
    def __init__(self, tmp_path: Path, address: str, mode: str, role: str, name: str) -> None:
        self.events = tmp_path / f"{name}.jsonl"
        self.stop_file = tmp_path / f"{name}.stop"
        log = (tmp_path / f"{name}.log").open("w")
        self.process = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "tests.kafka_server._share_member",
                address,
                TOPIC,
                GROUP,
                mode,
                role,
                str(self.events),
                str(self.stop_file),
            ],
            cwd=ROOT,
            start_new_session=True,
            stdout=subprocess.DEVNULL,
            stderr=log,
        )
        log.close()  # the child has its own copy

    def read(self) -> list[dict[str, Any]]:
        if not self.events.exists():
            return []
        return [json.loads(line) for line in self.events.read_text().splitlines() if line]

    def signal(self, number: int) -> None:
        if self.process.poll() is None:
            os.killpg(self.process.pid, number)

    def close(self) -> None:
        self.stop_file.touch()
        try:
            self.process.wait(60)
        finally:
            self.signal(signal.SIGKILL)
            self.process.wait(10)


def _wait(condition: Any, what: str, members: list[_Member]) -> None:
    deadline = time.monotonic() + DEADLINE_S
    while not condition():
        for m in members:
            code = m.process.poll()
            assert code is None or code == -signal.SIGKILL, f"a member exited with {code}"
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.2)


def _done_explicit(events: list[dict[str, Any]]) -> set[int]:
    """The values whose fate is sealed: accepted, rejected, or released at the limit."""
    done = set()
    for e in events:
        if not e["ok"]:
            continue
        sealed = e["action"] in ("accept", "reject") or (
            e["action"] == "release" and e["delivery_count"] >= DELIVERY_LIMIT
        )
        if sealed:
            done.add(e["value"])
    return done


@pytest.mark.parametrize("mode", ["explicit", "implicit"])
def test_share_consumers_deliver_each_record_to_one_member(tmp_path: Path, mode: str) -> None:
    brokers = _brokers(tmp_path)
    members: list[_Member] = []
    try:
        for broker in brokers:
            broker.start()
        _configure_the_group(brokers[0].address)
        _produce(brokers[0].address)
        holder = _Member(tmp_path, brokers[0].address, mode, "hold", "holder")
        members.append(holder)
        _wait(lambda: bool(holder.read()), "the holder's records", [holder])
        holder.signal(signal.SIGSTOP)  # frozen with its connection open: only locks free them
        held = {e["value"] for e in holder.read()}
        workers = [
            _Member(tmp_path, brokers[i % 2].address, mode, "work", f"worker-{i}") for i in range(2)
        ]
        members += workers

        def events() -> list[dict[str, Any]]:
            return [e for m in workers for e in m.read()]

        if mode == "explicit":
            _wait(lambda: len(_done_explicit(events())) == RECORDS, "every record", workers)
        else:
            _wait(
                lambda: {e["value"] for e in events() if e["ok"]} == set(range(RECORDS)),
                "every record",
                workers,
            )
        holder.signal(signal.SIGKILL)
        for m in workers:
            m.close()
        seen = events()
    finally:
        for m in members:
            m.signal(signal.SIGKILL)
        for broker in brokers:
            broker.kill()
    print(f"{len(seen)} deliveries to the workers, {len(held)} records held by the frozen member")
    by_value: dict[int, list[dict[str, Any]]] = collections.defaultdict(list)
    for e in seen:
        by_value[e["value"]].append(e)
    accepted = collections.Counter(e["value"] for e in seen if e["action"] == "accept" and e["ok"])
    # the records the frozen member held came to the others once their lock ran out
    assert held
    for value in held:
        assert by_value[value], f"{value} held by the frozen member never came back"
        assert min(e["delivery_count"] for e in by_value[value]) >= 2
    if mode == "implicit":
        assert set(accepted) == set(range(RECORDS))
        assert max(accepted.values()) == 1, "a record was accepted twice"
        return
    rejected = {v for v in range(RECORDS) if v % 10 == 3}
    always_released = {v for v in range(RECORDS) if v % 25 == 11}
    assert set(accepted) == set(range(RECORDS)) - rejected - always_released
    assert max(accepted.values()) == 1, "a record was accepted twice"
    for value in rejected:
        assert len(by_value[value]) == 1, f"rejected {value} came back"
    for value in always_released:  # delivered again until the limit, then archived
        counts = sorted(e["delivery_count"] for e in by_value[value])
        assert counts == list(range(counts[0], DELIVERY_LIMIT + 1)), (value, counts)
    for value in range(7, RECORDS, 10):  # released when first delivered, accepted later
        events = by_value[value]
        first = [e for e in events if e["delivery_count"] == 1]
        if first:  # (not when the frozen member had its first delivery)
            assert first[0]["action"] == "release", (value, events)
            (later,) = [e for e in events if e["action"] == "accept" and e["ok"]]
            assert later["delivery_count"] > 1, (value, events)
