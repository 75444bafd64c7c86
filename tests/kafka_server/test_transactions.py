"""Transactions through the Kafka front end.

- Unit tests of the transaction-version-1 bridge (`TransactionFront`) over the in-memory
  coordinator: epochs substituted, batches rewritten with a valid CRC, sequences restarted.
- An integration test of librdkafka's transactional protocol flow through the bridge: every
  client call succeeds and the coordinator sees one epoch per transaction (markers at the next),
  each transaction starting at sequence 0.
- The acceptance test: committed and aborted transactions, read back by read_committed consumers
  (librdkafka and kafka-python), which must see exactly the committed records, and by a
  read_uncommitted one, which sees them all.
- A transaction one of whose topics is deleted before the commit: librdkafka's commit succeeds,
  the kept topic's partitions get their markers, and the id goes on working.
"""

from __future__ import annotations

import asyncio
import datetime
from collections.abc import AsyncIterator, Sequence

import pytest
from confluent_kafka import KafkaError, KafkaException, Producer
from kafka import KafkaConsumer
from kafka import TopicPartition as KpTopicPartition
from kio.schema.errors import ErrorCode as WireError
from kio.schema.produce.v11 import request as produce_v11

from diskless import ErrorCode, IsolationLevel, ManualClock, OffsetSpec, TopicPartition
from diskless.coordinator import InMemoryBatchCoordinator, RegisteredTxn
from diskless.kafka_server import KafkaCluster, TransactionFront
from diskless.kafka_server._server.settings.server_properties import (
    server_config as properties_config,
)
from diskless.records import BatchHeader, parse_batch
from diskless.txn import TxnRecord, TxnStep
from testkit.batches import build_batch as broker_batch
from testkit.clients import Audit, confluent_consume, value
from testkit.cluster import end_offsets, local_cluster, server_config
from testkit.commits import Committer
from testkit.commits import batch as coordinator_batch
from testkit.wal import build_batch
from testkit.wire import WireClient, decode_response, encode_request, fetch_request

PARTITIONS = 3
TRANSACTIONS = 6
RECORDS_PER_TRANSACTION = 90


class RecordingParticipant(InMemoryBatchCoordinator):
    """The in-memory coordinator, recording the transaction coordinator's calls to it."""

    def __init__(self) -> None:
        super().__init__()
        self.added: list[tuple[int, int, list[TopicPartition]]] = []
        self.ended: list[tuple[int, int, int, bool]] = []

    async def txn_add_partitions(
        self,
        transactional_id: str,
        producer_id: int,
        producer_epoch: int,
        partitions: Sequence[TopicPartition],
    ) -> list[ErrorCode]:
        self.added.append((producer_id, producer_epoch, list(partitions)))
        return await super().txn_add_partitions(
            transactional_id, producer_id, producer_epoch, partitions
        )

    async def txn_complete(self, prepared: TxnRecord, coordinator_epoch: int) -> TxnStep:
        epoch = prepared.producer_epoch
        self.ended.append((prepared.producer_id, epoch, epoch + 1, prepared.commit))
        return await super().txn_complete(prepared, coordinator_epoch)


def _header(data: bytes) -> BatchHeader:
    parsed = parse_batch(data)
    assert isinstance(parsed, BatchHeader), parsed
    return parsed


def _transactional_batch(producer_id: int, epoch: int, sequence: int, count: int) -> bytes:
    return broker_batch(
        [b"x"] * count,
        producer_id=producer_id,
        producer_epoch=epoch,
        base_sequence=sequence,
        transactional=True,
        timestamp_step=0,
    )


# --- the bridge, unit level ---------------------------------------------------------------------
async def _rewrite(front: TransactionFront, tp: TopicPartition, data: bytes) -> bytes:
    return (await front.rewrite_batches({tp: data}, front.transactional({tp: data})))[tp]


async def _commit(coordinator: InMemoryBatchCoordinator, tp: TopicPartition, data: bytes) -> None:
    header = _header(data)
    (result,) = await Committer(coordinator).commit(
        [
            coordinator_batch(
                tp,
                pid=header.producer_id,
                epoch=header.producer_epoch,
                seq=header.base_sequence,
                count=header.records_count,
                txn=True,
            )
        ]
    )
    assert result.error is ErrorCode.NONE, result


