"""One leader epoch across broker processes (integration, real parts only).

`python -m diskless.kafka_server` processes over one PostgreSQL database and one object
directory, asked over raw sockets and through confluent-kafka:

- Processes that joined at different times, after another one came and went in between, name
  the same leader epoch for every partition once each has read the registry (each process
  counted its own membership changes before, so the later one named a lower epoch, which
  librdkafka ignores once it has seen a higher one).
- A confluent-kafka consumer reads on while a broker leaves (cleanly, then killed) and joins
  again: it validates its position after each leader change (OffsetForLeaderEpoch), and reads
  every record once, in order, never resetting its offset (`auto.offset.reset=error` would
  report any reset as an error).
"""

from __future__ import annotations

import logging
import socket
import struct
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, Final

from confluent_kafka import Consumer, KafkaError, Producer
from confluent_kafka import TopicPartition as CkTopicPartition
from kio.schema.metadata.v12.request import MetadataRequest, MetadataRequestTopic
from kio.schema.types import TopicName

from testkit.postgres import database_dsn
from testkit.processes import BrokerProcess, bootstrap
from testkit.wire import decode_response, encode_request

TOPIC: Final = "epochs"
PARTITIONS: Final = 4
SESSION_MS: Final = 3_000
"""The processes' `broker_session_timeout_ms`: they renew and read the registry every third of
it, and a killed broker is listed until its registration expires."""
GAP_S: Final = 3.0
"""Between the first process and the last: longer than a renewal interval (1 s), so the first
process has renewed and read the registry several times before the last one joins."""
AGREE_WITHIN_S: Final = 30.0


def _options(tmp_path: Path) -> list[str]:
    return [
        "--coordinator", database_dsn(tmp_path), "--data-dir", str(tmp_path / "data"),
        "--topic", f"{TOPIC}:{PARTITIONS}", "--commit-interval-ms", "20",
        "--server-option", f"broker_session_timeout_ms={SESSION_MS}",
    ]  # fmt: skip


def _metadata(address: str) -> tuple[list[int], dict[int, tuple[int, int]]]:
    """The brokers a process lists and (leader, leader epoch) of each partition it names."""
    host, _, port = address.rpartition(":")
    request = MetadataRequest(
        topics=(MetadataRequestTopic(topic_id=None, name=TopicName(TOPIC)),),
        allow_auto_topic_creation=False,
        include_topic_authorized_operations=False,
    )
    with socket.create_connection((host, int(port)), timeout=10) as conn:
        conn.sendall(encode_request(request, 1))
        stream = conn.makefile("rb")
        (size,) = struct.unpack(">i", stream.read(4))
        response = decode_response(stream.read(size), 3, 12, 1)
    (topic,) = response.topics
    brokers = sorted(int(b.node_id) for b in response.brokers)
    return brokers, {
        int(p.partition_index): (int(p.leader_id), int(p.leader_epoch)) for p in topic.partitions
    }


def _epochs(address: str) -> set[int]:
    return {epoch for _, epoch in _metadata(address)[1].values()}


def _until(condition: Callable[[], bool], what: str, detail: Callable[[], object]) -> None:
    deadline = time.monotonic() + AGREE_WITHIN_S
    while not condition():
        assert time.monotonic() < deadline, f"{what}: {detail()}"
        time.sleep(0.1)


def test_processes_started_apart_advertise_one_epoch(tmp_path: Path) -> None:
    options = _options(tmp_path)
    first, passing, last = (
        BrokerProcess(i, 3, options, tmp_path / f"broker-{i}.log") for i in range(3)
    )
    try:
        first.start()
        passing.start()  # a broker that comes and goes before the last one starts
        _until(lambda: _metadata(first.address)[0] == [0, 1], "1 joined", lambda: first.log_tail())
        assert passing.stop() == 0, passing.log_tail()
        _until(lambda: _metadata(first.address)[0] == [0], "1 left", lambda: first.log_tail())
        time.sleep(GAP_S)
        seen = _epochs(first.address)
        last.start()

        def answers() -> list[tuple[list[int], dict[int, tuple[int, int]]]]:
            return [_metadata(b.address) for b in (first, last)]

        def agree() -> bool:
            (brokers, named), (other_brokers, other_named) = answers()
            epochs = {e for _, e in named.values()} | {e for _, e in other_named.values()}
            return brokers == other_brokers == [0, 2] and len(epochs) == 1

        _until(agree, "both processes name one epoch", answers)
        ((_, named), _) = answers()
        (epoch,) = {e for _, e in named.values()}
        assert len(named) == PARTITIONS
        assert epoch > max(seen), "a broker joined: the epoch went up"
    finally:
        for broker in (first, passing, last):
            broker.kill()


# --- a consumer across a broker leaving and joining -----------------------------------------------
RECORDS_PER_PARTITION: Final = 400
PACE_S: Final = 0.01
READ_ON: Final = 20
"""Records of each partition the consumer reads after each change of the brokers before the next
one (the producer writes about 25 a second to each)."""


