"""ShareFetch and ShareAcknowledge (KIP-932) over a socket, kio-encoded, against an in-process
broker: acquisition with `AcquiredRecords` and delivery counts, acknowledgements piggy-backed and
on their own, share sessions and their epochs, a fetch parked until records arrive or a lock runs
out, the delivery count limit, and read_committed."""

from __future__ import annotations

import asyncio
import datetime
import uuid
from collections.abc import AsyncIterator, Sequence
from typing import Any

import confluent_kafka
import kio.schema.share_acknowledge.v1.request as ack_v1
import kio.schema.share_fetch.v1.request as fetch_v1
import pytest
from kio.schema.errors import ErrorCode as WireError
from kio.static.primitive import i8, i32, i32Timedelta, i64

from diskless import TopicPartition
from diskless.coordinator import ConfigResourceType
from diskless.kafka_server import KafkaCluster, ServerConfig
from testkit.cluster import local_cluster, server_config
from testkit.wal import build_batch
from testkit.wire import WireClient
from tests.kafka_server._helpers import batches_of

TOPIC = "queue"
GROUP = "g"
GAP, ACCEPT, RELEASE, REJECT = 0, 1, 2, 3
LOCK_MS = 1_000


def _config(**changes: Any) -> ServerConfig:
    base = server_config()
    return ServerConfig(
        fetch_wait_ms_max=base.fetch_wait_ms_max * 20,
        group_share_record_lock_duration_ms=LOCK_MS,
        **changes,
    )


@pytest.fixture
async def cluster(request: pytest.FixtureRequest) -> AsyncIterator[KafkaCluster]:
    changes = getattr(request, "param", {})
    async with local_cluster(brokers=1, server_config=_config(**changes)) as running:
        await running.create_topic(TOPIC, 2)
        await set_group_configs(running, {"share.auto.offset.reset": "earliest"})
        yield running


async def set_group_configs(cluster: KafkaCluster, configs: dict[str, str]) -> None:
    await cluster.coordinator.alter_resource_configs(ConfigResourceType.GROUP, GROUP, configs)
    await cluster.group_configs.refresh()


async def produce(cluster: KafkaCluster, values: Sequence[bytes], partition: int = 0) -> None:
    broker = cluster.live[0].broker
    tp = TopicPartition(TOPIC, partition)
    (result,) = (await broker.produce({tp: build_batch(list(values))})).values()
    assert result.error.name == "NONE"


async def topic_id(cluster: KafkaCluster) -> uuid.UUID:
    (described,) = await cluster.live[0].broker.describe_topics([TOPIC])
    assert described.topic_id is not None
    return described.topic_id


def _acks(batches: Sequence[tuple[int, int, int]]) -> tuple[Any, ...]:
    return tuple(
        fetch_v1.AcknowledgementBatch(
            first_offset=i64(first), last_offset=i64(last), acknowledge_types=(i8(kind),)
        )
        for first, last, kind in batches
    )


async def share_fetch(
    client: WireClient,
    tid: uuid.UUID,
    epoch: int,
    *,
    member: str = "m1",
    partitions: Sequence[int] = (0,),
    acks: dict[int, Sequence[tuple[int, int, int]]] | None = None,
    forgotten: Sequence[int] = (),
    max_wait_ms: int = 0,
    max_records: int = 500,
) -> Any:
    acks = acks or {}
    named = list(dict.fromkeys([*partitions, *acks]))
    request = fetch_v1.ShareFetchRequest(
        group_id=GROUP,
        member_id=member,
        share_session_epoch=i32(epoch),
        max_wait=i32Timedelta.parse(datetime.timedelta(milliseconds=max_wait_ms)),
        min_bytes=i32(1),
        max_bytes=i32(1 << 20),
        max_records=i32(max_records),
        batch_size=i32(max_records),
        topics=(
            fetch_v1.FetchTopic(
                topic_id=tid,
                partitions=tuple(
                    fetch_v1.FetchPartition(
                        partition_index=i32(p),
                        acknowledgement_batches=_acks(acks.get(p, ())),
                    )
                    for p in named
                ),
            ),
        )
        if named
        else (),
        forgotten_topics_data=(
            (fetch_v1.ForgottenTopic(topic_id=tid, partitions=tuple(map(i32, forgotten))),)
            if forgotten
            else ()
        ),
    )
    return await client.request(request)