async def test_bridge_maps_client_epoch_and_restarts_sequences_after_each_end() -> None:
    """One front end serves the coordinator APIs, another (another process) rewrites batches:
    the bridge is in the coordinator, not in either."""
    participant = RecordingParticipant()
    await participant.create_topic("t", 1)
    front, other = TransactionFront(participant), TransactionFront(participant)
    tp = TopicPartition("t", 0)
    init = await front.init_producer_id("tx", 60_000)
    assert init.error is ErrorCode.NONE
    pid, epoch = init.producer_id, init.producer_epoch

    assert await front.add_partitions_to_txn("tx", pid, epoch, [tp]) == [ErrorCode.NONE]
    first = _transactional_batch(pid, epoch, 0, 10)
    assert await _rewrite(other, tp, first) == first  # epoch 0, sequence 0: nothing to change
    await _commit(participant, tp, first)
    assert (await front.end_txn("tx", pid, epoch, commit=True)).error is ErrorCode.NONE
    # A retried EndTxn (its answer lost) is answered as the end it repeats.
    assert (await other.end_txn("tx", pid, epoch, commit=True)).error is ErrorCode.NONE

    # The client keeps its epoch and continues at sequence 10; the coordinator is at epoch+1.
    assert await other.add_partitions_to_txn("tx", pid, epoch, [tp]) == [ErrorCode.NONE]
    assert participant.added[-1][:2] == (pid, epoch + 1)
    second = _transactional_batch(pid, epoch, 10, 5)
    rewritten = await _rewrite(other, tp, second)
    header = _header(rewritten)
    assert (header.producer_epoch, header.base_sequence) == (epoch + 1, 0)
    assert header.crc_valid() and header.records_count == 5
    await _commit(participant, tp, rewritten)
    assert (await front.end_txn("tx", pid, epoch, commit=False)).error is ErrorCode.NONE
    assert [e[1:] for e in participant.ended] == [
        (epoch, epoch + 1, True),
        (epoch + 1, epoch + 2, False),
    ]

    assert await front.add_partitions_to_txn("tx", pid, epoch, [tp]) == [ErrorCode.NONE]
    third = await _rewrite(other, tp, _transactional_batch(pid, epoch, 15, 1))
    assert (_header(third).producer_epoch, _header(third).base_sequence) == (epoch + 2, 0)


async def test_bridge_leaves_other_batches_alone() -> None:
    participant = RecordingParticipant()
    await participant.create_topic("t", 1)
    front = TransactionFront(participant)
    tp = TopicPartition("t", 0)
    init = await front.init_producer_id("tx", 60_000)
    pid = init.producer_id
    assert await front.add_partitions_to_txn("tx", pid, 0, [tp]) == [ErrorCode.NONE]
    idempotent = build_batch([b"a"], producer_id=pid, producer_epoch=0, base_sequence=0)
    assert front.transactional({tp: idempotent}) == {}
    corrupt = bytearray(_transactional_batch(pid, 0, 3, 1))
    corrupt[-1] ^= 0xFF
    assert front.transactional({tp: bytes(corrupt)}) == {}
    stranger = _transactional_batch(pid + 1, 0, 0, 1)
    assert await _rewrite(front, tp, stranger) == stranger
    stale = _transactional_batch(pid, 7, 0, 1)
    assert await _rewrite(front, tp, stale) == stale


async def test_a_timed_out_transaction_fences_the_client() -> None:
    """Kafka fences a version 1 producer whose transaction the coordinator aborted on a
    timeout; the bridge does not follow such an end, so the client's epoch is stale."""
    clock = ManualClock()
    participant = InMemoryBatchCoordinator(clock=clock)
    await participant.create_topic("t", 1)
    front = TransactionFront(participant, clock=clock)
    tp = TopicPartition("t", 0)
    pid = (await front.init_producer_id("tx", 1_000)).producer_id
    assert await front.add_partitions_to_txn("tx", pid, 0, [tp]) == [ErrorCode.NONE]
    await clock.advance(5)
    assert await front.coordinator.abort_expired() == ["tx"]
    assert await front.add_partitions_to_txn("tx", pid, 0, [tp]) == [ErrorCode.PRODUCER_FENCED]
    assert (await front.end_txn("tx", pid, 0, commit=True)).error is ErrorCode.PRODUCER_FENCED


