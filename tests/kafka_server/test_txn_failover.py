"""Acceptance: exactly once across a transaction coordinator's crash, with real clients and real
server processes.

Two `python -m diskless.kafka_server` processes share one data directory (brokers 0-2 and 4-5).
A confluent-kafka consume-transform-produce loop (a group's committed offsets, the output
produced and the input offsets sent in one transaction) runs against both. Mid-run the process
whose broker FindCoordinator names for the transactional id is SIGKILLed and restarted with the
same broker ids. The loop recovers as a librdkafka application does (retry what is retriable,
abort what requires it, start a new producer on a fatal error) and goes on, served by whichever
process the client reaches: the transaction state and the version 1 bridge are in the shared
coordinator. At the end, the output read with read_committed is the input exactly once, and the
group's committed offsets are the input's end.

The group's coordinator is a broker of the process that is not killed. librdkafka keeps the
broker it last found coordinating a group in a cache, and does not drop it when the broker
leaves the Metadata answers (the killed brokers do, once their registrations expire, until the
restarted process registers them again, as Kafka's fenced brokers do). A TxnOffsetCommit sent to
such a cached broker then waits, with no timeout, for that broker's connection to come up, which
it never does: it is re-examined only when some other broker's connection goes up or down.
`send_offsets_to_transaction` would stall until then. That is a stall of the client, not of the
servers, and the group's own failover is tested elsewhere (test_group_failover).
"""

from __future__ import annotations

import os
import signal
import socket
import struct
import subprocess
import sys
import threading
import time
from pathlib import Path

import kio.schema.find_coordinator.v1.request as find_coordinator_v1
from confluent_kafka import Consumer, KafkaError, KafkaException, Producer
from confluent_kafka import TopicPartition as CkTopicPartition
from kio.static.primitive import i8

from testkit.clients import confluent_consume, value
from testkit.ports import free_port
from testkit.wire import decode_response, encode_request

PARTITIONS = 3
RECORDS = 150
BATCH = 10
GROUP = "transform"
TRANSACTIONAL_ID = "failover-1"
KILL_AFTER_COMMITS = 3
LOOP_TIMEOUT_S = 45
FIRST_IDS = (0, 1, 2)
SECOND_IDS = (4, 5)


def _free_base_port() -> int:
    """A base port with BASE+0 .. BASE+5 free (broker i listens on BASE+i)."""
    return free_port(max(SECOND_IDS) + 1)


class Server:
    """One server process on the shared data directory, restartable with the same brokers."""

    def __init__(self, data_dir: Path, base_port: int, ids: tuple[int, ...], *topics: str):
        self.data_dir, self.base_port, self.ids = data_dir, base_port, ids
        self.process: subprocess.Popen[str] | None = None
        self.start(*topics)

    def start(self, *topics: str) -> None:
        options = [f"--topic={t}" for t in topics]
        # The servers' logs, kept beside the data for a failing run.
        log = (self.data_dir / f"server-{self.ids[0]}.log").open("a")
        self.process = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "diskless.kafka_server",
                "--data-dir",
                str(self.data_dir),
                "--broker-ids",
                ",".join(map(str, self.ids)),
                "--racks",
                "1",
                "--base-port",
                str(self.base_port),
                # A transaction's end waits for the leases of the killed broker's batches to
                # expire: keep that short (the WAL's budget must still fit in a lease).
                "--upload-timeout-ms",
                "1000",
                "--txn-lease-ttl-ms",
                "5000",
                # The restarted process waits for its old registration to expire: keep it short.
                "--server-option",
                "broker_session_timeout_ms=3000",
                "--log-level",
                "INFO",
                *options,
            ],
            stdout=subprocess.PIPE,
            stderr=log,
            text=True,
            env=dict(os.environ, PYTHONUNBUFFERED="1"),
        )
        log.close()  # the child has its own copy
        assert self.process.stdout is not None
        for line in self.process.stdout:
            if line.startswith("bootstrap.servers="):
                return
        raise AssertionError(f"broker ids {self.ids}: no bootstrap line")

    def kill(self) -> None:
        assert self.process is not None
        self.process.send_signal(signal.SIGKILL)
        self.process.communicate(timeout=30)

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.communicate(timeout=30)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.communicate(timeout=30)


