"""Committed group offsets live in the batch coordinator: they survive the process that took them.

A confluent-kafka consumer commits through one `KafkaCluster` over a SQLite file; that cluster
closes, a second one opens the same file, and a new consumer of the same group reads the offsets
back with OffsetFetch (`committed()`) and resumes from them.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from pathlib import Path

import kio.schema.offset_commit.v8.request as offset_commit_v8
import kio.schema.offset_fetch.v7.request as offset_fetch_v7
from confluent_kafka import Consumer, KafkaError, KafkaException, Producer
from confluent_kafka import TopicPartition as CkTopicPartition
from kio.schema.errors import ErrorCode as WireError
from kio.static.primitive import i32, i64

from diskless import ErrorCode, TopicPartition
from diskless._types import CommittedOffset, GroupOwnership
from diskless.coordinator import InMemoryBatchCoordinator, SqliteBatchCoordinator
from diskless.errors import CoordinatorUnavailableError
from diskless.storage import LocalObjectStore
from testkit.cluster import local_cluster, server_config
from testkit.wire import WireClient

GROUP = "durable-group"


def _commit(bootstrap: str, offsets: dict[int, int]) -> int:
    """Commit `offsets` for topic `t`, then one for a partition that does not exist; returns
    the error code the second commit failed with."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": GROUP})
    try:
        wanted = [CkTopicPartition("t", p, o) for p, o in offsets.items()]
        answered = consumer.commit(offsets=wanted, asynchronous=False)
        assert answered is not None
        assert [(tp.partition, tp.error) for tp in answered] == [(p, None) for p in offsets]
        try:
            consumer.commit(offsets=[CkTopicPartition("t", 99, 5)], asynchronous=False)
        except KafkaException as e:
            return int(e.args[0].code())
        return 0
    finally:
        consumer.close()


def _committed(bootstrap: str, partitions: int) -> dict[int, int]:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": GROUP})
    try:
        answered = consumer.committed(
            [CkTopicPartition("t", p) for p in range(partitions)], timeout=10
        )
        return {tp.partition: tp.offset for tp in answered}
    finally:
        consumer.close()


async def test_offsets_committed_through_one_process_are_read_through_the_next(
    tmp_path: Path,
) -> None:
    offsets = {0: 7, 1: 0, 2: 1234}
    first = SqliteBatchCoordinator(tmp_path / "coordinator.sqlite")
    store = LocalObjectStore(tmp_path / "objects")
    try:
        await first.create_topic("t", 3)
        async with local_cluster(
            first, store=store, brokers=2, server_config=server_config()
        ) as cluster:
            unknown = await asyncio.to_thread(_commit, cluster.bootstrap(), offsets)
    finally:
        await first.close()
    assert unknown == KafkaError.UNKNOWN_TOPIC_OR_PART

    second = SqliteBatchCoordinator(tmp_path / "coordinator.sqlite")
    try:
        async with local_cluster(
            second, store=store, brokers=2, server_config=server_config()
        ) as cluster:
            read_back = await asyncio.to_thread(_committed, cluster.bootstrap(), 4)
    finally:
        await second.close()
        await store.close()
    assert read_back == {**offsets, 3: -1001}  # -1001: librdkafka's OFFSET_INVALID, none stored


class _Unreachable(InMemoryBatchCoordinator):
    """The in-memory coordinator, with its group offsets unreachable while `down`."""

    down = False

    async def commit_offsets(
        self,
        group_id: str,
        offsets: Mapping[TopicPartition, CommittedOffset],
        fence: GroupOwnership | None = None,
    ) -> dict[TopicPartition, ErrorCode]:
        if self.down:
            raise CoordinatorUnavailableError("unreachable")
        return await super().commit_offsets(group_id, offsets, fence)

    async def fetch_offsets(self, group_id: str) -> dict[TopicPartition, CommittedOffset]:
        if self.down:
            raise CoordinatorUnavailableError("unreachable")
        return await super().fetch_offsets(group_id)


