"""A broker whose registration may have lapsed stops naming itself a partition's leader.

- Unit (`ClusterView` over a `FaultyBatchCoordinator`): while its renewals fail for longer than
  the session timeout, a broker names the live brokers of its last view as the leaders instead
  of itself (still listing itself), at the cluster's leader epoch (its process cannot know
  whether the coordinator saw it lapse, so it does not raise the epoch on its own: clients take
  new leaders of an equal epoch); once a renewal lands it names itself again, and the renewal
  moves the cluster's epoch. With no other broker, its partitions have no leader
  (LEADER_NOT_AVAILABLE).
- Integration: two clusters (processes) over one coordinator, one of them cut off from the
  coordinator's writes (its renewals and commits fail, its reads answer). Its Metadata names
  only the other broker, and a real producer bootstrapped from it alone has its records
  acknowledged through the other broker while the cut lasts; a produce sent straight to it is
  answered NOT_LEADER_OR_FOLLOWER (clients refresh their metadata), not written.
"""

from __future__ import annotations

import asyncio
import datetime
from collections.abc import Callable
from typing import Any, Final

from confluent_kafka import Producer
from kio.schema.errors import ErrorCode as WireError
from kio.schema.metadata.v12.request import MetadataRequest, MetadataRequestTopic
from kio.schema.produce.v9 import request as produce_v9
from kio.schema.types import TopicName
from kio.static.primitive import i16, i32

from diskless import TopicPartition
from diskless.coordinator import CallFaults, FaultyBatchCoordinator, InMemoryBatchCoordinator
from diskless.kafka_server import KafkaCluster, ServerConfig
from diskless.kafka_server._coordination.cluster_view import BrokerAddress, ClusterView
from diskless.storage import MemoryObjectStore
from testkit.batches import build_batch
from testkit.cluster import broker_config
from testkit.wire import WireClient

TTL_MS: Final = 300
"""The session timeout: short, so that a registration lapses soon."""
WAIT_S: Final = 30.0
PARTITIONS: Final = 16
TOPIC: Final = "orders"
TPS: Final = [TopicPartition(TOPIC, p) for p in range(PARTITIONS)]
FAILING: Final = CallFaults(fail_rate=1.0)


async def _until(condition: Callable[[], bool], what: str) -> None:
    loop = asyncio.get_running_loop()
    deadline = loop.time() + WAIT_S
    while not condition():
        assert loop.time() < deadline, what
        await asyncio.sleep(0.01)


async def test_a_broker_whose_registration_may_have_lapsed_names_the_others() -> None:
    inner = InMemoryBatchCoordinator()
    faulty = FaultyBatchCoordinator(inner, writes=FAILING, reads=FAILING)
    faulty.enabled = False
    view = ClusterView("c", faulty, ttl_ms=TTL_MS)
    own, other = await inner.register_broker(0), await inner.register_broker(1)
    assert await inner.announce_broker(1, other, "127.0.0.1", 9001, None, 3_600_000)
    view.join(BrokerAddress(0, "127.0.0.1", 9000, None), own)
    assert set(view.leaders(TPS, None).values()) == {0}, "not lapsed before its first renewal"
    await view.renew()
    before = view.leaders(TPS, None)
    assert set(before.values()) == {0, 1}
    generation = view.generation

    faulty.enabled = True  # cut off: its renewals fail
    await _until(lambda: bool(view.lapsed()), "the registration lapsing")
    assert view.lapsed() == {0}
    assert set(view.leaders(TPS, None).values()) == {1}
    assert view.generation == generation, "no epoch the coordinator may never reach"
    assert [b.broker_id for b in view.brokers()] == [0, 1], "still listed"

    faulty.enabled = False  # back: the next renewal lands, and moves the cluster's epoch
    await view.renew()
    assert not view.lapsed()
    assert view.leaders(TPS, None) == before
    assert view.generation > generation
    assert view.generation == (await inner.membership()).version
    await view.close()
    await faulty.close()