def _transaction_coordinator(address: str) -> int:
    """The broker FindCoordinator names for the transactional id."""
    return _coordinator(address, TRANSACTIONAL_ID, key_type=1)


def _coordinator(address: str, key: str, *, key_type: int) -> int:
    """The broker FindCoordinator names for `key` (0: a group, 1: a transactional id)."""
    host, _, port = address.rpartition(":")
    request = find_coordinator_v1.FindCoordinatorRequest(key=key, key_type=i8(key_type))
    with socket.create_connection((host, int(port)), timeout=10) as connection:
        connection.sendall(encode_request(request, 1))
        stream = connection.makefile("rb")
        (size,) = struct.unpack(">i", stream.read(4))
        frame = stream.read(size)
    response = decode_response(frame, 10, 1, 1)
    assert int(response.error_code) == 0, response
    return int(response.node_id)


def _agreed_coordinator(addresses: list[str]) -> int:
    """The transaction coordinator, once every process names the same one (each reads the
    cluster's broker registry every few seconds)."""
    deadline = time.monotonic() + 30
    while len(named := {_transaction_coordinator(a) for a in addresses}) > 1:
        assert time.monotonic() < deadline, f"the processes name {named}"
        time.sleep(0.5)
    return named.pop()


def _produce_input(bootstrap: str) -> None:
    producer = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True})
    for i in range(RECORDS):
        producer.produce("in", value=value("in", i), partition=i % PARTITIONS)
    assert producer.flush(30) == 0


class TransformLoop:
    """confluent-kafka's transactional example, with its error handling."""

    def __init__(self, bootstrap: str) -> None:
        self.bootstrap = bootstrap
        self.committed = 0
        self.recoveries: list[str] = []
        self.fatal: list[str] = []
        self.failure: BaseException | None = None
        self.producer = self._new_producer()
        self.consumer = Consumer(
            {
                "bootstrap.servers": bootstrap,
                "group.id": GROUP,
                "enable.auto.commit": False,
                "auto.offset.reset": "earliest",
                "isolation.level": "read_committed",
                "enable.partition.eof": True,
            }
        )

    def _new_producer(self) -> Producer:
        producer = Producer(
            {
                "bootstrap.servers": self.bootstrap,
                "transactional.id": TRANSACTIONAL_ID,
                "transaction.timeout.ms": 20_000,
            }
        )
        producer.init_transactions(LOOP_TIMEOUT_S)
        return producer

    def _rewind(self) -> None:
        """Start every input partition again at the group's committed offset."""
        self.consumer.unassign()
        self.consumer.assign([CkTopicPartition("in", p) for p in range(PARTITIONS)])

    def _recover(self, error: KafkaError, step: str) -> None:
        self.recoveries.append(f"{step}: {error.str()}")
        if error.fatal():
            self.fatal.append(error.str())
            self.producer = self._new_producer()  # fences the old one, aborts what it left
        else:
            try:
                self.producer.abort_transaction(LOOP_TIMEOUT_S)
            except KafkaException as e:
                if not e.args[0].fatal():
                    raise
                self.fatal.append(e.args[0].str())
                self.producer = self._new_producer()
        self._rewind()

    def run(self) -> None:
        try:
            self._run()
        except BaseException as e:
            self.failure = e
        finally:
            self.consumer.close()

    def _run(self) -> None:
        done: set[int] = set()
        deadline = time.monotonic() + LOOP_TIMEOUT_S
        self._rewind()
        while len(done) < PARTITIONS:
            assert time.monotonic() < deadline, f"only partitions {done} done"
            messages = self.consumer.consume(BATCH, 0.5)
            positions: dict[int, int] = {}
            outputs: list[tuple[int, bytes]] = []
            for message in messages:
                error = message.error()
                partition, offset = message.partition(), message.offset()
                if error is not None:
                    if error.code() == KafkaError._PARTITION_EOF:
                        assert partition is not None and offset is not None
                        if offset >= RECORDS // PARTITIONS:
                            done.add(partition)
                    continue  # transport errors while a server restarts: the client retries
                assert partition is not None and offset is not None
                _, _, sequence = (message.value() or b"").decode().partition(":")
                outputs.append((partition, value("out", int(sequence))))
                positions[partition] = offset + 1
            if not outputs:
                continue
            step = "produce"
            try:
                self.producer.begin_transaction()
                for partition, data in outputs:
                    self.producer.produce("out", value=data, partition=partition)
                step = "send offsets"
                self.producer.send_offsets_to_transaction(
                    [CkTopicPartition("in", p, o) for p, o in sorted(positions.items())],
                    self.consumer.consumer_group_metadata(),
                    LOOP_TIMEOUT_S,
                )
                step = "commit"
                while True:
                    try:
                        self.producer.commit_transaction(LOOP_TIMEOUT_S)
                        break
                    except KafkaException as e:
                        if not e.args[0].retriable():
                            raise
                        self.recoveries.append(f"commit retried: {e.args[0].str()}")
                self.committed += 1
            except KafkaException as e:
                done.clear()
                self._recover(e.args[0], step)


