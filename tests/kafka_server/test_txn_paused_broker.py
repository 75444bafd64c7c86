"""Acceptance: a broker process paused (SIGSTOP) while it holds a transactional producer's batch.

Real parts: `python -m diskless.kafka_server` processes over one PostgreSQL coordinator and one
object directory. PostgreSQL rather than SQLite because a process paused in the middle of a
SQLite write would hold the file's only write lock and stop the whole cluster, which is not the
fault under test.

- A version 1 transactional producer speaks the wire protocol directly, so every step happens in
  a fixed order. Its produce request is queued on broker B, and B is paused. The producer
  retries the batch through broker A, commits there, and registers the partition again for its
  next transaction. Then B resumes and serves the queued request. The batch belongs to a
  transaction that has ended, so B answers INVALID_PRODUCER_EPOCH (47), not
  OUT_OF_ORDER_SEQUENCE_NUMBER (45), which librdkafka treats as fatal. The next transaction
  goes on.
- A confluent-kafka transactional producer runs transactions while the broker it produces to is
  paused for longer than `transaction.timeout.ms`, twice. It recovers as a librdkafka
  application does: it aborts on an abortable error and starts a new producer on a fatal one.
  A fatal error may only be a fencing; a fatal OUT_OF_ORDER_SEQUENCE_NUMBER fails the test. At
  the end, read_committed returns exactly the records of the transactions that committed.
"""

from __future__ import annotations

import contextlib
import os
import signal
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from confluent_kafka import Consumer, KafkaError, KafkaException, Producer
from confluent_kafka import TopicPartition as CkTopicPartition
from kio.schema.errors import ErrorCode as WireError

from testkit.clients import confluent_consume, value
from testkit.postgres import database_dsn
from testkit.processes import BrokerProcess, bootstrap, broker_processes
from testkit.raw_producer import TID, TOPIC, RawProducer, partition_error, produce_request
from testkit.wire import decode_response, encode_request


@contextlib.contextmanager
def paused(broker: BrokerProcess) -> Iterator[None]:
    """SIGSTOP the broker's process group for the block, SIGCONT after it whatever happened."""
    assert broker.process is not None
    os.killpg(broker.process.pid, signal.SIGSTOP)
    try:
        yield
    finally:
        os.killpg(broker.process.pid, signal.SIGCONT)


def _options(tmp_path: Path, partitions: int) -> list[str]:
    return [
        "--coordinator", database_dsn(tmp_path, "paused"),
        "--data-dir", str(tmp_path / "data"),
        "--topic", f"{TOPIC}:{partitions}",
        "--no-lifecycle",
        # A transaction's end waits for a paused broker's leases: keep them short.
        "--upload-timeout-ms", "1000", "--txn-lease-ttl-ms", "5000",
    ]  # fmt: skip


async def test_a_paused_brokers_late_batch_of_a_committed_transaction_is_stale(
    tmp_path: Path,
) -> None:
    with broker_processes(2, tmp_path, _options(tmp_path, 1)) as (a, b):
        producer = await RawProducer.connect(a)
        held = await RawProducer.connect(b)  # the connection B's queued request came on
        try:
            await producer.init()
            pid = producer.pid
            assert await producer.add(pid) is WireError.none
            late = produce_request(pid, 0, 3)
            with paused(b):
                await held.client.send_raw(encode_request(late, 1))
                # The answer is lost to the client, which retries through A and goes on.
                assert partition_error(await producer.client.request(late)) is WireError.none
                assert await producer.commit(pid) is WireError.none
                assert await producer.add(pid) is WireError.none
            frame = await held.client.read_frame(timeout_s=30)
            assert frame is not None, b.log_tail()
            answer = partition_error(decode_response(frame, 0, 9, 1))
            assert answer is WireError.invalid_producer_epoch, answer
            # The next transaction is unaffected: its first batch follows the committed one.
            following = await producer.client.request(produce_request(pid, 3, 2))
            assert partition_error(following) is WireError.none
            assert await producer.commit(pid) is WireError.none
        finally:
            await held.close()
            await producer.close()


# --- confluent-kafka across pauses longer than its transaction timeout ----------------------------
PARTITIONS = 3
TRANSACTION_TIMEOUT_MS = 3_000
PAUSE_S = 4.5
PAUSES = 2
RECORDS_PER_TRANSACTION = 12