class _Produced:
    """A producer writing `<partition>:<sequence>` to each partition in turn until stopped."""

    def __init__(self, address: str) -> None:
        self.stop = threading.Event()
        self.acked: dict[int, list[int]] = {p: [] for p in range(PARTITIONS)}
        self.errors: list[str] = []
        self._producer = Producer(
            {"bootstrap.servers": address, "enable.idempotence": True, "linger.ms": 5}
        )
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        sequence = 0
        while not self.stop.is_set() and sequence < RECORDS_PER_PARTITION * PARTITIONS:
            partition = sequence % PARTITIONS
            self._producer.produce(
                TOPIC,
                f"{partition}:{sequence // PARTITIONS}".encode(),
                partition=partition,
                on_delivery=self._delivered,
            )
            self._producer.poll(0)
            sequence += 1
            time.sleep(PACE_S)
        self._producer.flush(60)

    def _delivered(self, error: Any, message: Any) -> None:
        if error is not None:
            self.errors.append(str(error))
        else:
            self.acked[message.partition()].append(message.offset())

    def join(self) -> None:
        self._thread.join(120)
        assert not self._thread.is_alive()


class _Validations(logging.Handler):
    """librdkafka's debug lines about validating a position after a leader change."""

    def __init__(self) -> None:
        super().__init__()
        self.lines: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        text = record.getMessage()
        if "OffsetForLeaderEpoch" in text or "validat" in text:
            self.lines.append(text)


def test_a_consumer_reads_on_across_a_broker_leaving_and_joining(tmp_path: Path) -> None:
    options = _options(tmp_path)
    brokers = [BrokerProcess(i, 2, options, tmp_path / f"broker-{i}.log") for i in range(2)]
    validations = _Validations()
    logger = logging.getLogger("librdkafka.epochs")
    logger.addHandler(validations)
    logger.setLevel(logging.DEBUG)
    consumed: dict[int, list[tuple[int, bytes]]] = {p: [] for p in range(PARTITIONS)}
    errors: list[KafkaError] = []
    try:
        for broker in brokers:
            broker.start()
        address = bootstrap(brokers)
        producer = _Produced(address)
        consumer = Consumer(
            {
                "bootstrap.servers": address,
                "group.id": "epochs",
                "enable.auto.commit": False,
                "auto.offset.reset": "error",
                "debug": "fetch,topic",
                "logger": logger,
            }
        )
        consumer.assign([CkTopicPartition(TOPIC, p, 0) for p in range(PARTITIONS)])

        def consume(seconds: float) -> None:
            until = time.monotonic() + seconds
            while time.monotonic() < until:
                for message in consumer.consume(100, 0.2):
                    if message.error() is not None:
                        if message.error().code() != KafkaError._PARTITION_EOF:
                            errors.append(message.error())
                        continue
                    consumed[message.partition()].append((message.offset(), message.value()))

        def read_on(listed: list[int], what: str) -> None:
            """Consume until broker 0 lists `listed`, then until every partition was read
            `READ_ON` records further (or to its end) from there."""

            def listing() -> bool:
                consume(0.2)
                return _metadata(brokers[0].address)[0] == listed

            _until(listing, what, lambda: brokers[0].log_tail())
            marks = {p: min(len(c) + READ_ON, RECORDS_PER_PARTITION) for p, c in consumed.items()}

            def read() -> bool:
                consume(0.2)
                return all(len(consumed[p]) >= mark for p, mark in marks.items())

            _until(
                read,
                f"reading on once {what}",
                lambda: ([len(c) for c in consumed.values()], marks),
            )

        read_on([0, 1], "both brokers serve")
        assert brokers[1].stop() == 0, brokers[1].log_tail()  # leaves cleanly
        read_on([0], "broker 1 left")
        brokers[1].start()  # joins again
        read_on([0, 1], "broker 1 joined again")
        brokers[1].kill()  # dies: gone once its registration expires
        read_on([0], "broker 1's registration expired")
        brokers[1].start()
        producer.join()
        total = RECORDS_PER_PARTITION

        def done() -> bool:
            consume(0.5)
            return all(len(consumed[p]) >= total for p in range(PARTITIONS))

        _until(done, "reading every record", lambda: {p: len(c) for p, c in consumed.items()})
        consume(1.0)
        consumer.close()
    finally:
        for broker in brokers:
            broker.kill()
        logger.removeHandler(validations)
    assert not producer.errors, producer.errors[:3]
    assert not errors, errors[:3]
    for partition, entries in consumed.items():
        offsets = [offset for offset, _ in entries]
        assert offsets == list(range(len(offsets))), f"partition {partition}: not once, in order"
        assert offsets == sorted(producer.acked[partition])
        values = [data for _, data in entries]
        assert values == [f"{partition}:{s}".encode() for s in range(RECORDS_PER_PARTITION)]
    assert any("validation succeeded" in line for line in validations.lines), validations.lines[
        -20:
    ]
