"""One leader epoch for the whole cluster: every process advertises the coordinator's
membership version, whenever it joined, and the epoch never goes back.

- Unit (`ClusterView`s over one coordinator, as processes are): views that joined at
  different times, after a view of brokers that came and went, advertise the same epoch once
  each read the registry; a view whose broker joined, left (unannounced) or lapsed is one
  ahead until the registry records the change, and then equal again.
- Over the wire: Fetch, ListOffsets and OffsetForLeaderEpoch check a client's
  `current_leader_epoch` as Kafka does (FENCED_LEADER_EPOCH below, UNKNOWN_LEADER_EPOCH above),
  and OffsetForLeaderEpoch answers each epoch's end (`_handlers._epochs`).
"""

from __future__ import annotations

import dataclasses
from collections.abc import AsyncIterator
from typing import Any

import kio.schema.list_offsets.v7.request as list_offsets_v7
import kio.schema.offset_for_leader_epoch.v4.request as ofle_v4
import pytest
from kio.schema.errors import ErrorCode as WireError
from kio.schema.metadata.v12.request import MetadataRequest, MetadataRequestTopic
from kio.schema.types import BrokerId, TopicName
from kio.static.primitive import i8, i32, i64

from diskless import ManualClock, TopicPartition
from diskless._types import ErrorCode
from diskless.coordinator import InMemoryBatchCoordinator
from diskless.kafka_server import KafkaCluster
from diskless.kafka_server._coordination.cluster_view import BrokerAddress, ClusterView
from testkit.batches import build_batch
from testkit.cluster import local_cluster, server_config
from testkit.wire import WireClient, fetch_request

TTL_MS = 9_000


def _address(broker_id: int) -> BrokerAddress:
    return BrokerAddress(broker_id, "127.0.0.1", 9000 + broker_id, None)


async def _join(view: ClusterView, coordinator: InMemoryBatchCoordinator, broker_id: int) -> None:
    view.join(_address(broker_id), await coordinator.register_broker(broker_id))
    await view.renew()