class TransactionLoop:
    """Transactions of RECORDS_PER_TRANSACTION records until stopped, recovering from errors as
    a librdkafka application does; remembers which transactions committed."""

    def __init__(self, servers: str) -> None:
        self.servers = servers
        self.committed: list[int] = []
        self.fatal: list[KafkaError] = []
        self.abortable: list[KafkaError] = []
        self.failure: BaseException | None = None
        self.stop = threading.Event()
        self.producer = self._new_producer()

    def _new_producer(self) -> Producer:
        producer = Producer(
            {
                "bootstrap.servers": self.servers,
                "transactional.id": TID,
                "transaction.timeout.ms": TRANSACTION_TIMEOUT_MS,
                "linger.ms": 5,
            }
        )
        producer.init_transactions(60)
        return producer

    def run(self) -> None:
        try:
            index = 0
            while not self.stop.is_set():
                self._transaction(index)
                index += 1
        except BaseException as e:
            self.failure = e

    def _transaction(self, index: int) -> None:
        try:
            self.producer.begin_transaction()
            for r in range(RECORDS_PER_TRANSACTION):
                self.producer.produce(TOPIC, value=value(f"t{index}", r), partition=r % PARTITIONS)
                self.producer.poll(0)
            self.producer.commit_transaction(60)
            self.committed.append(index)
        except KafkaException as e:
            self._recover(e.args[0])

    def _recover(self, error: KafkaError) -> None:
        if error.fatal():
            self.fatal.append(error)
            self.producer = self._new_producer()  # fences the old one
            return
        self.abortable.append(error)
        assert error.txn_requires_abort(), error
        while True:
            try:
                self.producer.abort_transaction(60)
                return
            except KafkaException as e:
                if e.args[0].fatal():
                    self.fatal.append(e.args[0])
                    self.producer = self._new_producer()
                    return
                if not e.args[0].retriable():
                    raise


def _leader(servers: str) -> int:
    """The broker the producers of this test send partition 0 to (one rack: the same for all)."""
    probe = Producer({"bootstrap.servers": servers})
    try:
        return int(probe.list_topics(TOPIC, timeout=30).topics[TOPIC].partitions[0].leader)
    finally:
        probe.flush(1)


def _high_watermarks(servers: str) -> dict[int, int]:
    consumer = Consumer({"bootstrap.servers": servers, "group.id": "watermarks"})
    try:
        return {
            p: consumer.get_watermark_offsets(CkTopicPartition(TOPIC, p), timeout=30)[1]
            for p in range(PARTITIONS)
        }
    finally:
        consumer.close()


@pytest.mark.slow  # a guard: it passes on code with the bug too; the test above reproduces it
def test_librdkafka_transactions_ride_out_a_broker_paused_past_their_timeout(
    tmp_path: Path,
) -> None:
    with broker_processes(3, tmp_path, _options(tmp_path, PARTITIONS), racks=1) as brokers:
        servers = bootstrap(brokers)
        loop = TransactionLoop(servers)
        thread = threading.Thread(target=loop.run, name="transactions")
        thread.start()
        try:
            for _ in range(PAUSES):
                started = len(loop.committed)
                deadline = time.monotonic() + 60
                while len(loop.committed) < started + 3:
                    assert thread.is_alive() and time.monotonic() < deadline, loop.failure
                    time.sleep(0.05)
                victim = next(b for b in brokers if b.broker_id == _leader(servers))
                with paused(victim):
                    time.sleep(PAUSE_S)
            resumed = len(loop.committed)
            deadline = time.monotonic() + 60
            while len(loop.committed) < resumed + 3:
                assert thread.is_alive() and time.monotonic() < deadline, loop.failure
                time.sleep(0.05)
        finally:
            loop.stop.set()
            thread.join(120)
        assert not thread.is_alive(), "the transaction loop hung"
        if loop.failure is not None:
            raise loop.failure
        print(f"committed {len(loop.committed)}; abortable {loop.abortable}; fatal {loop.fatal}")
        for error in loop.fatal:  # a fencing may end a producer; nothing else may
            assert error.code() == KafkaError._FENCED, error
        audit = confluent_consume(
            servers, TOPIC, _high_watermarks(servers), isolation="read_committed"
        )
        audit.check({f"t{i}": range(RECORDS_PER_TRANSACTION) for i in loop.committed})