class SlowRegistrations(InMemoryBatchCoordinator):
    """The in-memory coordinator, whose partition registrations (what the bridge reads to
    rewrite a transactional batch) are answered only once `gate` is set."""

    gate: asyncio.Event | None = None

    async def describe_txn_registrations(
        self, keys: Sequence[tuple[TopicPartition, int]]
    ) -> list[RegisteredTxn | None]:
        if self.gate is not None:
            await self.gate.wait()
        return await super().describe_txn_registrations(keys)


def _produce(tp: TopicPartition, records: bytes) -> produce_v11.ProduceRequest:
    return produce_v11.ProduceRequest(
        transactional_id=None,
        acks=-1,
        timeout=datetime.timedelta(seconds=30),
        topic_data=(
            produce_v11.TopicProduceData(
                name=tp.topic,
                partition_data=(
                    produce_v11.PartitionProduceData(index=tp.partition, records=records),
                ),
            ),
        ),
    )


async def test_pipelined_produce_requests_keep_their_order_while_the_bridge_reads() -> None:
    """A transactional request whose rewrite waits for the coordinator, then a plain one, on
    one connection: the plain one lands after it, as it came after it."""
    coordinator = SlowRegistrations()
    async with local_cluster(coordinator, brokers=1, racks=1) as cluster:
        await cluster.create_topic("ordered", 1)
        tp = TopicPartition("ordered", 0)
        init = await cluster.transactions.init_producer_id("tx-ordered", 60_000)
        pid, epoch = init.producer_id, init.producer_epoch
        assert await cluster.transactions.add_partitions_to_txn("tx-ordered", pid, epoch, [tp]) == [
            ErrorCode.NONE
        ]
        coordinator.gate = asyncio.Event()
        client = await WireClient.connect(cluster.servers[0])
        try:
            first = _produce(tp, _transactional_batch(pid, epoch, 0, 3))
            second = _produce(tp, build_batch([b"after"]))
            await client.send_raw(encode_request(first, 1) + encode_request(second, 2))
            await asyncio.sleep(0.2)  # the second request is read and dispatched meanwhile
            coordinator.gate.set()
            answers = []
            for correlation_id in (1, 2):
                frame = await client.read_frame()
                assert frame is not None
                answers.append(decode_response(frame, 0, 11, correlation_id))
        finally:
            await client.close()
    results = [
        (
            a.responses[0].partition_responses[0].error_code,
            a.responses[0].partition_responses[0].base_offset,
        )
        for a in answers
    ]
    assert results == [(WireError.none, 0), (WireError.none, 3)]


# --- librdkafka through the bridge --------------------------------------------------------------
@pytest.fixture
async def recording_cluster() -> AsyncIterator[tuple[KafkaCluster, RecordingParticipant]]:
    participant = RecordingParticipant()
    async with local_cluster(participant, server_config=server_config()) as running:
        yield running, participant


def _transactional_run(
    bootstrap: str, topic: str, transactional_id: str, outcomes: Sequence[bool]
) -> None:
    """Transactions of RECORDS_PER_TRANSACTION records each, committed or aborted in turn."""
    producer = Producer(
        {
            "bootstrap.servers": bootstrap,
            "transactional.id": transactional_id,
            "client.id": transactional_id,
        }
    )
    producer.init_transactions(30)
    for index, commit in enumerate(outcomes):
        producer.begin_transaction()
        for r in range(RECORDS_PER_TRANSACTION):
            producer.produce(
                topic,
                value=value(f"t{index}", r),
                partition=r % PARTITIONS,
            )
        assert producer.flush(30) == 0  # on the broker before the outcome is decided
        if commit:
            producer.commit_transaction(30)
        else:
            producer.abort_transaction(30)