async def test_a_lone_broker_whose_registration_may_have_lapsed_names_no_leader() -> None:
    inner = InMemoryBatchCoordinator()
    faulty = FaultyBatchCoordinator(inner, writes=FAILING, reads=FAILING)
    faulty.enabled = False
    view = ClusterView("c", faulty, ttl_ms=TTL_MS)
    view.join(BrokerAddress(0, "127.0.0.1", 9000, None), await inner.register_broker(0))
    await view.renew()
    faulty.enabled = True
    await _until(lambda: bool(view.lapsed()), "the registration lapsing")
    assert view.leaders(TPS, None) == {}
    faulty.enabled = False
    await view.renew()
    assert set(view.leaders(TPS, None).values()) == {0}
    await view.close()
    await faulty.close()


def _metadata() -> MetadataRequest:
    return MetadataRequest(
        topics=(MetadataRequestTopic(topic_id=None, name=TOPIC),),
        allow_auto_topic_creation=False,
        include_topic_authorized_operations=False,
    )


async def _leaders(cluster: KafkaCluster) -> dict[int, tuple[int, int]]:
    """Partition -> (leader, error) in the Metadata of the cluster's one broker."""
    (server,) = cluster.servers.values()
    client = await WireClient.connect(server)
    try:
        response: Any = await client.request(_metadata())
    finally:
        await client.close()
    (topic,) = response.topics
    assert topic.error_code == WireError.none
    return {p.partition_index: (p.leader_id, p.error_code) for p in topic.partitions}


async def _produce_straight_to(cluster: KafkaCluster) -> int:
    """One record to partition 0, sent to the cluster's one broker: the answer's code."""
    (server,) = cluster.servers.values()
    body = produce_v9.ProduceRequest(
        transactional_id=None,
        acks=i16(-1),
        timeout=datetime.timedelta(seconds=5),
        topic_data=(
            produce_v9.TopicProduceData(
                name=TopicName(TOPIC),
                partition_data=(
                    produce_v9.PartitionProduceData(index=i32(0), records=build_batch([b"v"])),
                ),
            ),
        ),
    )
    client = await WireClient.connect(server)
    try:
        response: Any = await client.request(body)
    finally:
        await client.close()
    ((code,),) = [[p.error_code for p in t.partition_responses] for t in response.responses]
    return int(code)


def _produce_all(bootstrap: str) -> list[str | None]:
    """One record to each partition, acknowledged (acks=all) or failed: each one's error."""
    producer = Producer(
        {
            "bootstrap.servers": bootstrap,
            "broker.address.family": "v4",
            "message.timeout.ms": 20_000,
        }
    )
    errors: list[str | None] = []
    for partition in range(PARTITIONS):
        producer.produce(
            TOPIC,
            b"v",
            partition=partition,
            on_delivery=lambda err, _msg: errors.append(None if err is None else str(err)),
        )
    producer.flush(60)
    return errors


async def test_a_broker_cut_off_from_the_coordinator_sends_clients_elsewhere() -> None:
    inner = InMemoryBatchCoordinator()
    faulty = FaultyBatchCoordinator(inner, writes=FAILING, commits=FAILING)
    faulty.enabled = False
    config = ServerConfig(broker_session_timeout_ms=TTL_MS * 2)
    store = MemoryObjectStore()
    cut = KafkaCluster(
        store, faulty, brokers=1, racks=1, broker_ids=[0],
        broker_config=broker_config(), server_config=config,
    )  # fmt: skip
    fine = KafkaCluster(
        store, inner, brokers=1, racks=1, broker_ids=[1],
        broker_config=broker_config(), server_config=config,
    )  # fmt: skip
    async with cut, fine:
        await inner.create_topic(TOPIC, PARTITIONS)
        await _until(lambda: len(cut.view.brokers()) == 2, "the processes seeing each other")
        leaders = await _leaders(cut)
        assert {leader for leader, _ in leaders.values()} == {0, 1}

        faulty.enabled = True
        await _until(lambda: bool(cut.view.lapsed()), "the cut broker's registration lapsing")
        leaders = await _leaders(cut)
        assert set(leaders.values()) == {(1, WireError.none)}, leaders
        assert await _produce_straight_to(cut) == WireError.not_leader_or_follower
        errors = await asyncio.to_thread(_produce_all, cut.bootstrap())
        assert errors == [None] * PARTITIONS, errors
        assert cut.view.lapsed(), "acknowledged through the other broker while cut off"

        faulty.enabled = False
        await _until(lambda: not cut.view.lapsed(), "the cut broker renewing again")
        leaders = await _leaders(cut)
        assert {leader for leader, _ in leaders.values()} == {0, 1}