def _offset_commit(offset: int) -> offset_commit_v8.OffsetCommitRequest:
    partition = offset_commit_v8.OffsetCommitRequestPartition(
        partition_index=i32(0), committed_offset=i64(offset), committed_metadata=None
    )
    return offset_commit_v8.OffsetCommitRequest(
        group_id=GROUP,
        generation_id_or_member_epoch=i32(-1),
        member_id="",
        group_instance_id=None,
        topics=(offset_commit_v8.OffsetCommitRequestTopic(name="t", partitions=(partition,)),),
    )


async def test_a_failing_coordinator_answers_a_retriable_error() -> None:
    coordinator = _Unreachable()
    await coordinator.create_topic("t", 1)
    async with local_cluster(coordinator, brokers=1, server_config=server_config()) as cluster:
        await cluster.view.renew()  # the broker's registration is live: it may own groups
        assert await cluster.groups.locate(GROUP) == cluster.servers[0].address
        client = await WireClient.connect(cluster.servers[0])
        fetch = offset_fetch_v7.OffsetFetchRequest(
            group_id=GROUP, topics=None, require_stable=False
        )
        try:
            coordinator.down = True
            refused = await client.request(_offset_commit(3))
            unread = await client.request(fetch)
            coordinator.down = False
            accepted = await client.request(_offset_commit(4))
            read = await client.request(fetch)
        finally:
            await client.close()
    assert refused.topics[0].partitions[0].error_code == WireError.coordinator_not_available
    assert unread.error_code == WireError.coordinator_not_available
    assert accepted.topics[0].partitions[0].error_code == WireError.none
    assert read.error_code == WireError.none
    assert [(t.name, p.committed_offset) for t in read.topics for p in t.partitions] == [("t", 4)]
    await coordinator.close()


def _commit_with_epochs(bootstrap: str, group: str) -> None:
    """A plain commit (OffsetCommit) of partitions 0 and 1, and a transactional one
    (TxnOffsetCommit) of partition 2, each with a leader epoch but partition 1."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": group})
    producer = Producer({"bootstrap.servers": bootstrap, "transactional.id": f"{group}-txn"})
    try:
        wanted = [CkTopicPartition("t", 0, 7, leader_epoch=3), CkTopicPartition("t", 1, 8)]
        answered = consumer.commit(offsets=wanted, asynchronous=False)
        assert answered is not None and all(tp.error is None for tp in answered), answered
        producer.init_transactions(30)
        producer.begin_transaction()
        in_txn = [CkTopicPartition("t", 2, 42, leader_epoch=5)]
        producer.send_offsets_to_transaction(in_txn, consumer.consumer_group_metadata(), 30)
        producer.commit_transaction(30)
    finally:
        consumer.close()


def _committed_with_epochs(bootstrap: str, group: str) -> dict[int, tuple[int, int | None]]:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": group})
    try:
        answered = consumer.committed([CkTopicPartition("t", p) for p in range(3)], timeout=10)
        return {tp.partition: (tp.offset, tp.leader_epoch) for tp in answered}
    finally:
        consumer.close()


async def test_a_committed_leader_epoch_is_read_back(tmp_path: Path) -> None:
    """librdkafka's tests 0081 and 0103: the leader epoch committed with an offset, by a
    consumer or in a transaction, is what `committed()` answers, from the next process too."""
    store = LocalObjectStore(tmp_path / "objects")
    for _ in range(2):
        coordinator = SqliteBatchCoordinator(tmp_path / "coordinator.sqlite")
        try:
            async with local_cluster(
                coordinator, store=store, brokers=2, server_config=server_config()
            ) as cluster:
                if not await coordinator.describe_topics(["t"]):
                    await cluster.create_topic("t", 3)
                    await asyncio.to_thread(_commit_with_epochs, cluster.bootstrap(), "epochs")
                read_back = await asyncio.to_thread(
                    _committed_with_epochs, cluster.bootstrap(), "epochs"
                )
        finally:
            await coordinator.close()
        assert read_back == {0: (7, 3), 1: (8, None), 2: (42, 5)}
    await store.close()
