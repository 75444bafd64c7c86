"""Acceptance: a transaction ends promptly when the broker holding its batches' leases dies.

Two `python -m diskless.kafka_server` processes share one data directory: A (broker 0, the
transaction coordinator of the producer's transactional id) and B (broker 1, the produce
leader of the partitions written; its WAL segments collect batches for 2 s, so they stay
leased and uncommitted a while). A confluent-kafka transactional producer commits a first
transaction, then produces a second one through B, and B is SIGKILLed while the batch
coordinator holds B's leases for it. The producer then commits (or, when told to abort, aborts
and writes the records again in a new transaction), which must succeed within 30 s of the
kill: a lease dies with its broker's incarnation (at once when B restarts and registers a new
one, or once B's registration expires when it does not), instead of holding the transaction's
end for the lease's own TTL (over 100 s by default). Finally a read_committed consumer reads
exactly the committed transactions' records, each once.
"""

from __future__ import annotations

import sqlite3
import threading
import time
import zlib
from pathlib import Path
from typing import Final

import kio.schema.find_coordinator.v1.request as find_coordinator_v1
import pytest
from confluent_kafka import Consumer, KafkaException, Producer
from confluent_kafka import TopicPartition as CkTopicPartition
from kio.schema.errors import ErrorCode as WireError
from kio.static.primitive import i8

from diskless._types import TopicPartition
from diskless.routing import BrokerNode, produce_assignment
from testkit.clients import confluent_consume, value
from testkit.processes import BrokerProcess, bootstrap
from testkit.wire import ask

TOPIC: Final = "txn-out"
PARTITIONS: Final = 6
RECORDS: Final = 30
COMMIT_INTERVAL_MS: Final = 2_000
"""B's WAL segments: a batch stays leased and uncommitted this long (the linger is as long, so
off)."""
END_WITHIN_S: Final = 30.0
"""From the kill to a committed transaction (the lease's own TTL is over 100 s)."""
TXN_TIMEOUT_S: Final = 60.0


def _transactional_id() -> str:
    """An id whose transaction coordinator is broker 0 (`coordinator_for`: the crc32 of the id
    over the live brokers 0 and 1)."""
    return next(f"writer-{i}" for i in range(100) if zlib.crc32(f"writer-{i}".encode()) % 2 == 0)


def _partitions_of(broker_id: int) -> list[int]:
    """The partitions whose produce leader is `broker_id` while brokers 0 and 1 (one rack) live."""
    nodes = [BrokerNode(0, "rack-0"), BrokerNode(1, "rack-0")]
    leaders = produce_assignment([TopicPartition(TOPIC, p) for p in range(PARTITIONS)], None, nodes)
    return [tp.partition for tp, leader in sorted(leaders.items()) if leader == broker_id]


def _wait_for_leaders(producer: Producer, through_b: list[int]) -> None:
    """Until the producer's metadata names broker 1 the leader of `through_b` (each process
    reads the broker registry every few seconds, and lists the other once it has)."""
    deadline = time.monotonic() + 30
    while True:
        partitions = producer.list_topics(TOPIC, timeout=10).topics[TOPIC].partitions
        led = [p for p in range(PARTITIONS) if partitions[p].leader == 1]
        if led == through_b:
            return
        assert time.monotonic() < deadline, f"broker 1 leads {led}, not {through_b}"
        time.sleep(0.5)


def _leases_held(database: Path, broker_id: int) -> int:
    """Transaction leases the broker holds, read from the coordinator's file as another process
    would (the precondition: the kill strikes batches leased and not yet committed)."""
    with sqlite3.connect(f"file:{database}?mode=ro", uri=True) as connection:
        (count,) = connection.execute(
            "SELECT count(*) FROM txn_leases WHERE broker_id = ?", (broker_id,)
        ).fetchone()
    return int(count)


def _produce(producer: Producer, name: str, partitions: list[int]) -> None:
    for sequence in range(RECORDS):
        producer.produce(
            TOPIC, value=value(name, sequence), partition=partitions[sequence % len(partitions)]
        )
    producer.poll(0)


def _commit(producer: Producer, deadline: float) -> None:
    """commit_transaction, retried while retriable, until `deadline`."""
    while True:
        try:
            producer.commit_transaction(max(1.0, deadline - time.monotonic()))
            return
        except KafkaException as e:
            if not e.args[0].retriable():
                raise
            assert time.monotonic() < deadline, f"the transaction did not end in time: {e}"


