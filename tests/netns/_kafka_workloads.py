"""Real Kafka clients producing and consuming over SASL_SSL (SCRAM-SHA-512) until told to stop,
each recording what it was acknowledged, for a cluster test to audit.

Values are `<producer>:<sequence>` (never reused, so a record read back names what it was). Each
client runs in a thread that joined the clients' host (`Host.call`), so the threads its library
starts are there too.
"""

from __future__ import annotations

import asyncio
import collections
import ssl
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final

import kafka
from aiokafka import AIOKafkaProducer
from aiokafka.helpers import create_ssl_context
from confluent_kafka import Consumer, KafkaError, KafkaException, Message, Producer

from testkit.clients import value
from testkit.netns import Host

TOPIC: Final = "orders"
PARTITIONS: Final = 6
GROUP: Final = "orders-readers"
TRANSACTIONAL_ID: Final = "orders-writer"
USER: Final = "alice"
PASSWORD: Final = "alice-secret"
PACE_S: Final = 0.02
"""Between two records of one producer: a steady trickle, enough to see every cut."""
TRANSACTIONAL: Final = "confluent-transactional"
TXN_RECORDS: Final = 8
TXN_TIMEOUT_MS: Final = 20_000
DELIVERY_TIMEOUT_MS: Final = 120_000
"""Longer than any cut: an idempotent producer never gives a record up."""
REQUEST_TIMEOUT_MS: Final = 10_000
"""A request on a connection gone silent is given up (and retried elsewhere or later) after this."""
CLIENT_TIMEOUT_S: Final = 120.0


def _producing(bootstrap: str, ca: Path) -> dict[str, Any]:
    # librdkafka gives up a request in flight after `socket.timeout.ms` (request.timeout.ms is
    # the broker's own acknowledgement timeout), and an idempotent producer holds every
    # partition until those to a broker cut from it are given up.
    return {
        **librdkafka(bootstrap, ca),
        "request.timeout.ms": REQUEST_TIMEOUT_MS,
        "socket.timeout.ms": REQUEST_TIMEOUT_MS,
    }


def librdkafka(
    bootstrap: str, ca: Path, user: str = USER, password: str = PASSWORD
) -> dict[str, Any]:
    """confluent-kafka's settings for `user` over SASL_SSL, the broker's IP verified."""
    return {
        "bootstrap.servers": bootstrap,
        "security.protocol": "SASL_SSL",
        "sasl.mechanism": "SCRAM-SHA-512",
        "sasl.username": user,
        "sasl.password": password,
        "ssl.ca.location": str(ca),
    }


@dataclass
class Acks:
    """What one producer was told: (partition, sequence) acknowledged, and its failures."""

    name: str
    exactly_once: bool
    acked: list[tuple[int, int]] = field(default_factory=list)
    failed: list[str] = field(default_factory=list)

    def count(self) -> int:
        return len(self.acked)

    def partitions(self) -> collections.Counter[int]:
        return collections.Counter(p for p, _ in list(self.acked))


