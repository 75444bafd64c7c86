"""Integration: the cluster and transaction admin APIs through real admin clients, against two
broker processes over one SQLite batch coordinator.

- DescribeCluster (confluent-kafka, kafka-python; aiokafka's reads Metadata): both processes list
  both brokers with their racks, one cluster id, a live controller, and KIP-430's cluster
  operations when asked.
- DescribeTopicPartitions (kafka-python, pages through a cursor) answers each partition as
  Metadata does (leader, epoch, replicas, ISR from the same broker); confluent-kafka's
  describe_topics (Metadata v12, asking for KIP-430's operations) carries the topic's
  authorized operations; a missing topic is unknown.
- DescribeLogDirs: no log directory on any broker. ElectLeaders: no election is ever needed.
- A transaction left open and one committed: ListTransactions across the brokers lists each id
  once, with Kafka's state names and filters; DescribeTransactions and DescribeProducers
  answer from the coordinator's records.
"""

from __future__ import annotations

import asyncio
import datetime
import time
from collections.abc import Iterator
from typing import Any, Final

import pytest
from aiokafka.admin import AIOKafkaAdminClient
from confluent_kafka import ElectionType, KafkaError, Producer, TopicCollection
from confluent_kafka import TopicPartition as CkTopicPartition
from confluent_kafka.admin import AclOperation, AdminClient
from kafka import KafkaAdminClient
from kafka import TopicPartition as KpTopicPartition
from kafka.admin import TransactionState
from kio.schema.describe_cluster.v1 import request as describe_cluster_v1
from kio.schema.describe_topic_partitions.v0 import request as dtp_v0
from kio.schema.elect_leaders.v2 import request as elect_leaders_v2
from kio.schema.errors import ErrorCode as WireError
from kio.schema.list_transactions.v1 import request as list_transactions_v1
from kio.schema.metadata.v12 import request as metadata_v12
from kio.static.primitive import i8, i32

from diskless.kafka_server._protocol.fields import build
from testkit.processes import BrokerProcess, bootstrap, broker_processes
from testkit.wire import ask
from tests.kafka_server._helpers import TIMEOUT_S

TOPIC: Final = "orders"
PARTITIONS: Final = 3
CLUSTER_OPERATIONS: Final = {
    AclOperation.CREATE,
    AclOperation.CLUSTER_ACTION,
    AclOperation.DESCRIBE_CONFIGS,
    AclOperation.ALTER_CONFIGS,
    AclOperation.IDEMPOTENT_WRITE,
    AclOperation.ALTER,
    AclOperation.DESCRIBE,
}
TOPIC_OPERATIONS: Final = {
    AclOperation.READ,
    AclOperation.WRITE,
    AclOperation.CREATE,
    AclOperation.DESCRIBE,
    AclOperation.DELETE,
    AclOperation.ALTER,
    AclOperation.DESCRIBE_CONFIGS,
    AclOperation.ALTER_CONFIGS,
}


@pytest.fixture(scope="module")
def brokers(tmp_path_factory: pytest.TempPathFactory) -> Iterator[list[BrokerProcess]]:
    """Shared by the module's tests, which change nothing another reads."""
    tmp_path = tmp_path_factory.mktemp("cluster")
    options = [
        "--data-dir", str(tmp_path / "data"),
        "--topic", f"{TOPIC}:{PARTITIONS}",
        "--no-lifecycle",
    ]  # fmt: skip
    with broker_processes(2, tmp_path, options) as started:
        _wait_for_both(started)
        yield started


def _wait_for_both(brokers: list[BrokerProcess]) -> None:
    """Until each process lists both brokers (a process learns of one started after it at its
    next registry read)."""
    body = build(
        describe_cluster_v1.DescribeClusterRequest,
        include_cluster_authorized_operations=False,
        endpoint_type=i8(1),
    )
    deadline = time.monotonic() + 30
    for broker in brokers:
        while len(ask(broker.address, body, TIMEOUT_S).brokers) < len(brokers):
            assert time.monotonic() < deadline, "the processes never saw each other"
            time.sleep(0.1)