async def test_librdkafka_transactions_flow_through_the_bridge(
    recording_cluster: tuple[KafkaCluster, RecordingParticipant],
) -> None:
    cluster, participant = recording_cluster
    await cluster.create_topic("tx", PARTITIONS)
    outcomes = [i % 2 == 0 for i in range(TRANSACTIONS)]
    await asyncio.to_thread(_transactional_run, cluster.bootstrap("rack-0"), "tx", "tx-a", outcomes)
    pids = {pid for pid, _, _ in participant.added}
    assert len(pids) == 1
    # One coordinator epoch per transaction, though the client never changed its own.
    assert [epoch for _, epoch, _ in participant.added] == list(range(TRANSACTIONS))
    assert [(e[1], e[2], e[3]) for e in participant.ended] == [
        (epoch, epoch + 1, commit) for epoch, commit in enumerate(outcomes)
    ]
    for p in range(PARTITIONS):
        (snapshot,) = await participant.describe_producers(TopicPartition("tx", p))
        assert snapshot.producer_epoch == TRANSACTIONS  # the last marker's epoch (TV2)
    ends = await end_offsets(cluster, "tx", PARTITIONS)
    markers = TRANSACTIONS * PARTITIONS
    assert sum(ends.values()) == TRANSACTIONS * RECORDS_PER_TRANSACTION + markers


# --- the acceptance test, once the participant exists -------------------------------------------
def _kafka_python_read_committed(bootstrap: str, topic: str, ends: dict[int, int]) -> Audit:
    consumer = KafkaConsumer(
        bootstrap_servers=bootstrap,
        isolation_level="read_committed",
        enable_auto_commit=False,
        auto_offset_reset="earliest",
        consumer_timeout_ms=3000,
    )
    audit = Audit()
    consumer.assign([KpTopicPartition(topic, p) for p in ends])
    for message in consumer:
        audit.add(message.partition, message.offset, message.value)
    consumer.close()
    return audit


async def test_read_committed_consumers_see_exactly_the_committed_transactions(
    cluster: KafkaCluster,
) -> None:
    topic = "committed"
    await cluster.create_topic(topic, PARTITIONS)
    outcomes = [i % 3 != 1 for i in range(TRANSACTIONS)]  # commit, abort, commit, ...
    await asyncio.to_thread(
        _transactional_run, cluster.bootstrap("rack-1"), topic, "tx-b", outcomes
    )
    ends = await end_offsets(cluster, topic, PARTITIONS)
    committed = {
        f"t{i}": range(RECORDS_PER_TRANSACTION) for i, commit in enumerate(outcomes) if commit
    }
    everything = {f"t{i}": range(RECORDS_PER_TRANSACTION) for i in range(TRANSACTIONS)}
    librdkafka = await asyncio.to_thread(
        confluent_consume, cluster.bootstrap("rack-1"), topic, ends, isolation="read_committed"
    )
    librdkafka.check(committed)
    kafka_python = await asyncio.to_thread(
        _kafka_python_read_committed, cluster.bootstrap("rack-2"), topic, ends
    )
    kafka_python.check(committed)
    uncommitted = await asyncio.to_thread(
        confluent_consume, cluster.bootstrap("rack-0"), topic, ends
    )
    uncommitted.check(everything)


async def test_an_open_transaction_holds_the_last_stable_offset(cluster: KafkaCluster) -> None:
    await cluster.create_topic("open", 1)
    producer = Producer(
        {"bootstrap.servers": cluster.bootstrap("rack-0"), "transactional.id": "tx-open"}
    )
    await asyncio.to_thread(producer.init_transactions, 30)
    producer.begin_transaction()
    for r in range(10):
        producer.produce("open", value=value("open", r), partition=0)
    assert await asyncio.to_thread(producer.flush, 30) == 0
    client = await WireClient.connect(cluster.servers[2])
    try:
        (partition,) = (
            (await client.request(fetch_request("open", 1, isolation_level=1)))
            .responses[0]
            .partitions
        )
        assert (partition.high_watermark, partition.last_stable_offset) == (10, 0)
        assert not partition.records  # nothing at or past the LSO is returned
        await asyncio.to_thread(producer.commit_transaction, 30)
        (partition,) = (
            (await client.request(fetch_request("open", 1, isolation_level=1)))
            .responses[0]
            .partitions
        )
        assert (partition.high_watermark, partition.last_stable_offset) == (11, 11)
        assert partition.aborted_transactions == ()
        assert len(partition.records) > 0
    finally:
        await client.close()


