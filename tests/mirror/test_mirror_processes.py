"""Acceptance: cluster mirroring between two diskless clusters, every part real.

A source broker process and a destination broker process (each with storage of its own), and a
mirror process (`python -m diskless.mirror`) over the destination's storage: its data directory
(SQLite), or its PostgreSQL coordinator and S3 bucket. On the source: idempotent and
transactional producers (confluent-kafka, committed and aborted transactions), DeleteRecords,
and time retention that runs while the mirror is down. The mirror is SIGKILLed at random points
(the seed is printed; `DISKLESS_MIRROR_SEED` replays it) and started again.

Then the destination's log equals the source's: the same offsets, the same bytes per record
(key, value, headers, timestamp), the same read_committed view, the same log start: no gap and
no duplicate across the kills. A source consumer group's offset is synced. Failover: the mirror
stops, the topic becomes writable, a producer continues on the destination, and the group's
consumer resumes there from the synced offset and reads everything after it.
"""

from __future__ import annotations

import asyncio
import os
import random
import threading
import time
import urllib.request
from pathlib import Path

import pytest
from confluent_kafka import Consumer, Producer
from confluent_kafka import TopicPartition as CkTopicPartition
from confluent_kafka.admin import AdminClient, AlterConfigOpType, ConfigEntry, ConfigResource

from testkit.postgres import database_dsn
from testkit.processes import broker_processes
from testkit.s3server import create_bucket
from tests.mirror._logs import (
    delete_records,
    idempotent_produce,
    raw_batches,
    read_log,
    transactional_produce,
)
from tests.mirror._process import MirrorProcess, mirror_command

TOPIC = "orders"
PARTITIONS = 2
KILLS = 4
GROUP = "app"
EQUAL_WITHIN_S = 120.0


def _workload(bootstrap: str, stop: threading.Event, rounds: list[int]) -> None:
    """Idempotent and transactional produces, round after round, until `stop`."""
    while not stop.is_set():
        n = len(rounds)
        idempotent_produce(bootstrap, TOPIC, PARTITIONS, 40, f"r{n}")
        transactional_produce(bootstrap, TOPIC, PARTITIONS, 6, f"c{n % 3}", commit=n % 2 == 0)
        rounds.append(n)


def _set_retention(bootstrap: str, retention_ms: int) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    resource = ConfigResource(
        ConfigResource.Type.TOPIC,
        TOPIC,
        incremental_configs=[
            ConfigEntry(
                "retention.ms", str(retention_ms), incremental_operation=AlterConfigOpType.SET
            )
        ],
    )
    for future in admin.incremental_alter_configs([resource]).values():
        future.result(30)


def _log_starts(bootstrap: str) -> list[int]:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "probe"})
    try:
        return [
            consumer.get_watermark_offsets(CkTopicPartition(TOPIC, p), timeout=10)[0]
            for p in range(PARTITIONS)
        ]
    finally:
        consumer.close()


def _ends(bootstrap: str) -> list[int]:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "probe"})
    try:
        return [
            consumer.get_watermark_offsets(CkTopicPartition(TOPIC, p), timeout=10)[1]
            for p in range(PARTITIONS)
        ]
    finally:
        consumer.close()


def _commit_group(bootstrap: str, offsets: list[int]) -> None:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": GROUP})
    try:
        consumer.commit(
            offsets=[CkTopicPartition(TOPIC, p, o) for p, o in enumerate(offsets)],
            asynchronous=False,
        )
    finally:
        consumer.close()


def _group_offsets(bootstrap: str) -> list[int]:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": GROUP})
    try:
        committed = consumer.committed(
            [CkTopicPartition(TOPIC, p) for p in range(PARTITIONS)], timeout=10
        )
        return [c.offset for c in committed]
    finally:
        consumer.close()


def _wait_equal(source: str, destination: str) -> None:
    deadline = time.monotonic() + EQUAL_WITHIN_S
    while True:
        expected = read_log(source, TOPIC, PARTITIONS, "read_uncommitted")
        got = read_log(destination, TOPIC, PARTITIONS, "read_uncommitted")
        if got == expected:
            break
        assert time.monotonic() < deadline, (
            f"destination {len(got)} records, source {len(expected)}; first difference:"
            f" {next(((a, b) for a, b in zip(got, expected, strict=False) if a != b), None)}"
        )
        time.sleep(1.0)
    assert read_log(destination, TOPIC, PARTITIONS, "read_committed") == read_log(
        source, TOPIC, PARTITIONS, "read_committed"
    )
    assert asyncio.run(raw_batches(destination, TOPIC, PARTITIONS)) == asyncio.run(
        raw_batches(source, TOPIC, PARTITIONS)
    )
    assert _log_starts(destination) == _log_starts(source)
    assert _ends(destination) == _ends(source)


