"""Broker processes that share a PostgreSQL batch coordinator form one cluster, and ride out
faults of their shared parts and of each other.

Integration tests with real parts only: `python -m diskless.kafka_server` processes (one broker
each), a real PostgreSQL server, moto's S3 server or a shared object directory, and
confluent-kafka's idempotent producers (plus raw Produce requests, which nothing retries).

- Two processes on PostgreSQL and S3 serve one cluster to clients bootstrapped from either.
- The PostgreSQL server is stopped as by a crash (`pg_ctl stop -m immediate`) mid-run and
  started again: meanwhile a produce request is answered with a retriable error within its
  timeout, never left hanging; afterwards every acknowledged record reads back exactly once.
- Broker processes are SIGKILLed mid-run and restarted: the same read-back check.

The short variants run by default; the `slow` ones produce ten times as much through more faults.
"""

from __future__ import annotations

import asyncio
import datetime
import socket
import struct
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Final

import pytest
from confluent_kafka import Consumer, KafkaError, KafkaException
from confluent_kafka import TopicPartition as CkTopicPartition
from kio.schema.errors import ErrorCode as WireError
from kio.schema.produce.v9 import request as produce_v9

from testkit.batches import build_batch
from testkit.clients import confluent_consume, confluent_produce
from testkit.postgres import PostgresServer, server
from testkit.processes import BrokerProcess, bootstrap, broker_processes
from testkit.s3server import REGION, create_bucket, running_s3_server, s3_client
from testkit.wire import decode_response, encode_request

TOPIC = "shared"
PARTITIONS = 6
PRODUCER_EXTRA = {"batch.num.messages": 200, "linger.ms": 1}
"""Small batches keep many requests in flight when a fault strikes."""
PROBE_TIMEOUT_MS = 30_000
"""The probe's request.timeout.ms: its answer must come within it."""
OUTAGE_S = 3.0
SHORT, LONG = 3_000, 30_000


@pytest.fixture
def own_postgres() -> Iterator[PostgresServer]:
    """A server of this test's own: stopping it must not disturb other tests' databases."""
    bindir = server().bindir  # (skips, or fails under CI, when PostgreSQL is not installed)
    pg = PostgresServer(bindir)
    try:
        yield pg
    finally:
        pg.close()


_ASK_AGAIN = (KafkaError._DESTROY_BROKER, KafkaError._UNKNOWN_PARTITION)


def _end_offsets(address: str) -> dict[int, int]:
    """Each partition's high watermark, asked again when librdkafka swapped the bootstrap
    connection for a broker of the metadata midway (which fails the call it carried), or when
    its metadata had no leader for the partition yet, right after the brokers changed
    (librdkafka calls that an unknown partition)."""
    for attempt in range(5):
        consumer = Consumer({"bootstrap.servers": address, "group.id": "ends"})
        try:
            return {
                p: consumer.get_watermark_offsets(CkTopicPartition(TOPIC, p), timeout=30)[1]
                for p in range(PARTITIONS)
            }
        except KafkaException as error:
            if attempt == 4 or error.args[0].code() not in _ASK_AGAIN:
                raise
            time.sleep(0.5)
        finally:
            consumer.close()
    raise AssertionError("unreachable")


def _produce_through(
    brokers: Sequence[BrokerProcess], per_producer: int, fault: Callable[[list[list[int]]], None]
) -> None:
    """One idempotent producer per broker (its rack), `fault` run while they produce (it gets
    the acknowledged sequences so far); then every acknowledged record must read back once."""
    names = [f"producer-{b.rack}" for b in brokers]
    acked: list[list[int]] = [[] for _ in brokers]
    results: dict[str, list[int]] = {}
    errors: list[BaseException] = []

    def produce(broker: BrokerProcess, name: str, progress: list[int]) -> None:
        try:
            results[name] = confluent_produce(
                bootstrap(brokers),
                TOPIC,
                name,
                per_producer,
                PARTITIONS,
                rack=broker.rack,
                extra=PRODUCER_EXTRA,
                acknowledged=progress,
            )
        except BaseException as error:  # reported by the main thread
            errors.append(error)

    threads = [
        threading.Thread(target=produce, args=args, daemon=True)
        for args in zip(brokers, names, acked, strict=True)
    ]
    for thread in threads:
        thread.start()
    fault(acked)
    for thread in threads:
        thread.join(300)
        assert not thread.is_alive(), "a producer hung"
    assert not errors, errors
    for name in names:
        assert sorted(results[name]) == list(range(per_producer)), name
    ends = _end_offsets(bootstrap(brokers))
    assert sum(ends.values()) == per_producer * len(brokers), ends  # no gaps, no extra
    audit = confluent_consume(bootstrap(brokers), TOPIC, ends)
    audit.check(results)