@dataclass
class Workload:
    """The clients of one run, each in a thread of the clients' host."""

    host: Host
    bootstrap: str
    ca: Path
    txn_partitions: list[int]
    """The partitions the transactional producer writes, in turn."""
    stop: threading.Event = field(default_factory=threading.Event)
    stop_consumers: threading.Event = field(default_factory=threading.Event)
    producers: list[Acks] = field(default_factory=list)
    consumed: collections.Counter[bytes] = field(default_factory=collections.Counter)
    errors: list[BaseException] = field(default_factory=list)
    threads: list[threading.Thread] = field(default_factory=list)

    def start(self) -> None:
        runs: list[tuple[Callable[..., None], Acks | int]] = [
            (self._idempotent, Acks("confluent-idempotent", exactly_once=True)),
            (self._transactional, Acks(TRANSACTIONAL, exactly_once=True)),
            (self._kafka_python, Acks("kafka-python", exactly_once=False)),
            (self._aiokafka, Acks("aiokafka", exactly_once=True)),
            (self._group_member, 0),
            (self._group_member, 1),
        ]
        for run, arg in runs:
            if isinstance(arg, Acks):
                self.producers.append(arg)
            thread = threading.Thread(target=self._guarded, args=(run, arg), daemon=True)
            self.threads.append(thread)
            thread.start()

    def _guarded(self, run: Callable[..., None], arg: Any) -> None:
        try:
            self.host.call(run, arg)
        except BaseException as error:  # reported by the test's thread
            self.errors.append(RuntimeError(f"{run.__name__}({arg!r}) failed: {error!r}"))

    def finish(self) -> None:
        """Stop producing; every producer flushed and closed."""
        self.stop.set()
        for thread in self.threads[:4]:
            thread.join(CLIENT_TIMEOUT_S + 30)
            assert not thread.is_alive(), "a producer hung"

    def stop_reading(self) -> None:
        self.stop_consumers.set()
        for thread in self.threads[4:]:
            thread.join(60)
            assert not thread.is_alive(), "a consumer hung"

    def check_running(self) -> None:
        assert not self.errors, self.errors
        for index, thread in enumerate(self.threads):
            told = self.stop if index < len(self.producers) else self.stop_consumers
            assert thread.is_alive() or told.is_set(), f"{thread.name} ended early"

    def counts(self) -> dict[str, int]:
        return {a.name: a.count() for a in self.producers}

    # --- the clients ------------------------------------------------------------------------------
    def _idempotent(self, acks: Acks) -> None:
        producer = Producer(
            {
                **_producing(self.bootstrap, self.ca),
                "enable.idempotence": True,
                "linger.ms": 5,
                "message.timeout.ms": DELIVERY_TIMEOUT_MS,
            }
        )
        sequence = 0
        while not self.stop.is_set():
            producer.produce(
                TOPIC, value(acks.name, sequence), on_delivery=_reporter(acks, sequence)
            )
            sequence += 1
            producer.poll(PACE_S)
        assert producer.flush(CLIENT_TIMEOUT_S) == 0, f"{acks.name}: records never delivered"

    def _transactional(self, acks: Acks) -> None:
        """Transactions of `TXN_RECORDS`; a transaction's records are acknowledged when its
        commit returns. One that must abort is aborted (its records must never be read)."""
        producer = Producer(
            {
                **_producing(self.bootstrap, self.ca),
                "transactional.id": TRANSACTIONAL_ID,
                "linger.ms": 5,
                # A transaction stuck on a record it sent the cut broker is aborted, not waited
                # for: only what commits must be read back.
                "message.timeout.ms": TXN_TIMEOUT_MS,
                "transaction.timeout.ms": TXN_TIMEOUT_MS,
            }
        )
        producer.init_transactions(CLIENT_TIMEOUT_S)
        sequence = 0
        while not self.stop.is_set():
            producer.begin_transaction()
            delivered: list[tuple[int, int]] = []
            for _ in range(TXN_RECORDS):
                producer.produce(
                    TOPIC,
                    value(acks.name, sequence),
                    partition=self.txn_partitions[sequence % len(self.txn_partitions)],
                    on_delivery=_collector(delivered, sequence),
                )
                sequence += 1
                producer.poll(PACE_S)
            if _commit(producer, acks):
                acks.acked.extend(delivered)

    def _kafka_python(self, acks: Acks) -> None:
        """Not idempotent: a retried record may be written twice (read back at least once)."""
        producer = kafka.KafkaProducer(
            bootstrap_servers=self.bootstrap.split(","),
            security_protocol="SASL_SSL",
            sasl_mechanism="SCRAM-SHA-512",
            sasl_plain_username=USER,
            sasl_plain_password=PASSWORD,
            ssl_cafile=str(self.ca),
            acks="all",
            enable_idempotence=False,
            linger_ms=5,
            delivery_timeout_ms=DELIVERY_TIMEOUT_MS,
            request_timeout_ms=REQUEST_TIMEOUT_MS,
        )
        sequence = 0
        while not self.stop.is_set():
            future = producer.send(TOPIC, value(acks.name, sequence))
            future.add_callback(lambda m, s=sequence: acks.acked.append((m.partition, s)))
            future.add_errback(lambda e: acks.failed.append(repr(e)))
            sequence += 1
            time.sleep(PACE_S)
        producer.flush(CLIENT_TIMEOUT_S)
        producer.close(CLIENT_TIMEOUT_S)

    def _aiokafka(self, acks: Acks) -> None:
        with asyncio.Runner(loop_factory=_ConnectionsLoop) as runner:
            runner.run(self._aiokafka_main(acks))

    async def _aiokafka_main(self, acks: Acks) -> None:
        producer = AIOKafkaProducer(
            bootstrap_servers=self.bootstrap,
            security_protocol="SASL_SSL",
            sasl_mechanism="SCRAM-SHA-512",
            sasl_plain_username=USER,
            sasl_plain_password=PASSWORD,
            ssl_context=create_ssl_context(cafile=str(self.ca)),
            enable_idempotence=True,
            linger_ms=5,
            request_timeout_ms=REQUEST_TIMEOUT_MS,
        )
        await producer.start()
        try:
            pending: set[asyncio.Future[Any]] = set()
            sequence = 0
            while not self.stop.is_set():
                future = await producer.send(TOPIC, value(acks.name, sequence))
                future.add_done_callback(_aiokafka_reporter(acks, sequence))
                pending.add(future)
                sequence += 1
                await asyncio.sleep(PACE_S)
            await asyncio.wait_for(
                asyncio.gather(*pending, return_exceptions=True), CLIENT_TIMEOUT_S
            )
        finally:
            await producer.stop()
            await _abort_connections()

    def _group_member(self, member: int) -> None:
        consumer = Consumer(
            {
                **librdkafka(self.bootstrap, self.ca),
                "group.id": GROUP,
                "client.id": f"reader-{member}",
                "isolation.level": "read_committed",
                "auto.offset.reset": "earliest",
            }
        )
        consumer.subscribe([TOPIC])
        try:
            while not self.stop_consumers.is_set():
                for message in consumer.consume(500, 0.2):
                    error = message.error()
                    if error is None:
                        self.consumed[message.value() or b""] += 1
                    elif not error.retriable() and error.code() != KafkaError._PARTITION_EOF:
                        raise KafkaException(error)
        finally:
            consumer.close()