async def share_acknowledge(
    client: WireClient,
    tid: uuid.UUID,
    epoch: int,
    acks: dict[int, Sequence[tuple[int, int, int]]],
    *,
    member: str = "m1",
) -> Any:
    request = ack_v1.ShareAcknowledgeRequest(
        group_id=GROUP,
        member_id=member,
        share_session_epoch=i32(epoch),
        topics=(
            ack_v1.AcknowledgeTopic(
                topic_id=tid,
                partitions=tuple(
                    ack_v1.AcknowledgePartition(
                        partition_index=i32(p),
                        acknowledgement_batches=tuple(
                            ack_v1.AcknowledgementBatch(
                                first_offset=i64(first),
                                last_offset=i64(last),
                                acknowledge_types=(i8(kind),),
                            )
                            for first, last, kind in batches
                        ),
                    )
                    for p, batches in acks.items()
                ),
            ),
        ),
    )
    return await client.request(request)


def acquired(response: Any, partition: int = 0) -> list[tuple[int, int, int]]:
    """The (first, last, delivery count) ranges acquired in `partition`."""
    assert response.error_code == WireError.none, response.error_code
    return [
        (int(a.first_offset), int(a.last_offset), int(a.delivery_count))
        for topic in response.responses
        for p in topic.partitions
        if p.partition_index == partition
        for a in p.acquired_records
    ]


def partition_of(response: Any, partition: int = 0) -> Any:
    (found,) = [
        p for t in response.responses for p in t.partitions if p.partition_index == partition
    ]
    return found


def offsets_in(response: Any, partition: int = 0) -> list[int]:
    """The offsets of the batches returned for `partition` (every record of each batch)."""
    records = partition_of(response, partition).records
    return [
        offset
        for batch in batches_of(bytes(records or b""))
        for offset in range(batch.base_offset, batch.last_offset + 1)
    ]


async def connected(cluster: KafkaCluster) -> WireClient:
    return await WireClient.connect(cluster.live[0])


async def test_a_share_fetch_acquires_records_that_no_other_member_gets(
    cluster: KafkaCluster,
) -> None:
    await produce(cluster, [b"a", b"b", b"c"])
    tid = await topic_id(cluster)
    one, two = await connected(cluster), await connected(cluster)
    first = await share_fetch(one, tid, 0)
    assert acquired(first) == [(0, 2, 1)]
    assert offsets_in(first) == [0, 1, 2]
    assert first.acquisition_lock_timeout == datetime.timedelta(milliseconds=LOCK_MS)
    assert acquired(await share_fetch(two, tid, 0, member="m2")) == []
    await produce(cluster, [b"d"])
    assert acquired(await share_fetch(two, tid, 1, member="m2")) == [(3, 3, 1)]
    await one.close()
    await two.close()


async def test_acknowledgements_accept_release_and_reject_as_kafka_does(
    cluster: KafkaCluster,
) -> None:
    await produce(cluster, [bytes([i]) for i in range(6)])
    tid = await topic_id(cluster)
    one, two = await connected(cluster), await connected(cluster)
    assert acquired(await share_fetch(one, tid, 0)) == [(0, 5, 1)]
    # piggy-backed: accepted, released (delivered again, to whoever fetches), rejected
    again = await share_fetch(
        one, tid, 1, acks={0: [(0, 1, ACCEPT), (2, 3, RELEASE), (4, 5, REJECT)]}
    )
    assert partition_of(again).acknowledge_error_code == WireError.none
    assert acquired(again) == [(2, 3, 2)]
    # a record the member does not hold: the whole partition's acknowledgement is refused
    refused = await share_acknowledge(two, tid, 0, {0: [(2, 2, ACCEPT)]}, member="m2")
    assert refused.error_code == WireError.invalid_share_session_epoch
    await share_fetch(two, tid, 0, member="m2")
    refused = await share_acknowledge(two, tid, 1, {0: [(2, 2, ACCEPT)]}, member="m2")
    (answer,) = [p for t in refused.responses for p in t.partitions]
    assert answer.error_code == WireError.invalid_record_state
    done = await share_acknowledge(one, tid, 2, {0: [(2, 3, ACCEPT)]})
    (answer,) = [p for t in done.responses for p in t.partitions]
    assert answer.error_code == WireError.none
    assert acquired(await share_fetch(two, tid, 2, member="m2")) == []
    await one.close()
    await two.close()


async def test_a_gap_acknowledgement_archives_the_offsets_it_names(cluster: KafkaCluster) -> None:
    await produce(cluster, [b"a", b"b"])
    tid = await topic_id(cluster)
    client = await connected(cluster)
    assert acquired(await share_fetch(client, tid, 0)) == [(0, 1, 1)]
    done = await share_acknowledge(client, tid, 1, {0: [(0, 0, GAP), (1, 1, RELEASE)]})
    (answer,) = [p for t in done.responses for p in t.partitions]
    assert answer.error_code == WireError.none
    assert acquired(await share_fetch(client, tid, 2)) == [(1, 1, 2)]
    await client.close()