def _wait_until_acked(acked: list[list[int]], count: int) -> None:
    deadline = time.monotonic() + 120
    while min(len(a) for a in acked) < count:
        assert time.monotonic() < deadline, f"acknowledged only {[len(a) for a in acked]}"
        time.sleep(0.02)


def _assert_running(acked: list[list[int]], per_producer: int) -> None:
    """The fault struck mid-run: some producer still had records to be acknowledged."""
    assert min(len(a) for a in acked) < per_producer, "the producers finished before the fault"


# --- two processes on PostgreSQL and S3 -----------------------------------------------------------


def test_processes_on_postgresql_and_s3_form_one_cluster(
    own_postgres: PostgresServer, tmp_path: Path
) -> None:
    dsn = own_postgres.dsn(own_postgres.database(tmp_path, "cluster"))
    with running_s3_server() as endpoint:
        bucket = asyncio.run(create_bucket(endpoint))
        options = [
            "--coordinator", dsn,
            "--s3-endpoint", endpoint, "--bucket", bucket, "--region", REGION,
            "--topic", f"{TOPIC}:{PARTITIONS}",
        ]  # fmt: skip
        with broker_processes(2, tmp_path, options) as brokers:
            _produce_through(brokers, SHORT, lambda acked: None)
            for broker in brokers:
                assert broker.stop() == 0, broker.log_tail()

        async def keys() -> list[str]:
            async with s3_client(endpoint) as client:
                pages = client.get_paginator("list_objects_v2").paginate(Bucket=bucket)
                return [i["Key"] async for page in pages for i in page.get("Contents", [])]

        assert any(key.startswith("wal/") for key in asyncio.run(keys()))
    assert not list(tmp_path.glob("*.sqlite")), "no SQLite file: the coordinator is PostgreSQL"


# --- PostgreSQL crashes and restarts --------------------------------------------------------------


def _produce_raw(address: str) -> tuple[list[int], float]:
    """One Produce (acks=all, a record for every partition) over a plain socket, bypassing
    metadata: every broker accepts every partition. The error codes, and how long the answer
    took; a request left hanging fails the socket's timeout."""
    body = produce_v9.ProduceRequest(
        transactional_id=None,
        acks=-1,
        timeout=datetime.timedelta(milliseconds=PROBE_TIMEOUT_MS),
        topic_data=(
            produce_v9.TopicProduceData(
                name=TOPIC,
                partition_data=tuple(
                    produce_v9.PartitionProduceData(index=p, records=build_batch([b"probe:0"]))
                    for p in range(PARTITIONS)
                ),
            ),
        ),
    )
    host, _, port = address.rpartition(":")
    started = time.monotonic()
    with socket.create_connection((host, int(port)), timeout=PROBE_TIMEOUT_MS / 1000) as conn:
        conn.sendall(encode_request(body, 1))
        stream = conn.makefile("rb")
        (size,) = struct.unpack(">i", stream.read(4))
        frame = stream.read(size)
    elapsed = time.monotonic() - started
    response = decode_response(frame, 0, 9, 1)
    codes = [int(p.error_code) for t in response.responses for p in t.partition_responses]
    return codes, elapsed