def test_describe_cluster_lists_every_live_broker(brokers: list[BrokerProcess]) -> None:
    seen = []
    for broker in brokers:
        admin = AdminClient({"bootstrap.servers": broker.address, "broker.address.family": "v4"})
        described = admin.describe_cluster(include_authorized_operations=True).result(TIMEOUT_S)
        seen.append(described.cluster_id)
        assert sorted((n.id, n.port, n.rack) for n in described.nodes) == [
            (b.broker_id, b.port, f"rack-{b.broker_id}") for b in brokers
        ]
        assert described.controller.id in {b.broker_id for b in brokers}
        assert set(described.authorized_operations) == CLUSTER_OPERATIONS
        plain = AdminClient({"bootstrap.servers": broker.address, "broker.address.family": "v4"})
        unasked = plain.describe_cluster().result(TIMEOUT_S)
        assert unasked.authorized_operations is None
    assert len(set(seen)) == 1

    client = KafkaAdminClient(bootstrap_servers=bootstrap(brokers))
    try:
        described_kp = client.describe_cluster()
    finally:
        client.close()
    assert described_kp["cluster_id"] == seen[0]
    assert sorted(b["broker_id"] for b in described_kp["brokers"]) == [0, 1]
    assert all(not b["is_fenced"] for b in described_kp["brokers"])
    assert described_kp["controller_id"] in (0, 1)


def test_only_brokers_are_described(brokers: list[BrokerProcess]) -> None:
    for endpoint, error in (
        (2, WireError.mismatched_endpoint_type),
        (7, WireError.unsupported_endpoint_type),
    ):
        body = build(
            describe_cluster_v1.DescribeClusterRequest,
            include_cluster_authorized_operations=False,
            endpoint_type=i8(endpoint),
        )
        answer = ask(brokers[0].address, body, TIMEOUT_S)
        assert (answer.error_code, answer.brokers) == (error, ())


def _metadata(address: str) -> dict[int, tuple[int, int, tuple[int, ...], tuple[int, ...]]]:
    topic = build(metadata_v12.MetadataRequestTopic, topic_id=None, name=TOPIC)
    body = build(
        metadata_v12.MetadataRequest,
        topics=(topic,),
        allow_auto_topic_creation=False,
        include_topic_authorized_operations=False,
    )
    (answer,) = ask(address, body, TIMEOUT_S).topics
    return {
        int(p.partition_index): (p.leader_id, p.leader_epoch, p.replica_nodes, p.isr_nodes)
        for p in answer.partitions
    }


def _pages(address: str, limit: int, topics: tuple[str, ...]) -> list[Any]:
    """Every DescribeTopicPartitions page, following the cursor."""
    pages = []
    cursor = None
    while True:
        body = build(
            dtp_v0.DescribeTopicPartitionsRequest,
            topics=tuple(build(dtp_v0.TopicRequest, name=n) for n in topics),
            response_partition_limit=i32(limit),
            cursor=cursor,
        )
        page = ask(address, body, TIMEOUT_S)
        pages.append(page)
        if page.next_cursor is None:
            return pages
        cursor = build(
            dtp_v0.Cursor,
            topic_name=page.next_cursor.topic_name,
            partition_index=page.next_cursor.partition_index,
        )


def test_describe_topic_partitions_pages_through_metadatas_answer(
    brokers: list[BrokerProcess],
) -> None:
    for broker in brokers:
        expected = _metadata(broker.address)
        pages = _pages(broker.address, 2, (TOPIC, "missing"))
        # by name: "missing" first, then two of the topic's partitions; the third on page 2
        assert [[t.name for t in p.topics] for p in pages] == [["missing", TOPIC], [TOPIC]]
        assert pages[0].next_cursor.topic_name == TOPIC
        assert pages[0].next_cursor.partition_index == 2
        partitions = [p for page in pages for t in page.topics for p in t.partitions]
        assert {
            int(p.partition_index): (p.leader_id, p.leader_epoch, p.replica_nodes, p.isr_nodes)
            for p in partitions
        } == expected
        assert all(p.error_code == WireError.none for p in partitions)
        missing = pages[0].topics[0]
        assert (missing.name, missing.error_code) == (
            "missing",
            WireError.unknown_topic_or_partition,
        )

    client = KafkaAdminClient(bootstrap_servers=brokers[0].address)
    try:
        first = client.describe_topic_partitions([TOPIC], response_partition_limit=1)
        rest = client.describe_topic_partitions(
            [TOPIC], response_partition_limit=10, cursor=first["next_cursor"]
        )
    finally:
        client.close()
    assert first["next_cursor"] == {"topic_name": TOPIC, "partition_index": 1}
    assert [p["partition_index"] for p in rest["topics"][0]["partitions"]] == [1, 2]
    assert rest["next_cursor"] is None
    (topic,) = first["topics"]
    assert topic["topic_authorized_operations"] == sum(1 << op.value for op in TOPIC_OPERATIONS)