class _ConnectionsLoop(asyncio.SelectorEventLoop):
    """An event loop that keeps every connection opened on it, for `_abort_connections`."""

    def __init__(self) -> None:
        super().__init__()
        self.connections: list[asyncio.Transport] = []

    async def create_connection(  # type: ignore[override]
        self, *args: Any, **kwargs: Any
    ) -> tuple[asyncio.Transport, Any]:
        transport, protocol = await super().create_connection(*args, **kwargs)
        self.connections.append(transport)
        return transport, protocol


async def _abort_connections() -> None:
    """Close for good the connections left on this `_ConnectionsLoop`. aiokafka closes a
    connection with a TLS shutdown that waits up to 30 s for the broker's close_notify, which a
    link cut under it never brings: the loop closed meanwhile would leave its socket open (a
    ResourceWarning, pytest's exit status 1, after a passing test)."""
    loop = asyncio.get_running_loop()
    assert isinstance(loop, _ConnectionsLoop)
    for transport in loop.connections:
        transport.abort()
    await asyncio.sleep(0)  # the sockets close in callbacks of the next iteration
    await asyncio.sleep(0)


def _reporter(acks: Acks, sequence: int) -> Callable[[KafkaError | None, Message], None]:
    def report(error: KafkaError | None, message: Message) -> None:
        if error is None:
            partition = message.partition()
            assert partition is not None
            acks.acked.append((partition, sequence))
        else:
            acks.failed.append(str(error))

    return report


def _collector(
    delivered: list[tuple[int, int]], sequence: int
) -> Callable[[KafkaError | None, Message], None]:
    def collect(error: KafkaError | None, message: Message) -> None:
        partition = message.partition()
        if error is None and partition is not None:
            delivered.append((partition, sequence))

    return collect


def _aiokafka_reporter(acks: Acks, sequence: int) -> Callable[[asyncio.Future[Any]], None]:
    def report(future: asyncio.Future[Any]) -> None:
        if future.exception() is None:
            acks.acked.append((future.result().partition, sequence))
        else:
            acks.failed.append(repr(future.exception()))

    return report


def _commit(producer: Producer, acks: Acks) -> bool:
    """Commit the open transaction, retrying what may be retried; abort it when it must be."""
    while True:
        try:
            producer.commit_transaction(CLIENT_TIMEOUT_S)
            return True
        except KafkaException as exception:
            error = exception.args[0]
            if error.retriable():
                continue
            if not error.txn_requires_abort():
                raise
            acks.failed.append(str(error))
            producer.abort_transaction(CLIENT_TIMEOUT_S)
            return False


def client_ssl_context(ca: Path) -> ssl.SSLContext:
    return ssl.create_default_context(cafile=str(ca))