_DOWN_ANSWERS: Final = frozenset({WireError.kafka_storage_error, WireError.not_leader_or_follower})
"""A produce while the coordinator is down: its commit failed (KAFKA_STORAGE_ERROR), or, once
the broker's registration may have lapsed (a session timeout without a renewal, sooner when the
machine is loaded), it is refused unwritten (NOT_LEADER_OR_FOLLOWER). Both are retriable."""


def _probe_while_down(brokers: Sequence[BrokerProcess]) -> list[tuple[int, float]]:
    """Every broker answers a produce with a retriable error for every partition, in time (a
    record that failed so must never be read back: the audit would find it)."""
    outcomes: list[tuple[int, float]] = []
    for broker in brokers:
        codes, elapsed = _produce_raw(broker.address)
        assert len(codes) == PARTITIONS
        assert {WireError(code) for code in codes} <= _DOWN_ANSWERS, codes
        assert elapsed < PROBE_TIMEOUT_MS / 1000
        outcomes.append((broker.broker_id, round(elapsed, 3)))
    return outcomes


@pytest.mark.parametrize(
    ("per_producer", "outages"),
    [
        pytest.param(SHORT, 1, id="short"),
        pytest.param(LONG, 3, id="long", marks=pytest.mark.slow),
    ],
)
def test_producers_ride_out_a_postgresql_crash(
    own_postgres: PostgresServer, tmp_path: Path, per_producer: int, outages: int
) -> None:
    dsn = own_postgres.dsn(own_postgres.database(tmp_path, "cluster"))
    options = [
        "--coordinator", dsn, "--data-dir", str(tmp_path / "data"),
        "--topic", f"{TOPIC}:{PARTITIONS}",
    ]  # fmt: skip
    probes: list[tuple[int, float]] = []
    with broker_processes(3, tmp_path, options) as brokers:

        def crash_and_restart(acked: list[list[int]]) -> None:
            for outage in range(outages):
                _wait_until_acked(acked, per_producer * (outage + 1) // (outages + 2))
                own_postgres.stop()
                down_at = time.monotonic()
                _assert_running(acked, per_producer)
                probes.extend(_probe_while_down(brokers))
                time.sleep(max(0.0, OUTAGE_S - (time.monotonic() - down_at)))
                own_postgres.start()

        _produce_through(brokers, per_producer, crash_and_restart)
        for broker in brokers:
            assert broker.process is not None and broker.process.poll() is None, broker.log_tail()
    print(f"produce answers while PostgreSQL was down (broker, seconds): {probes}")
    assert len(probes) == len(brokers) * outages


# --- broker processes killed ----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("per_producer", "rounds"),
    [
        pytest.param(SHORT, 1, id="short"),
        pytest.param(LONG, 4, id="long", marks=pytest.mark.slow),
    ],
)
def test_producers_ride_out_broker_processes_killed(
    own_postgres: PostgresServer, tmp_path: Path, per_producer: int, rounds: int
) -> None:
    """Each round SIGKILLs all brokers but one (a different survivor each time), then restarts
    them on their ports: a killed broker may have uploaded objects it never committed, or
    committed batches it never acknowledged (the producers' retries are then duplicates)."""
    dsn = own_postgres.dsn(own_postgres.database(tmp_path, "cluster"))
    options = [
        "--coordinator", dsn, "--data-dir", str(tmp_path / "data"),
        "--topic", f"{TOPIC}:{PARTITIONS}",
        # A restarted broker waits for its old registration to expire: keep that short.
        "--server-option", "broker_session_timeout_ms=3000",
    ]  # fmt: skip
    with broker_processes(3, tmp_path, options) as brokers:

        def kill_and_restart(acked: list[list[int]]) -> None:
            for kill_round in range(rounds):
                _wait_until_acked(acked, per_producer * (kill_round + 1) // (rounds + 2))
                victims = [b for i, b in enumerate(brokers) if i != kill_round % len(brokers)]
                for victim in victims:
                    victim.kill()
                _assert_running(acked, per_producer)
                time.sleep(1.0)
                for victim in victims:
                    victim.start()

        _produce_through(brokers, per_producer, kill_and_restart)
        assert sum(b.starts for b in brokers) == len(brokers) * (1 + rounds) - rounds