def test_a_cursor_outside_the_topics_named_is_invalid(brokers: list[BrokerProcess]) -> None:
    body = build(
        dtp_v0.DescribeTopicPartitionsRequest,
        topics=(build(dtp_v0.TopicRequest, name=TOPIC),),
        response_partition_limit=i32(10),
        cursor=build(dtp_v0.Cursor, topic_name="elsewhere", partition_index=i32(0)),
    )
    answer = ask(brokers[0].address, body, TIMEOUT_S)
    assert [t.error_code for t in answer.topics] == [WireError.invalid_request]


def test_describe_topics_carries_the_topics_operations(brokers: list[BrokerProcess]) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap(brokers), "broker.address.family": "v4"})
    described = admin.describe_topics(
        TopicCollection([TOPIC, "missing"]), include_authorized_operations=True
    )
    orders = described[TOPIC].result(TIMEOUT_S)
    assert [p.id for p in orders.partitions] == list(range(PARTITIONS))
    assert all(
        p.leader is not None and [r.id for r in p.isr] == [p.leader.id] for p in orders.partitions
    )
    assert set(orders.authorized_operations) == TOPIC_OPERATIONS
    with pytest.raises(Exception) as missing:
        described["missing"].result(TIMEOUT_S)
    assert missing.value.args[0].code() == KafkaError.UNKNOWN_TOPIC_OR_PART


def test_no_broker_has_a_log_dir_and_no_election_is_needed(
    brokers: list[BrokerProcess],
) -> None:
    client = KafkaAdminClient(bootstrap_servers=bootstrap(brokers))
    try:
        dirs = client.describe_log_dirs()
    finally:
        client.close()
    assert sorted(d["broker"] for d in dirs) == [0, 1]
    assert all(d["log_dirs"] == [] for d in dirs)

    admin = AdminClient({"bootstrap.servers": bootstrap(brokers), "broker.address.family": "v4"})
    elected = admin.elect_leaders(
        ElectionType.PREFERRED, [CkTopicPartition(TOPIC, 0), CkTopicPartition(TOPIC, 9)]
    ).result(TIMEOUT_S)
    assert {tp.partition: error.code() for tp, error in elected.items()} == {
        0: KafkaError.ELECTION_NOT_NEEDED,
        9: KafkaError.UNKNOWN_TOPIC_OR_PART,
    }
    for election in (0, 1):  # preferred, unclean: every partition, none needing an election
        body = build(
            elect_leaders_v2.ElectLeadersRequest,
            election_type=i8(election),
            topic_partitions=None,
            timeout=datetime.timedelta(seconds=TIMEOUT_S),
        )
        answer = ask(brokers[1].address, body, TIMEOUT_S)
        assert answer.error_code == WireError.none
        assert [r.partition_result for r in answer.replica_election_results] == [()]


def _transactional(address: str, transactional_id: str) -> Producer:
    producer = Producer({"bootstrap.servers": address, "transactional.id": transactional_id})
    producer.init_transactions(TIMEOUT_S)
    producer.begin_transaction()
    producer.produce(TOPIC, b"in a transaction", partition=1)
    assert producer.flush(TIMEOUT_S) == 0
    return producer