@pytest.mark.parametrize(
    "restart",
    [True, pytest.param(False, marks=pytest.mark.slow)],
    ids=["restarted", "not-restarted"],
)
def test_a_transaction_ends_soon_after_the_broker_holding_its_leases_dies(
    tmp_path: Path, restart: bool
) -> None:
    data = tmp_path / "data"
    shared = [
        "--data-dir", str(data), "--topic", f"{TOPIC}:{PARTITIONS}",
        # The restarted B waits for its old registration to expire: keep that short.
        "--server-option", "broker_session_timeout_ms=3000",
    ]  # fmt: skip
    a = BrokerProcess(0, 1, shared, tmp_path / "broker-0.log")
    b = BrokerProcess(
        1,
        1,
        [
            *shared,
            "--commit-interval-ms",
            str(COMMIT_INTERVAL_MS),
            "--linger-ms",
            str(COMMIT_INTERVAL_MS),
        ],
        tmp_path / "broker-1.log",
    )
    transactional_id = _transactional_id()
    through_b = _partitions_of(1)
    assert through_b, "no partition led by broker 1"
    committed: list[str] = []
    aborted: list[str] = []
    restarting: threading.Thread | None = None
    try:
        a.start()
        b.start()
        for broker in (a, b):
            found = ask(
                broker.address,
                find_coordinator_v1.FindCoordinatorRequest(key=transactional_id, key_type=i8(1)),
            )
            assert (found.error_code, found.node_id) == (WireError.none, 0)
        producer = Producer(
            {
                "bootstrap.servers": bootstrap([a, b]),
                "transactional.id": transactional_id,
                "transaction.timeout.ms": 60_000,
                "linger.ms": 5,
                # (the time measured is the server's: retry a restarted broker promptly)
                "reconnect.backoff.max.ms": 1_000,
            }
        )
        producer.init_transactions(TXN_TIMEOUT_S)
        _wait_for_leaders(producer, through_b)

        producer.begin_transaction()
        _produce(producer, "t1", through_b)
        _commit(producer, time.monotonic() + TXN_TIMEOUT_S)
        committed.append("t1")

        producer.begin_transaction()
        _produce(producer, "t2", through_b)
        deadline = time.monotonic() + 10
        while _leases_held(data / "coordinator.sqlite", 1) == 0:
            assert time.monotonic() < deadline, "broker 1 took no lease"
            producer.poll(0.01)
        b.kill()
        killed_at = time.monotonic()
        restarted_after: list[float] = []
        if restart:

            def restart_b() -> None:
                b.start()
                restarted_after.append(time.monotonic() - killed_at)

            restarting = threading.Thread(target=restart_b, daemon=True)
            restarting.start()
        name = "t2"
        try:
            _commit(producer, killed_at + END_WITHIN_S)
        except KafkaException as e:
            assert e.args[0].txn_requires_abort(), e
            producer.abort_transaction(TXN_TIMEOUT_S)
            aborted.append(name)
            name = "t3"
            producer.begin_transaction()
            _produce(producer, name, through_b)
            _commit(producer, killed_at + END_WITHIN_S)
        committed.append(name)
        ended_after = time.monotonic() - killed_at
        if restarting is not None:
            restarting.join(60)
            assert b.process is not None and b.process.poll() is None, b.log_tail()

        watermarks = Consumer({"bootstrap.servers": a.address, "group.id": "watermarks"})
        try:
            ends = {
                p: watermarks.get_watermark_offsets(CkTopicPartition(TOPIC, p), timeout=30)[1]
                for p in range(PARTITIONS)
            }
        finally:
            watermarks.close()
        audit = confluent_consume(a.address, TOPIC, ends, isolation="read_committed")
        producer.flush(10)
    finally:
        if restarting is not None:
            restarting.join(60)
        b.kill()
        a.kill()
    print(
        f"broker 1 killed holding leases"
        f" ({f'restarted after {restarted_after[0]:.1f} s' if restart else 'left dead'}):"
        f" committed {committed}, aborted {aborted}, {ended_after:.1f} s after the kill"
    )
    assert ended_after <= END_WITHIN_S
    audit.check({name: range(RECORDS) for name in committed})
    assert audit.count == RECORDS * len(committed)