async def _stable_and_end_offsets(cluster: KafkaCluster, topic: str) -> list[tuple[int, int]]:
    """(last stable offset, high watermark) of each partition of `topic`."""
    broker = cluster.live[0].broker
    partitions = [TopicPartition(topic, p) for p in range(PARTITIONS)]
    latest = {tp: OffsetSpec.LATEST for tp in partitions}
    stable = await broker.list_offsets(latest, isolation_level=IsolationLevel.READ_COMMITTED)
    ends = await broker.list_offsets(latest)
    return [(stable[tp].offset, ends[tp].offset) for tp in partitions]


async def test_a_transaction_ends_after_one_of_its_topics_was_deleted(
    cluster: KafkaCluster,
) -> None:
    """librdkafka commits (and then aborts) across a topic deleted mid-transaction."""
    await cluster.create_topic("kept", PARTITIONS)
    await cluster.create_topic("deleted", PARTITIONS)
    producer = Producer(
        {"bootstrap.servers": cluster.bootstrap("rack-0"), "transactional.id": "tx-deleted"}
    )
    await asyncio.to_thread(producer.init_transactions, 30)
    for commit in (True, False):
        producer.begin_transaction()
        for topic in ("kept", "deleted"):
            for p in range(PARTITIONS):
                producer.produce(topic, value=value(topic, p), partition=p)
        assert await asyncio.to_thread(producer.flush, 30) == 0
        if commit:
            await cluster.coordinator.delete_topics(["deleted"])
            await asyncio.to_thread(producer.commit_transaction, 30)
        else:
            await asyncio.to_thread(producer.abort_transaction, 30)
        # One record and one marker per transaction on each partition of the kept topic.
        offsets = await _stable_and_end_offsets(cluster, "kept")
        assert offsets == [(2, 2)] * PARTITIONS if commit else [(4, 4)] * PARTITIONS
        if commit:
            # The deleted topic comes back (empty) when the next transaction writes to it.
            await cluster.create_topic("deleted", PARTITIONS)
    assert await _stable_and_end_offsets(cluster, "deleted") == [(2, 2)] * PARTITIONS
    read = await asyncio.to_thread(
        confluent_consume,
        cluster.bootstrap("rack-1"),
        "kept",
        dict.fromkeys(range(PARTITIONS), 4),
        isolation="read_committed",
    )
    read.check({"kept": range(PARTITIONS)})


def _init_transactions(bootstrap: str, timeout_ms: int) -> KafkaError | None:
    producer = Producer(
        {
            "bootstrap.servers": bootstrap,
            "transactional.id": f"timeout-{timeout_ms}",
            "transaction.timeout.ms": timeout_ms,
        }
    )
    try:
        producer.init_transactions(30)
    except KafkaException as e:
        error: KafkaError = e.args[0]
        return error
    return None


async def test_a_transaction_timeout_above_the_maximum_is_refused_as_kafka_refuses_it() -> None:
    """librdkafka's test 0103: `transaction.timeout.ms` above the broker's
    `transaction.max.timeout.ms` fails init_transactions with INVALID_TRANSACTION_TIMEOUT."""
    coordinator = InMemoryBatchCoordinator()
    config = properties_config({"transaction.max.timeout.ms": "60000"}, server_config())
    async with local_cluster(coordinator, server_config=config) as cluster:
        bootstrap = cluster.bootstrap()
        refused = await asyncio.to_thread(_init_transactions, bootstrap, 60_001)
        assert refused is not None
        assert refused.code() == KafkaError.INVALID_TRANSACTION_TIMEOUT, refused
        assert await asyncio.to_thread(_init_transactions, bootstrap, 60_000) is None
    await coordinator.close()