def _group_offsets(bootstrap: str) -> dict[int, int]:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": GROUP})
    try:
        answered = consumer.committed(
            [CkTopicPartition("in", p) for p in range(PARTITIONS)], timeout=30
        )
        return {tp.partition: tp.offset for tp in answered}
    finally:
        consumer.close()


def _high_watermarks(bootstrap: str, topic: str) -> dict[int, int]:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "watermarks"})
    try:
        return {
            p: consumer.get_watermark_offsets(CkTopicPartition(topic, p), timeout=30)[1]
            for p in range(PARTITIONS)
        }
    finally:
        consumer.close()


def test_exactly_once_across_a_killed_transaction_coordinator(tmp_path: Path) -> None:
    base = _free_base_port()
    first = Server(tmp_path, base, FIRST_IDS, f"in:{PARTITIONS}", f"out:{PARTITIONS}")
    second = None
    try:
        second = Server(tmp_path, base, SECOND_IDS)
        addresses = [f"127.0.0.1:{base + i}" for i in (*FIRST_IDS, *SECOND_IDS)]
        bootstrap = ",".join(addresses)
        _produce_input(bootstrap)
        owner = _agreed_coordinator(addresses)
        victim = first if owner in FIRST_IDS else second
        group_owner = _coordinator(addresses[0], GROUP, key_type=0)
        assert (group_owner in FIRST_IDS) != (owner in FIRST_IDS), (
            f"group {GROUP} is coordinated by broker {group_owner}, in the process to be killed"
            " (see the module docstring): choose another group id"
        )

        loop = TransformLoop(bootstrap)
        # A daemon: a loop stuck in a client call must not keep a failed run from exiting.
        thread = threading.Thread(target=loop.run, name="transform", daemon=True)
        thread.start()
        deadline = time.monotonic() + LOOP_TIMEOUT_S
        while loop.committed < KILL_AFTER_COMMITS and thread.is_alive():
            assert time.monotonic() < deadline, "the loop made no progress"
            time.sleep(0.05)
        victim.kill()
        killed_at = loop.committed
        time.sleep(1.0)
        victim.start()
        thread.join(LOOP_TIMEOUT_S + 30)
        assert not thread.is_alive(), (
            f"the loop did not finish: {loop.committed} commits ({killed_at} before the kill),"
            f" recoveries: {loop.recoveries}"
        )
        if loop.failure is not None:
            raise loop.failure
        print(
            f"coordinator broker {owner} killed after {killed_at} commits;"
            f" {loop.committed} commits; recoveries: {loop.recoveries}"
        )
        assert loop.committed > killed_at  # the loop went on after the restart
        # The bridge from the client's transaction version 1 is in the shared coordinator, so
        # the restarted process (and the other one) went on bridging the same producer: it was
        # never fenced. (With the bridge in a process's memory, its batches are refused after
        # the restart, and the application has to start a new producer.)
        assert loop.fatal == []

        inputs = dict.fromkeys(range(PARTITIONS), RECORDS // PARTITIONS)
        assert _group_offsets(bootstrap) == inputs
        outputs = _high_watermarks(bootstrap, "out")
        audit = confluent_consume(bootstrap, "out", outputs, isolation="read_committed")
        audit.check({"out": range(RECORDS)})
        assert audit.count == RECORDS
    finally:
        if second is not None:
            second.stop()
        first.stop()