async def test_share_session_epochs_are_checked_as_kafka_checks_them(
    cluster: KafkaCluster,
) -> None:
    tid = await topic_id(cluster)
    client = await connected(cluster)
    assert (await share_fetch(client, tid, 3)).error_code == WireError.share_session_not_found
    assert (await share_fetch(client, tid, -1)).error_code == WireError.share_session_not_found
    opening_with_acks = await share_fetch(client, tid, 0, acks={0: [(0, 0, ACCEPT)]})
    assert opening_with_acks.error_code == WireError.invalid_request
    assert (await share_fetch(client, tid, 0)).error_code == WireError.none
    assert (await share_fetch(client, tid, 2)).error_code == WireError.invalid_share_session_epoch
    assert (await share_fetch(client, tid, 1)).error_code == WireError.none
    replayed = await share_acknowledge(client, tid, 1, {0: [(0, 0, ACCEPT)]})
    assert replayed.error_code == WireError.invalid_share_session_epoch
    assert (await share_fetch(client, tid, 2)).error_code == WireError.none
    assert (await share_fetch(client, tid, -1)).error_code == WireError.none
    assert (await share_fetch(client, tid, 3)).error_code == WireError.share_session_not_found
    unknown = await share_fetch(client, uuid.uuid4(), 0)
    assert partition_of(unknown).error_code == WireError.unknown_topic_id
    await client.close()


@pytest.mark.parametrize("cluster", [{"group_share_max_share_sessions": 1}], indirect=True)
async def test_a_full_session_cache_refuses_a_new_session(cluster: KafkaCluster) -> None:
    tid = await topic_id(cluster)
    client = await connected(cluster)
    assert (await share_fetch(client, tid, 0)).error_code == WireError.none
    refused = await share_fetch(client, tid, 0, member="m2")
    assert refused.error_code == WireError.share_session_limit_reached
    assert (await share_fetch(client, tid, 0)).error_code == WireError.none  # replaces its own
    await client.close()


async def test_a_session_fetches_its_partitions_until_they_are_forgotten(
    cluster: KafkaCluster,
) -> None:
    tid = await topic_id(cluster)
    await produce(cluster, [b"a"], partition=0)
    await produce(cluster, [b"b"], partition=1)
    client = await connected(cluster)
    opened = await share_fetch(client, tid, 0, partitions=(0, 1))
    assert acquired(opened, 0) == [(0, 0, 1)] and acquired(opened, 1) == [(0, 0, 1)]
    await produce(cluster, [b"c"], partition=0)
    await produce(cluster, [b"d"], partition=1)
    incremental = await share_fetch(client, tid, 1, partitions=(), forgotten=(1,))
    assert acquired(incremental, 0) == [(1, 1, 1)]
    assert acquired(incremental, 1) == []
    await client.close()


async def test_a_closed_session_releases_what_its_member_held(cluster: KafkaCluster) -> None:
    await produce(cluster, [b"a", b"b"])
    tid = await topic_id(cluster)
    one, two = await connected(cluster), await connected(cluster)
    assert acquired(await share_fetch(one, tid, 0)) == [(0, 1, 1)]
    closed = await share_acknowledge(one, tid, -1, {0: [(0, 0, ACCEPT)]})
    assert closed.error_code == WireError.none
    # released with one delivery fewer: delivered once more, it counts 1 again
    assert acquired(await share_fetch(two, tid, 0, member="m2")) == [(1, 1, 1)]
    await one.close()
    await two.close()


async def test_a_closed_connection_releases_what_its_sessions_held(cluster: KafkaCluster) -> None:
    await produce(cluster, [b"a"])
    tid = await topic_id(cluster)
    one, two = await connected(cluster), await connected(cluster)
    assert acquired(await share_fetch(one, tid, 0)) == [(0, 0, 1)]
    await one.close()
    later = await share_fetch(two, tid, 0, member="m2", max_wait_ms=LOCK_MS * 20)
    assert acquired(later) == [(0, 0, 1)]
    await two.close()


async def test_a_member_that_left_its_group_releases_what_it_held(cluster: KafkaCluster) -> None:
    await produce(cluster, [b"a", b"b"])
    tid = await topic_id(cluster)
    one, two = await connected(cluster), await connected(cluster)
    assert acquired(await share_fetch(one, tid, 0, partitions=(0, 1))) == [(0, 1, 1)]
    cluster.shares.member_left(GROUP, "m1")  # as the group's owner tells it
    later = await share_fetch(two, tid, 0, member="m2", max_wait_ms=LOCK_MS * 20)
    assert acquired(later) == [(0, 1, 1)]
    gone = await share_fetch(one, tid, 1)
    assert gone.error_code == WireError.share_session_not_found
    await one.close()
    await two.close()