@pytest.mark.slow
@pytest.mark.parametrize("destination", ["sqlite", "postgres-s3"])
async def test_mirror_kills_retention_and_failover(
    tmp_path: Path, destination: str, request: pytest.FixtureRequest
) -> None:
    storage = ["--data-dir", str(tmp_path / "dst")]
    if destination == "postgres-s3":
        endpoint = request.getfixturevalue("s3_endpoint")
        bucket = await create_bucket(endpoint)
        dsn = database_dsn(tmp_path, "destination")
        storage = ["--coordinator", dsn, "--s3-endpoint", endpoint, "--bucket", bucket]
    await asyncio.to_thread(_scenario, tmp_path, storage)


def _scenario(tmp_path: Path, storage: list[str]) -> None:
    seed = int(os.environ.get("DISKLESS_MIRROR_SEED", random.randrange(2**32)))
    print(f"DISKLESS_MIRROR_SEED={seed}")
    rng = random.Random(seed)
    (tmp_path / "src").mkdir()
    (tmp_path / "dst").mkdir()
    source_options = [
        "--data-dir", str(tmp_path / "src"), "--topic", f"{TOPIC}:{PARTITIONS}",
        "--commit-interval-ms", "20", "--retention-check-interval-ms", "300",
    ]  # fmt: skip
    destination_options = [*storage, "--commit-interval-ms", "20"]
    with (
        broker_processes(1, tmp_path / "src", source_options) as (source_broker,),
        broker_processes(1, tmp_path / "dst", destination_options) as (destination_broker,),
    ):
        source, destination = source_broker.address, destination_broker.address
        mirror_options = [
            "--source", source, "--topic", TOPIC, "--name", "dr",
            *storage, "--fetch-max-bytes", "16384",
            "--group-sync-interval-ms", "200", "--status-interval-ms", "300",
            "--metrics-address", "127.0.0.1:0", "--group-include", "app|other",
            "--group-exclude", "other",
        ]  # fmt: skip
        mirror = MirrorProcess(mirror_options, tmp_path / "mirror.log")
        try:
            idempotent_produce(source, TOPIC, PARTITIONS, 30, "first")
            mirror.start()
            stop, rounds = threading.Event(), []
            producing = threading.Thread(target=_workload, args=(source, stop, rounds))
            producing.start()
            try:
                for kill in range(KILLS):
                    time.sleep(rng.uniform(0.2, 1.5))
                    mirror.kill()
                    if kill == 1:  # retention runs on the source while the mirror is down
                        _set_retention(source, 1)
                        deadline = time.monotonic() + 30
                        while min(_log_starts(source)) == 0:
                            assert time.monotonic() < deadline, "retention never ran"
                            time.sleep(0.2)
                        _set_retention(source, -1)
                    if kill == 2:
                        delete_records(source, TOPIC, 1, _ends(source)[1] - 3)
                    time.sleep(rng.uniform(0.0, 0.5))
                    mirror.start()
            finally:
                stop.set()
                producing.join(120)
            assert rounds, "the workload produced nothing"
            _commit_group(source, [max(0, e - 5) for e in _ends(source)])
            _wait_equal(source, destination)
            _check_lag_reports(mirror, [*mirror_options[:6], *storage], _ends(source))

            # The group's offset reaches the destination (clamped: the source's end is mirrored).
            deadline = time.monotonic() + 30
            while _group_offsets(destination) != _group_offsets(source):
                assert time.monotonic() < deadline, (
                    _group_offsets(destination),
                    _group_offsets(source),
                )
                time.sleep(0.2)

            # Failover mid-stream: a producer and the group's consumer work on the source; the
            # mirror dies (the disaster) while they do, lagging; then the topic is made writable.
            refused = _produce_after(destination, 1)
            assert refused, "a mirrored topic accepted a client's batch"
            halt = threading.Event()
            live = [
                threading.Thread(target=_live_producer, args=(source, halt)),
                threading.Thread(target=_live_consumer, args=(source, halt)),
            ]
            before = _group_offsets(source)
            for thread in live:
                thread.start()
            deadline = time.monotonic() + 60
            while _group_offsets(source) == before:  # the consumer joined and commits
                assert time.monotonic() < deadline, "the group's consumer never committed"
                time.sleep(0.1)
            time.sleep(rng.uniform(1.0, 2.0))
            mirror.kill()
            halt.set()
            for thread in live:
                thread.join(60)
            stop_options = ["--source", source, "--topic", TOPIC, "--name", "dr"]
            stopped = mirror_command([*stop_options, *storage, "--stop"])
            assert stopped.returncode == 0, stopped.stderr
            assert f"stopped {TOPIC}" in stopped.stdout
            synced = _group_offsets(destination)
            ends_at_failover = _ends(destination)
            starts = _log_starts(destination)
            assert all(starts[p] <= synced[p] <= ends_at_failover[p] for p in range(PARTITIONS))
            lag = [s - d for s, d in zip(_ends(source), ends_at_failover, strict=True)]
            again = [c - s for c, s in zip(_group_offsets(source), synced, strict=True)]
            print(f"at failover: mirror lag {lag}, offsets the group re-reads {again}")

            # Producers continue on the destination; the group resumes from the synced offsets
            # and loses nothing: it reads every record there from them on, once, in order.
            assert not _produce_after(destination, 20), "the destination refused after the stop"
            seen = _consume_group(destination, 20)
            expected = [
                (p, o)
                for (p, o, *_) in read_log(destination, TOPIC, PARTITIONS, "read_committed")
                if o >= synced[p]
            ]
            assert sorted((p, o) for (p, o, _) in seen) == expected
            for p in range(PARTITIONS):
                offsets = [o for (partition, o, _) in seen if partition == p]
                assert offsets == sorted(set(offsets))
            assert {v for (_, _, v) in seen if v.startswith(b"after-")} == {
                f"after-{i}".encode() for i in range(20)
            }
        finally:
            mirror.kill()
            print(mirror.log_tail())