def test_transactions_are_listed_once_and_described(brokers: list[BrokerProcess]) -> None:
    done = _transactional(brokers[0].address, "txn-done")
    done.commit_transaction(TIMEOUT_S)
    open_ = _transactional(brokers[1].address, "txn-open")
    client = KafkaAdminClient(bootstrap_servers=bootstrap(brokers))
    try:
        per_broker = client.list_transactions()
        listed = [t for listings in per_broker.values() for t in listings]
        assert sorted((t.transactional_id, t.state) for t in listed) == [
            ("txn-done", TransactionState.COMPLETE_COMMIT),
            ("txn-open", TransactionState.ONGOING),
        ]
        ongoing = client.list_transactions(state_filters=["Ongoing"])
        assert [t.transactional_id for ts in ongoing.values() for t in ts] == ["txn-open"]
        (open_pid,) = [t.producer_id for t in listed if t.transactional_id == "txn-open"]
        by_pid = client.list_transactions(producer_id_filters=[open_pid])
        assert [t.transactional_id for ts in by_pid.values() for t in ts] == ["txn-open"]
        older = client.list_transactions(duration_filter_ms=3_600_000)
        assert [t for ts in older.values() for t in ts] == []

        described = client.describe_transactions(["txn-open", "txn-done"])
        assert described["txn-open"].state is TransactionState.ONGOING
        assert described["txn-open"].producer_id == open_pid
        assert described["txn-open"].topic_partitions == {KpTopicPartition(TOPIC, 1)}
        assert described["txn-open"].transaction_start_time_ms > 0
        assert described["txn-done"].state is TransactionState.COMPLETE_COMMIT
        assert described["txn-done"].topic_partitions == set()

        producers = client.describe_producers([KpTopicPartition(TOPIC, 1)])
        (state,) = producers.values()
        active = {p.producer_id: p for p in state.active_producers}
        assert active[open_pid].current_transaction_start_offset >= 0
        assert active[open_pid].last_sequence == 0
    finally:
        client.close()
    open_.abort_transaction(TIMEOUT_S)

    body = build(
        list_transactions_v1.ListTransactionsRequest,
        state_filters=("CompleteAbort", "Bogus"),
        producer_id_filters=(),
        duration_filter=-1,
    )
    answers = [ask(b.address, body, TIMEOUT_S) for b in brokers]
    assert all(a.unknown_state_filters == ("Bogus",) for a in answers)
    assert [t.transactional_id for a in answers for t in a.transaction_states] == ["txn-open"]


async def test_aiokafkas_view_of_the_cluster_agrees(brokers: list[BrokerProcess]) -> None:
    """aiokafka's describe_cluster reads Metadata: the same brokers and cluster id as
    DescribeCluster answers, and a live controller."""
    body = build(
        describe_cluster_v1.DescribeClusterRequest,
        include_cluster_authorized_operations=False,
        endpoint_type=i8(1),
    )
    for broker in brokers:
        expected = await asyncio.to_thread(ask, broker.address, body, TIMEOUT_S)
        admin = AIOKafkaAdminClient(bootstrap_servers=broker.address)
        await admin.start()
        try:
            described = await admin.describe_cluster()
        finally:
            await admin.close()
        assert described["cluster_id"] == expected.cluster_id
        assert sorted((b["node_id"], b["port"], b["rack"]) for b in described["brokers"]) == sorted(
            (b.broker_id, b.port, b.rack) for b in expected.brokers
        )
        # Each broker names itself controller (Kafka's brokers name any live broker), and
        # aiokafka may have asked the other one.
        assert described["controller_id"] in {b.broker_id for b in expected.brokers}


def test_every_topic_a_partition_a_page_at_the_least(brokers: list[BrokerProcess]) -> None:
    """No topic named: every topic; a limit below one is one (Kafka's bounds)."""
    pages = _pages(brokers[0].address, 0, ())
    assert [
        [(t.name, [p.partition_index for p in t.partitions]) for t in page.topics] for page in pages
    ] == [[(TOPIC, [p])] for p in range(PARTITIONS)]
    body = build(
        dtp_v0.DescribeTopicPartitionsRequest,
        topics=(),
        response_partition_limit=i32(10),
        cursor=build(dtp_v0.Cursor, topic_name=TOPIC, partition_index=i32(-1)),
    )
    assert ask(brokers[0].address, body, TIMEOUT_S).topics == ()