async def test_a_fetch_with_nothing_to_acquire_waits_for_new_records(
    cluster: KafkaCluster,
) -> None:
    tid = await topic_id(cluster)
    client = await connected(cluster)
    assert acquired(await share_fetch(client, tid, 0)) == []
    waiting = asyncio.create_task(share_fetch(client, tid, 1, max_wait_ms=LOCK_MS * 20))
    await asyncio.sleep(0.2)
    assert not waiting.done()
    await produce(cluster, [b"late"])
    assert acquired(await waiting) == [(0, 0, 1)]
    await client.close()


async def test_a_waiting_fetch_gets_the_records_whose_lock_ran_out(cluster: KafkaCluster) -> None:
    await produce(cluster, [b"a"])
    tid = await topic_id(cluster)
    one, two = await connected(cluster), await connected(cluster)
    assert acquired(await share_fetch(one, tid, 0)) == [(0, 0, 1)]
    assert acquired(await share_fetch(two, tid, 0, member="m2")) == []
    # parked far longer than the lock: woken when the lock runs out, it gets the record again
    later = await share_fetch(two, tid, 1, member="m2", max_wait_ms=LOCK_MS * 20)
    assert acquired(later) == [(0, 0, 2)]
    late = await share_acknowledge(one, tid, 1, {0: [(0, 0, ACCEPT)]})
    (answer,) = [p for t in late.responses for p in t.partitions]
    assert answer.error_code == WireError.invalid_record_state
    await one.close()
    await two.close()


@pytest.mark.parametrize("cluster", [{"group_share_partition_max_record_locks": 2}], indirect=True)
async def test_at_its_in_flight_limit_a_fetch_waits_for_a_lock_not_for_records(
    cluster: KafkaCluster,
) -> None:
    await produce(cluster, [b"a", b"b", b"c", b"d"])
    tid = await topic_id(cluster)
    one, two = await connected(cluster), await connected(cluster)
    assert acquired(await share_fetch(one, tid, 0)) == [(0, 1, 1)]
    steps = cluster.shares.queue.steps
    # records wait past the end, but none may be taken until a lock ends: no pass per record
    later = await share_fetch(two, tid, 0, member="m2", max_wait_ms=LOCK_MS * 20)
    assert acquired(later) == [(0, 1, 2)]
    assert cluster.shares.queue.steps - steps <= 4
    await one.close()
    await two.close()


@pytest.mark.parametrize("cluster", [{"group_share_delivery_count_limit": 2}], indirect=True)
async def test_a_record_released_as_often_as_the_limit_is_archived(cluster: KafkaCluster) -> None:
    await produce(cluster, [b"a"])
    tid = await topic_id(cluster)
    client = await connected(cluster)
    assert acquired(await share_fetch(client, tid, 0)) == [(0, 0, 1)]
    again = await share_fetch(client, tid, 1, acks={0: [(0, 0, RELEASE)]})
    assert acquired(again) == [(0, 0, 2)]
    archived = await share_fetch(client, tid, 2, acks={0: [(0, 0, RELEASE)]})
    assert acquired(archived) == []
    await client.close()


def _transactions(bootstrap: str) -> None:
    """Aborted: 3 records; committed: 2."""
    producer = confluent_kafka.Producer(
        {"bootstrap.servers": bootstrap, "transactional.id": "tx", "linger.ms": 0}
    )
    producer.init_transactions(30)
    for values, commit in (([b"x1", b"x2", b"x3"], False), ([b"ok1", b"ok2"], True)):
        producer.begin_transaction()
        for v in values:
            producer.produce(TOPIC, v, partition=0)
        producer.flush(30)
        if commit:
            producer.commit_transaction(30)
        else:
            producer.abort_transaction(30)


@pytest.mark.parametrize("isolation", ["read_committed", "read_uncommitted"])
async def test_read_committed_never_delivers_aborted_records_nor_markers(
    cluster: KafkaCluster, isolation: str
) -> None:
    await set_group_configs(
        cluster, {"share.auto.offset.reset": "earliest", "share.isolation.level": isolation}
    )
    await asyncio.to_thread(_transactions, cluster.live[0].bootstrap)
    tid = await topic_id(cluster)
    client = await connected(cluster)
    got = acquired(await share_fetch(client, tid, 0))
    # offsets: 0-2 aborted, 3 abort marker, 4-5 committed, 6 commit marker
    if isolation == "read_committed":
        assert got == [(4, 5, 1)]
    else:
        assert got == [(0, 2, 1), (4, 5, 1)]
    await client.close()