def _live_producer(bootstrap: str, halt: threading.Event) -> None:
    producer = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True})
    sequence = 0
    while not halt.is_set():
        producer.produce(TOPIC, f"live-{sequence}".encode(), partition=sequence % PARTITIONS)
        producer.poll(0)
        sequence += 1
        time.sleep(0.002)
    producer.flush(30)


def _live_consumer(bootstrap: str, halt: threading.Event) -> None:
    """The group's consumer on the source, committing what it read every few records."""
    consumer = Consumer(
        {"bootstrap.servers": bootstrap, "group.id": GROUP, "enable.auto.commit": False}
    )
    try:
        consumer.subscribe([TOPIC])
        while not halt.is_set():
            messages = consumer.consume(50, 0.2)
            if messages:
                consumer.commit(asynchronous=False)
    finally:
        consumer.close()


def _check_lag_reports(mirror: MirrorProcess, options: list[str], ends: list[int]) -> None:
    """Caught up: lag 0 in the status lines, the Prometheus gauge and `--status`."""
    caught_up = [f"lag {TOPIC}-{p} {end} {end} 0" for p, end in enumerate(ends)]
    deadline = time.monotonic() + 30
    while not all(line in mirror.lines[-2 * PARTITIONS :] for line in caught_up):
        assert time.monotonic() < deadline, mirror.lines[-4:]
        time.sleep(0.1)
    (url,) = [line for line in mirror.lines if line.startswith("metrics=")][-1:]
    with urllib.request.urlopen(url.removeprefix("metrics="), timeout=10) as response:
        scraped = response.read().decode()
    for p in range(PARTITIONS):
        labels = f'mirror="dr",partition="{p}",topic="{TOPIC}"'
        assert f"diskless_mirror_lag_records{{{labels}}} 0.0" in scraped
    status = mirror_command([*options, "--status"])
    assert status.returncode == 0, status.stderr
    assert status.stdout.splitlines()[0].startswith(f"topic {TOPIC}: mirroring dr ")
    assert status.stdout.splitlines()[1:] == caught_up


def _produce_after(bootstrap: str, count: int) -> list[str]:
    """`count` records by a new idempotent producer; the delivery errors."""
    producer = Producer(
        {"bootstrap.servers": bootstrap, "enable.idempotence": True, "message.timeout.ms": 15_000}
    )
    errors: list[str] = []
    for i in range(count):
        producer.produce(
            TOPIC,
            value=f"after-{i}".encode(),
            partition=i % PARTITIONS,
            on_delivery=lambda e, m: errors.append(str(e)) if e is not None else None,
        )
    producer.flush(30)
    return errors


def _consume_group(bootstrap: str, after: int) -> list[tuple[int, int, bytes]]:
    """The group's consumer on `bootstrap`, from its committed offsets, until it has read every
    `after-*` record: (partition, offset, value) in the order read."""
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": GROUP,
            "auto.offset.reset": "latest",
            "enable.auto.commit": False,
            "isolation.level": "read_committed",
        }
    )
    seen: list[tuple[int, int, bytes]] = []
    try:
        consumer.subscribe([TOPIC])
        deadline = time.monotonic() + 60
        while sum(1 for (_, _, v) in seen if v.startswith(b"after-")) < after:
            assert time.monotonic() < deadline, f"read {len(seen)} records"
            for message in consumer.consume(500, 0.5):
                if message.error() is None:
                    seen.append(
                        (message.partition() or 0, message.offset() or 0, message.value() or b"")
                    )
    finally:
        consumer.close()
    return seen