async def _renewing(clock: ManualClock, view: ClusterView, seconds: float) -> None:
    """`seconds` pass while `view`'s process renews as it does (every third of the TTL)."""
    for _ in range(int(seconds * 1000 // (TTL_MS // 3))):
        await clock.advance(TTL_MS / 3000)
        await view.renew()


async def test_views_that_joined_at_different_times_advertise_one_epoch() -> None:
    clock = ManualClock()
    coordinator = InMemoryBatchCoordinator(clock=clock)
    first, second, third = (ClusterView("c", coordinator, ttl_ms=TTL_MS) for _ in range(3))
    try:
        await _join(first, coordinator, 0)
        # Brokers come and go in `first`'s process: each change moves its epoch.
        seen = [first.generation]
        await _join(first, coordinator, 1)
        seen.append(first.generation)
        first.leave(1)
        seen.append(first.generation)  # ahead of the registry, which still lists 1
        await first.withdraw(_address(1), 1)
        await first.renew()
        seen.append(first.generation)
        assert seen == sorted(seen) and seen[1] > seen[0] and seen[2] > seen[1]
        assert seen[3] == seen[2], "the registry recorded the change the view was ahead by"

        await _renewing(clock, first, 30.0)  # a process that starts later
        await _join(second, coordinator, 2)
        await first.renew()
        assert first.generation == second.generation > seen[-1]

        # A third process that only reads (its broker not yet announced) agrees too.
        await third.renew()
        assert third.generation == first.generation

        # `second`'s process dies: once its registration expires and a renewal of `first`
        # records that, both remaining views advertise the same, higher epoch.
        before = first.generation
        await _renewing(clock, first, TTL_MS / 1000 + 3)
        await third.renew()
        assert [b.broker_id for b in first.brokers()] == [0]
        assert first.generation == third.generation > before
    finally:
        for view in (first, second, third):
            await view.close()
        await coordinator.close()


async def test_a_view_behind_catches_up_when_asked() -> None:
    coordinator = InMemoryBatchCoordinator()
    early, late = ClusterView("c", coordinator), ClusterView("c", coordinator)
    try:
        await _join(early, coordinator, 0)
        await _join(late, coordinator, 1)
        assert late.generation > early.generation
        early.catch_up()  # as a client showing `late`'s epoch to `early` does
        early.catch_up()  # (one read at a time)
        await early.close()  # waits for the read under way
        assert early.generation == late.generation
    finally:
        await early.close()
        await late.close()
        await coordinator.close()


async def test_a_view_whose_broker_was_fenced_is_not_ahead_of_the_cluster() -> None:
    """A broker fenced by a newer incarnation of its id in another process left this one, but
    the registry lists that newer incarnation: no change the coordinator has yet to record, so
    both processes name the same epoch."""
    coordinator = InMemoryBatchCoordinator()
    old, new = ClusterView("c", coordinator), ClusterView("c", coordinator)
    try:
        await _join(old, coordinator, 0)
        await _join(old, coordinator, 1)
        await _join(new, coordinator, 1)  # a newer incarnation of broker 1, elsewhere
        await old.renew()  # its renewal of broker 1 is refused: it leaves
        assert [b.broker_id for b in old.brokers()] == [0]
        await new.renew()
        assert old.generation == new.generation
    finally:
        await old.close()
        await new.close()
        await coordinator.close()


# --- the epoch checks of Fetch, ListOffsets and OffsetForLeaderEpoch, over the wire ---------------
TOPIC = "epochs"
RECORDS = 5


def _fetch(epoch: int) -> Any:
    request = fetch_request(TOPIC, 1)
    (topic,) = request.topics
    (partition,) = topic.partitions
    partition = dataclasses.replace(partition, current_leader_epoch=i32(epoch))
    return dataclasses.replace(
        request, topics=(dataclasses.replace(topic, partitions=(partition,)),)
    )


def _list_offsets(epoch: int) -> list_offsets_v7.ListOffsetsRequest:
    return list_offsets_v7.ListOffsetsRequest(
        replica_id=BrokerId(-1),
        isolation_level=i8(0),
        topics=(
            list_offsets_v7.ListOffsetsTopic(
                name=TopicName(TOPIC),
                partitions=(
                    list_offsets_v7.ListOffsetsPartition(
                        partition_index=i32(0), current_leader_epoch=i32(epoch), timestamp=i64(-1)
                    ),
                ),
            ),
        ),
    )


def _epoch_ends(*asked: tuple[str, int, int]) -> ofle_v4.OffsetForLeaderEpochRequest:
    """(topic, current leader epoch, leader epoch) of partition 0 of each topic."""
    return ofle_v4.OffsetForLeaderEpochRequest(
        replica_id=BrokerId(-1),
        topics=tuple(
            ofle_v4.OffsetForLeaderTopic(
                topic=TopicName(topic),
                partitions=(
                    ofle_v4.OffsetForLeaderPartition(
                        partition=i32(0), current_leader_epoch=i32(current), leader_epoch=i32(epoch)
                    ),
                ),
            )
            for topic, current, epoch in asked
        ),
    )


@pytest.fixture
async def cluster() -> AsyncIterator[KafkaCluster]:
    async with local_cluster(brokers=1, racks=1, server_config=server_config()) as running:
        await running.create_topic(TOPIC, 1)
        broker = running.live[0].broker
        (result,) = (
            await broker.produce({TopicPartition(TOPIC, 0): build_batch([b"r"] * RECORDS)})
        ).values()
        assert result.error is ErrorCode.NONE
        yield running


async def _ask(cluster: KafkaCluster, request: Any) -> Any:
    client = await WireClient.connect(cluster.servers[0])
    try:
        return await client.request(request)
    finally:
        await client.close()


async def _metadata_epoch(cluster: KafkaCluster) -> int:
    response = await _ask(
        cluster,
        MetadataRequest(
            topics=(MetadataRequestTopic(topic_id=None, name=TopicName(TOPIC)),),
            allow_auto_topic_creation=False,
            include_topic_authorized_operations=False,
        ),
    )
    (partition,) = response.topics[0].partitions
    return int(partition.leader_epoch)


async def test_fetch_answers_a_stale_epoch_as_kafka_and_names_the_current_leader(
    cluster: KafkaCluster,
) -> None:
    epoch = await _metadata_epoch(cluster)
    assert epoch >= 1, "the broker's announcement moved the version"
    answers = {}
    for asked in (-1, epoch, epoch - 1, epoch + 1):
        (partition,) = (await _ask(cluster, _fetch(asked))).responses[0].partitions
        leader = (
            int(partition.current_leader.leader_id),
            int(partition.current_leader.leader_epoch),
        )
        answers[asked] = (partition.error_code, len(partition.records or b"") > 0, leader)
    assert answers == {
        -1: (WireError.none, True, (-1, -1)),
        epoch: (WireError.none, True, (-1, -1)),
        epoch - 1: (WireError.fenced_leader_epoch, False, (0, epoch)),
        epoch + 1: (WireError.unknown_leader_epoch, False, (0, epoch)),
    }


async def test_list_offsets_answers_a_stale_epoch_as_kafka(cluster: KafkaCluster) -> None:
    epoch = await _metadata_epoch(cluster)
    answers = {}
    for asked in (-1, epoch, epoch - 1, epoch + 1):
        (partition,) = (await _ask(cluster, _list_offsets(asked))).topics[0].partitions
        answers[asked] = (partition.error_code, int(partition.offset), int(partition.leader_epoch))
    assert answers[-1] == answers[epoch] == (WireError.none, RECORDS, epoch)
    assert answers[epoch - 1][0] == WireError.fenced_leader_epoch
    assert answers[epoch + 1][0] == WireError.unknown_leader_epoch


async def test_offset_for_leader_epoch_answers_the_log_end_for_every_epoch_up_to_the_current(
    cluster: KafkaCluster,
) -> None:
    epoch = await _metadata_epoch(cluster)
    asked = [
        (TOPIC, -1, epoch),  # the current epoch: the log end offset
        (TOPIC, epoch, 0),  # an older epoch: no log ever diverged, so the log end too
        (TOPIC, -1, epoch + 7),  # above the current one: the largest at or below it
        (TOPIC, epoch, -1),  # no epoch: undefined, as Kafka
        (TOPIC, epoch - 1, epoch),  # a client behind the cluster: fenced
        (TOPIC, epoch + 1, epoch),  # a client ahead of this process: unknown, retried
        ("missing", -1, epoch),
    ]
    answers = []
    for one in asked:
        response = await _ask(cluster, _epoch_ends(one))
        (partition,) = response.topics[0].partitions
        answers.append(
            (partition.error_code, int(partition.leader_epoch), int(partition.end_offset))
        )
    assert answers == [
        (WireError.none, epoch, RECORDS),
        (WireError.none, 0, RECORDS),
        (WireError.none, epoch, RECORDS),
        (WireError.none, -1, -1),
        (WireError.fenced_leader_epoch, -1, -1),
        (WireError.unknown_leader_epoch, -1, -1),
        (WireError.unknown_topic_or_partition, -1, -1),
    ]
