"""Real Kafka clients driven from worker threads, and an auditor for what they read back.

Record values are `b"<producer>:<sequence>"`: per partition, each producer's sequences must come
back strictly increasing (its order), without repeats (no duplicates) and all of them (no loss).
"""

from __future__ import annotations

import collections
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field

from confluent_kafka import Consumer, KafkaError, Producer
from confluent_kafka import TopicPartition as CkTopicPartition

PARTITIONS_READ_TIMEOUT_S = 120.0


def value(producer: str, sequence: int) -> bytes:
    return f"{producer}:{sequence}".encode()


@dataclass
class Audit:
    """What a consumer read, checked against what the producers acknowledged."""

    records: dict[int, list[tuple[int, bytes]]] = field(
        default_factory=lambda: collections.defaultdict(list)
    )
    """partition -> [(offset, value)] in the order read."""

    def add(self, partition: int, offset: int, data: bytes) -> None:
        self.records[partition].append((offset, data))

    @property
    def count(self) -> int:
        return sum(len(v) for v in self.records.values())

    def check(self, acknowledged: Mapping[str, Iterable[int]]) -> None:
        """Every acknowledged (producer, sequence) exactly once; per partition, in order."""
        seen: collections.Counter[bytes] = collections.Counter()
        for partition, entries in self.records.items():
            offsets = [offset for offset, _ in entries]
            assert offsets == sorted(set(offsets)), f"partition {partition}: offsets not unique"
            last: dict[str, int] = {}
            for offset, data in entries:
                producer, _, sequence_text = data.decode().partition(":")
                sequence = int(sequence_text)
                previous = last.get(producer, -1)
                assert sequence > previous, (
                    f"partition {partition} offset {offset}: {producer}:{sequence} after {previous}"
                )
                last[producer] = sequence
                seen[data] += 1
        duplicates = [v for v, n in seen.items() if n > 1]
        assert not duplicates, f"{len(duplicates)} duplicates, e.g. {duplicates[:3]}"
        expected = {value(p, s) for p, sequences in acknowledged.items() for s in sequences}
        missing = expected - seen.keys()
        assert not missing, (
            f"{len(missing)} acknowledged records missing, e.g. {sorted(missing)[:3]}"
        )
        unexpected = seen.keys() - expected
        assert not unexpected, f"{len(unexpected)} records never acknowledged"


def confluent_produce(
    bootstrap: str,
    topic: str,
    name: str,
    count: int,
    partitions: int,
    *,
    rack: str | None = None,
    extra: Mapping[str, object] | None = None,
    acknowledged: list[int] | None = None,
) -> list[int]:
    """An idempotent librdkafka producer (acks=all, 5 in flight); the sequences acknowledged.

    Acknowledged sequences are appended to `acknowledged` as they come (another thread may
    watch its length to time a fault).
    """
    config: dict[str, object] = {
        "bootstrap.servers": bootstrap,
        "client.id": name,
        "enable.idempotence": True,
        "acks": "all",
        "max.in.flight.requests.per.connection": 5,
        "linger.ms": 5,
        "message.timeout.ms": 120_000,
    }
    if rack is not None:
        config["client.rack"] = rack
    config.update(extra or {})
    producer = Producer(config)
    if acknowledged is None:
        acknowledged = []
    failures: list[KafkaError] = []
    acked = acknowledged

    def delivered(error: KafkaError | None, message: object) -> None:
        if error is not None:
            failures.append(error)

    for sequence in range(count):
        data = value(name, sequence)
        while True:
            try:
                producer.produce(
                    topic,
                    value=data,
                    partition=sequence % partitions,
                    on_delivery=lambda e, m, s=sequence: (
                        delivered(e, m) if e is not None else acked.append(s)
                    ),
                )
                break
            except BufferError:
                producer.poll(0.05)
        producer.poll(0)
    remaining = producer.flush(120)
    assert remaining == 0, f"{name}: {remaining} records never delivered"
    assert not failures, f"{name}: delivery failures {failures[:3]}"
    return acknowledged


def confluent_consume(
    bootstrap: str,
    topic: str,
    end_offsets: Mapping[int, int],
    *,
    isolation: str = "read_uncommitted",
    rack: str | None = None,
    extra: Mapping[str, object] | None = None,
) -> Audit:
    """Read partitions from 0 up to `end_offsets` (exclusive) with a librdkafka consumer."""
    config: dict[str, object] = {
        "bootstrap.servers": bootstrap,
        "group.id": "audit",
        "enable.auto.commit": False,
        "isolation.level": isolation,
        "enable.partition.eof": True,
    }
    if rack is not None:
        config["client.rack"] = rack
    config.update(extra or {})
    consumer = Consumer(config)
    audit = Audit()
    try:
        consumer.assign([CkTopicPartition(topic, p, 0) for p in end_offsets])
        positions = dict.fromkeys(end_offsets, 0)
        deadline = time.monotonic() + PARTITIONS_READ_TIMEOUT_S
        while any(positions[p] < end for p, end in end_offsets.items()):
            assert time.monotonic() < deadline, f"read only up to {positions} of {end_offsets}"
            for message in consumer.consume(1000, 0.5):
                error = message.error()
                if error is not None:
                    assert error.code() == KafkaError._PARTITION_EOF, error
                    eof_partition, eof_offset = message.partition(), message.offset()
                    if eof_partition is not None and eof_offset is not None:  # the end so far
                        positions[eof_partition] = max(positions[eof_partition], eof_offset)
                    continue
                partition, offset = message.partition(), message.offset()
                assert partition is not None and offset is not None
                audit.add(partition, offset, message.value() or b"")
                positions[partition] = offset + 1
    finally:
        consumer.close()
    return audit


def split_evenly(total: int, parts: int) -> Sequence[int]:
    return [total // parts + (1 if i < total % parts else 0) for i in range(parts)]
