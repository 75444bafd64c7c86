"""Consumer groups: the minimal group coordinator, alone and under real clients.

Unit tests drive `GroupCoordinator` directly; integration tests subscribe librdkafka and
kafka-python consumers to a topic of the 3-broker cluster.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
import time
from collections.abc import AsyncIterator
from typing import Any, Final, NamedTuple

import kio.schema.leave_group.v4.request as leave_group_v4
import kio.schema.offset_commit.v8.request as offset_commit_v8
import kio.schema.offset_fetch.v7.request as offset_fetch_v7
import pytest
from confluent_kafka import Consumer, Producer
from confluent_kafka import TopicPartition as CkTopicPartition
from kafka import KafkaConsumer
from kio.schema.errors import ErrorCode as WireError
from kio.static.primitive import i32, i64

from diskless import ManualClock, TopicPartition
from diskless._types import CommittedOffset, ErrorCode, GroupOwnership
from diskless.coordinator import InMemoryBatchCoordinator
from diskless.errors import CoordinatorUnavailableError
from diskless.kafka_server import KafkaCluster
from diskless.kafka_server._coordination.cluster_view import BrokerAddress, ClusterView
from diskless.kafka_server._coordination.group_coordinator import GroupCoordinator
from diskless.kafka_server._coordination.group_state import JoinOutcome
from testkit.cluster import local_cluster, server_config
from testkit.wire import WireClient
from tests.kafka_server._helpers import group_process

PARTITIONS = 6
RECORDS = 3000
READ_BEFORE_REVOKE = 100
"""Records of each partition the first member reads before a second one joins (0113)."""


class Owner(NamedTuple):
    """A group coordinator whose broker (id 0) owns group "g", over an in-memory coordinator."""

    groups: GroupCoordinator
    me: GroupOwnership
    coordinator: InMemoryBatchCoordinator
    view: ClusterView


@contextlib.asynccontextmanager
async def _owning(
    coordinator: InMemoryBatchCoordinator, broker_id: int = 0, group: str = "g"
) -> AsyncIterator[Owner]:
    """A process serving broker `broker_id` over `coordinator`, which owns `group`."""
    groups, me, view = await group_process(coordinator, broker_id)
    try:
        located = await groups.locate(group)
        assert located is not None and located.broker_id == broker_id
        yield Owner(groups, me, coordinator, view)
    finally:
        await groups.close()
        await view.close()


@pytest.fixture
async def owner() -> AsyncIterator[Owner]:
    coordinator = InMemoryBatchCoordinator()
    await coordinator.create_topic("t", 1)
    try:
        async with _owning(coordinator) as found:
            yield found
    finally:
        await coordinator.close()


async def _heartbeat(owner: Owner, generation: int, member_id: str) -> WireError:
    return await owner.groups.heartbeat(owner.me, "g", generation, member_id)


async def _join(
    owner: Owner, member_id: str = "", instance_id: str | None = None, **options: Any
) -> JoinOutcome:
    return await owner.groups.join(
        owner.me,
        group_id="g",
        member_id=member_id,
        instance_id=instance_id,
        protocol_type="consumer",
        protocols=[("range", b"meta-" + member_id.encode())],
        session_timeout_ms=10_000,
        rebalance_timeout_ms=10_000,
        **options,
    )


async def test_join_sync_heartbeat_leave(owner: Owner) -> None:
    groups, me = owner.groups, owner.me
    first = await _join(owner)
    assert first.error == WireError.none
    member, generation = first.member_id, first.generation
    assert first.leader == member
    error, assignment = await groups.sync(me, "g", generation, member, {member: b"all"})
    assert (error, assignment) == (WireError.none, b"all")
    assert await groups.heartbeat(me, "g", generation, member) == WireError.none
    assert await groups.heartbeat(me, "g", generation + 1, member) == WireError.illegal_generation
    assert await groups.heartbeat(me, "g", generation, "stranger") == WireError.unknown_member_id

    # A second member triggers a rebalance; the first learns it from its heartbeat.
    second_join = asyncio.create_task(_join(owner))
    await asyncio.sleep(0.01)
    assert await groups.heartbeat(me, "g", generation, member) == WireError.rebalance_in_progress
    rejoin = await _join(owner, member)
    second = await second_join
    assert rejoin.generation == second.generation == generation + 1
    assert rejoin.leader == member and len(rejoin.members) == 2
    assert second.members == []
    follower = asyncio.create_task(groups.sync(me, "g", generation + 1, second.member_id, {}))
    leader = await groups.sync(
        me, "g", generation + 1, member, {member: b"a", second.member_id: b"b"}
    )
    assert leader == (WireError.none, b"a")
    assert await follower == (WireError.none, b"b")

    offsets = {TopicPartition("t", 0): CommittedOffset(42, None)}
    stale = await groups.commit_offsets(me, "g", generation, member, offsets)
    assert stale == {TopicPartition("t", 0): WireError.illegal_generation}
    assert await groups.committed_offsets(me, "g") == (WireError.none, {})
    unknown = {TopicPartition("t", 1): CommittedOffset(1, None)}
    answers = await groups.commit_offsets(me, "g", generation + 1, member, {**offsets, **unknown})
    assert answers == {
        TopicPartition("t", 0): WireError.none,
        TopicPartition("t", 1): WireError.unknown_topic_or_partition,
    }
    assert await groups.committed_offsets(me, "g") == (WireError.none, offsets)
    assert await groups.leave(me, "g", member) == WireError.none
    assert await groups.leave(me, "g", member) == WireError.unknown_member_id
    # Every generation handed out was stored first, where any later owner continues from it.
    stored = await owner.coordinator.group_ownership("g")
    assert stored is not None and stored.generation == generation + 1


async def test_a_broker_that_does_not_own_the_group_answers_not_coordinator(
    owner: Owner,
) -> None:
    async with _owning(owner.coordinator, broker_id=1, group="elsewhere") as other:
        # Broker 1 joined the cluster after broker 0 took "g": "g" does not move.
        assert await other.groups.locate("g") == owner.view.get(0)
        joined = await _join(other)
        assert joined.error == WireError.not_coordinator
        assert await _heartbeat(other, 1, "m") == WireError.not_coordinator
        assert await other.groups.committed_offsets(other.me, "g") == (
            WireError.not_coordinator,
            {},
        )
        commit = await other.groups.commit_offsets(
            other.me, "g", -1, "", {TopicPartition("t", 0): CommittedOffset(1, None)}
        )
        assert commit == {TopicPartition("t", 0): WireError.not_coordinator}
        assert await other.groups.txn_fence(other.me, "g", -1, "") == WireError.not_coordinator


async def test_a_replaced_static_member_is_fenced(owner: Owner) -> None:
    groups, me = owner.groups, owner.me
    first = await _join(owner, instance_id="consumer-1", require_known_member_id=True)
    assert first.error == WireError.none, "a static member gets its id at once"
    assert first.members == [(first.member_id, "consumer-1", b"meta-")]
    assert (await groups.sync(me, "g", first.generation, first.member_id, {}))[0] == (
        WireError.none
    )
    # The same instance restarts: it joins without its old member id and replaces it, in the
    # same generation (the group is stable), answered as a follower of the leader it was.
    second = await _join(owner, instance_id="consumer-1")
    assert second.error == WireError.none and second.member_id != first.member_id
    assert (second.generation, second.leader, second.members) == (
        first.generation,
        first.member_id,
        [],
    )
    for answer in (
        await groups.heartbeat(me, "g", second.generation, first.member_id, "consumer-1"),
        await groups.leave(me, "g", first.member_id, "consumer-1"),
        await groups.txn_fence(me, "g", second.generation, first.member_id, "consumer-1"),
    ):
        assert answer == WireError.fenced_instance_id
    offsets = {TopicPartition("t", 0): CommittedOffset(1, None)}
    commit = await groups.commit_offsets(
        me, "g", second.generation, first.member_id, offsets, "consumer-1"
    )
    assert commit == {TopicPartition("t", 0): WireError.fenced_instance_id}
    fence = await groups.txn_fence(me, "g", second.generation, second.member_id, "consumer-1")
    assert fence == GroupOwnership(0, me.broker_epoch, second.generation)


async def test_leave_group_names_static_members_by_instance_id_on_the_wire() -> None:
    """LeaveGroup v4 (KIP-345) through a broker: a member named by its instance id alone
    leaves; one named under an id its instance no longer holds is fenced; an instance id no
    member holds is unknown. Each member gets its own answer."""
    coordinator = InMemoryBatchCoordinator()
    async with local_cluster(coordinator, brokers=1, server_config=server_config()) as cluster:
        await cluster.view.renew()  # the broker's registration is live: it may own groups
        assert await cluster.groups.locate("g") == cluster.servers[0].address
        epoch = cluster.view.epoch_of(0)
        assert epoch is not None
        owner = Owner(cluster.groups, GroupOwnership(0, epoch, -1), coordinator, cluster.view)
        first = await _join(owner, instance_id="consumer-1")
        await cluster.groups.sync(owner.me, "g", first.generation, first.member_id, {})
        second = await _join(owner, instance_id="consumer-1")  # restarted
        identity = leave_group_v4.MemberIdentity
        leave = leave_group_v4.LeaveGroupRequest(
            group_id="g",
            members=(
                identity(member_id=first.member_id, group_instance_id="consumer-1"),
                identity(member_id="", group_instance_id="consumer-1"),
                identity(member_id="", group_instance_id="nobody"),
            ),
        )
        client = await WireClient.connect(cluster.servers[0])
        try:
            left = await client.request(leave)
        finally:
            await client.close()
        heartbeat = await cluster.groups.heartbeat(
            owner.me, "g", second.generation, second.member_id, "consumer-1"
        )
    assert left.error_code == WireError.none
    assert [(m.member_id, m.group_instance_id, m.error_code) for m in left.members] == [
        (first.member_id, "consumer-1", WireError.fenced_instance_id),
        ("", "consumer-1", WireError.none),
        ("", "nobody", WireError.unknown_member_id),
    ]
    assert heartbeat == WireError.unknown_member_id
    await coordinator.close()


async def test_an_anonymous_join_from_v4_on_gets_member_id_required(owner: Owner) -> None:
    first = await _join(owner, require_known_member_id=True)
    assert first.error == WireError.member_id_required and first.member_id
    again = await _join(owner, require_known_member_id=True)
    assert again.member_id != first.member_id
    joined = await owner.groups.join(
        owner.me,
        group_id="g",
        member_id=first.member_id,
        protocol_type="consumer",
        protocols=[("range", b"")],
        session_timeout_ms=10_000,
        rebalance_timeout_ms=10_000,
        require_known_member_id=True,
    )
    assert joined.error == WireError.none and joined.members == [(first.member_id, None, b"")]


async def test_a_new_owner_continues_the_generations_and_the_old_one_is_fenced() -> None:
    clock = ManualClock()
    coordinator = InMemoryBatchCoordinator(clock=clock)
    await coordinator.create_topic("t", 1)
    try:
        async with _owning(coordinator) as old:
            joined = await _join(old)
            assert joined.error == WireError.none
            assert (await old.groups.sync(old.me, "g", joined.generation, joined.member_id, {}))[
                0
            ] == WireError.none
            # Broker 0's process stalls past its registration; broker 1 takes the group over.
            await clock.advance(old.view.ttl_ms / 1000)
            async with _owning(coordinator, broker_id=1, group="elsewhere") as new:
                assert await new.groups.locate("g") == new.view.get(1)
                # The member, unknown to the new owner, joins again: the next generation.
                assert (
                    await _heartbeat(new, joined.generation, joined.member_id)
                    == WireError.unknown_member_id
                )
                again = await _join(new)
                assert again.error == WireError.none and again.generation == joined.generation + 1
                # The stalled owner still believes in its group, but its commit is refused.
                offsets = {TopicPartition("t", 0): CommittedOffset(9, None)}
                refused = await old.groups.commit_offsets(
                    old.me, "g", joined.generation, joined.member_id, offsets
                )
                assert refused == {TopicPartition("t", 0): WireError.not_coordinator}
                assert await coordinator.fetch_offsets("g") == {}
                # ...and it has let the group go: its members look the coordinator up again.
                assert (
                    await _heartbeat(old, joined.generation, joined.member_id)
                    == WireError.not_coordinator
                )
    finally:
        await coordinator.close()


async def test_a_new_owner_never_hands_out_a_member_id_a_client_still_holds() -> None:
    """After the group moves, a client that joins afresh must not be given the id another
    client got from the old owner: that one would then be taken for the newcomer (its
    heartbeats accepted, its joins counted as the newcomer's), and the group would never
    settle."""
    clock = ManualClock()
    coordinator = InMemoryBatchCoordinator(clock=clock)
    await coordinator.create_topic("t", 1)
    try:
        async with _owning(coordinator) as old:
            held = await _join(old, client_id="reader")
            assert held.error == WireError.none and held.member_id.startswith("reader-")
            await clock.advance(old.view.ttl_ms / 1000)
            async with _owning(coordinator, broker_id=1, group="elsewhere") as new:
                assert await new.groups.locate("g") == new.view.get(1)
                fresh = await _join(new, client_id="reader")
                assert fresh.error == WireError.none
                assert fresh.member_id != held.member_id
                # The old id stays unknown to the new owner: its holder joins again, as itself.
                assert (
                    await _heartbeat(new, fresh.generation, held.member_id)
                    == WireError.unknown_member_id
                )
    finally:
        await coordinator.close()


class _FailsOneGeneration(InMemoryBatchCoordinator):
    """Its first attempt to store a group's generation fails."""

    failures = 1

    async def store_group_generation(self, group_id: str, owner: GroupOwnership) -> ErrorCode:
        if self.failures:
            self.failures -= 1
            raise CoordinatorUnavailableError("the store is down")
        return await super().store_group_generation(group_id, owner)


async def test_a_generation_that_could_not_be_stored_is_not_handed_out() -> None:
    """The members waiting to join get a retriable error and join again; the rebalance goes
    on, and the next attempt stores and hands out the same generation."""
    coordinator = _FailsOneGeneration()
    await coordinator.create_topic("t", 1)
    try:
        async with _owning(coordinator) as owner:
            failed = await _join(owner)
            assert failed.error == WireError.coordinator_not_available and failed.member_id
            stored = await coordinator.group_ownership("g")
            assert stored is not None and stored.generation == 0
            joined = await _join(owner, failed.member_id)
            assert joined.error == WireError.none and joined.generation == 1
            assert joined.members == [
                (failed.member_id, None, b"meta-" + failed.member_id.encode())
            ]
            stored = await coordinator.group_ownership("g")
            assert stored is not None and stored.generation == 1
    finally:
        await coordinator.close()


async def _join_briefly(owner: Owner, member_id: str = "") -> JoinOutcome:
    """A join with a session and rebalance timeout of 300 ms."""
    return await owner.groups.join(
        owner.me,
        group_id="g",
        member_id=member_id,
        protocol_type="consumer",
        protocols=[("range", b"")],
        session_timeout_ms=300,
        rebalance_timeout_ms=300,
    )


async def test_a_member_whose_join_went_away_is_dropped_when_the_rebalance_completes(
    owner: Owner,
) -> None:
    """A JoinGroup cancelled while it waits (its connection closed) no longer counts as a
    rejoin: the rebalance completes at its timeout without the member."""
    groups, me = owner.groups, owner.me
    first = await _join_briefly(owner)
    assert first.error == WireError.none
    assert (await groups.sync(me, "g", first.generation, first.member_id, {}))[0] == (
        WireError.none
    )
    second = asyncio.create_task(_join_briefly(owner))
    await asyncio.sleep(0.01)  # it waits for the rebalance
    second.cancel()
    with pytest.raises(asyncio.CancelledError):
        await second
    rejoined = await _join_briefly(owner, first.member_id)
    assert rejoined.error == WireError.none and rejoined.generation == first.generation + 1
    assert rejoined.members == [(first.member_id, None, b"")]


def _produce(bootstrap: str) -> None:
    producer = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True})
    for i in range(RECORDS):
        producer.produce("grouped", value=b"%d" % i, partition=i % PARTITIONS)
    assert producer.flush(60) == 0


def _librdkafka_group(bootstrap: str) -> tuple[dict[tuple[int, int], bytes], list[set[int]]]:
    """Two members read the topic; what was read, and the partitions each member read from."""
    read: dict[tuple[int, int], bytes] = {}
    read_by: list[set[int]] = [set(), set()]
    lock = threading.Lock()

    def member(index: int) -> None:
        consumer = Consumer(
            {
                "bootstrap.servers": bootstrap,
                "group.id": "librdkafka-group",
                "auto.offset.reset": "earliest",
                "enable.auto.commit": False,
                # Members learn of a rebalance from their heartbeat (3 s by default).
                "heartbeat.interval.ms": 100,
            }
        )
        consumer.subscribe(["grouped"])
        idle = 0
        deadline = time.monotonic() + 60
        while idle < 6 or len(read) < RECORDS:
            assert time.monotonic() < deadline, f"read {len(read)} of {RECORDS}"
            message = consumer.poll(0.5)
            if message is None:
                idle += 1
                continue
            idle = 0
            assert message.error() is None, message.error()
            partition, offset = message.partition(), message.offset()
            assert partition is not None and offset is not None
            with lock:
                assert (partition, offset) not in read, "read twice"
                read[partition, offset] = message.value() or b""
                read_by[index].add(partition)
            consumer.commit(message=message, asynchronous=False)
        consumer.close()

    failures: list[BaseException] = []

    def run(index: int) -> None:
        try:
            member(index)
        except BaseException as e:
            failures.append(e)

    threads = [threading.Thread(target=run, args=(i,)) for i in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert not failures, failures
    return read, read_by


async def test_librdkafka_consumers_share_a_topic_through_a_group(cluster: KafkaCluster) -> None:
    await cluster.create_topic("grouped", PARTITIONS)
    bootstrap = cluster.bootstrap("rack-0")
    await asyncio.to_thread(_produce, bootstrap)
    read, read_by = await asyncio.to_thread(_librdkafka_group, bootstrap)
    assert sorted(int(v) for v in read.values()) == list(range(RECORDS))
    # Both members joined the first generation, which split the partitions between them; each
    # commits what it reads, so none is read twice even when the last one to leave takes over.
    assert read_by[0] and read_by[1]
    assert not read_by[0] & read_by[1]
    committed = await cluster.coordinator.fetch_offsets("librdkafka-group")
    assert sum(c.offset for c in committed.values()) == RECORDS


def _kafka_python_group(bootstrap: str) -> int:
    consumer = KafkaConsumer(
        "grouped",
        bootstrap_servers=bootstrap,
        group_id="kafka-python-group",
        auto_offset_reset="earliest",
        enable_auto_commit=False,
        consumer_timeout_ms=4000,
    )
    count = sum(1 for _ in consumer)
    consumer.commit()
    consumer.close()
    return count


async def test_kafka_python_subscribes_and_commits(cluster: KafkaCluster) -> None:
    await cluster.create_topic("grouped", PARTITIONS)
    await asyncio.to_thread(_produce, cluster.bootstrap("rack-2"))
    count = await asyncio.to_thread(_kafka_python_group, cluster.bootstrap("rack-2"))
    assert count == RECORDS
    committed = await cluster.coordinator.fetch_offsets("kafka-python-group")
    assert sum(c.offset for c in committed.values()) == RECORDS


async def test_an_owner_whose_registration_lapsed_lets_its_groups_go() -> None:
    """A process paused past its registration, which renews it afterwards (same epoch), no
    longer answers for the groups it held: another process may have claimed them meanwhile."""
    coordinator = InMemoryBatchCoordinator()
    await coordinator.create_topic("t", 1)
    epoch = await coordinator.register_broker(0)
    view = ClusterView("test", coordinator, ttl_ms=300)
    view.join(BrokerAddress(0, "127.0.0.1", 9092, None), epoch)
    await view.renew()
    groups = GroupCoordinator(coordinator, view)
    owner = Owner(groups, GroupOwnership(0, epoch, -1), coordinator, view)
    try:
        assert view.registration_term(0) == 0
        assert await groups.locate("g") == view.get(0)
        joined = await _join(owner)
        assert joined.error == WireError.none
        await asyncio.sleep(0.4)  # no renewal ran: the registration may have expired
        assert view.registration_term(0) is None
        await view.renew()
        assert view.registration_term(0) == 1
        # Nobody else took the group, so it is served again, but from scratch: the members of
        # the old term are unknown and join again, into the next generation.
        assert await _heartbeat(owner, joined.generation, joined.member_id) == (
            WireError.unknown_member_id
        )
        again = await _join(owner)
        assert again.error == WireError.none and again.generation == joined.generation + 1
    finally:
        await groups.close()
        await view.close()
        await coordinator.close()


async def test_a_member_commits_while_the_group_prepares_a_rebalance(owner: Owner) -> None:
    """Kafka's OffsetCommit rule for a classic group: the current generation's members may
    commit while a rebalance is prepared; once the next generation is handed out, and until
    it is synced, its members get REBALANCE_IN_PROGRESS and the older generation's get
    ILLEGAL_GENERATION. A commit naming no member is refused while the group has members."""
    groups, me = owner.groups, owner.me
    tp = TopicPartition("t", 0)
    first = await _join(owner)
    member, generation = first.member_id, first.generation
    assert (await groups.sync(me, "g", generation, member, {member: b"all"}))[0] == WireError.none
    anonymous = await groups.commit_offsets(me, "g", -1, "", {tp: CommittedOffset(1, None)})
    assert anonymous == {tp: WireError.unknown_member_id}

    second_join = asyncio.create_task(_join(owner))
    await asyncio.sleep(0.01)  # the group prepares a rebalance: the first member revokes
    assert await groups.heartbeat(me, "g", generation, member) == WireError.rebalance_in_progress
    revoked = await groups.commit_offsets(
        me, "g", generation, member, {tp: CommittedOffset(10, None)}
    )
    assert revoked == {tp: WireError.none}
    assert await groups.committed_offsets(me, "g") == (
        WireError.none,
        {tp: CommittedOffset(10, None)},
    )
    stranger = await groups.commit_offsets(
        me, "g", generation, "stranger", {tp: CommittedOffset(11, None)}
    )
    assert stranger == {tp: WireError.unknown_member_id}
    ahead = await groups.commit_offsets(
        me, "g", generation + 1, member, {tp: CommittedOffset(11, None)}
    )
    assert ahead == {tp: WireError.illegal_generation}

    rejoin = await _join(owner, member)
    second = await second_join
    assert rejoin.generation == second.generation == generation + 1
    completing = await groups.commit_offsets(
        me, "g", generation + 1, member, {tp: CommittedOffset(12, None)}
    )
    assert completing == {tp: WireError.rebalance_in_progress}
    stale = await groups.commit_offsets(
        me, "g", generation, member, {tp: CommittedOffset(12, None)}
    )
    assert stale == {tp: WireError.illegal_generation}
    # A producer committing for the member (TxnOffsetCommit) is not held by the rebalance.
    fence = await groups.txn_fence(me, "g", generation + 1, member)
    assert fence == GroupOwnership(0, me.broker_epoch, generation + 1)
    assert await groups.txn_fence(me, "g", -1, "") == GroupOwnership(0, me.broker_epoch, -1)
    assert await groups.txn_fence(me, "g", -1, member) == WireError.illegal_generation

    follower = asyncio.create_task(groups.sync(me, "g", generation + 1, second.member_id, {}))
    await groups.sync(me, "g", generation + 1, member, {member: b"a", second.member_id: b"b"})
    assert (await follower)[0] == WireError.none
    stable = await groups.commit_offsets(
        me, "g", generation + 1, member, {tp: CommittedOffset(12, None)}
    )
    assert stable == {tp: WireError.none}
    assert await groups.committed_offsets(me, "g") == (
        WireError.none,
        {tp: CommittedOffset(12, None)},
    )


def _commit_on_revoke(bootstrap: str, group: str) -> tuple[dict[int, int], dict[int, int]]:
    """librdkafka's "commit on revoke" with an eager assignor: a first member reads, a second
    joins, and the first commits its positions in its revoke callback. What the first member
    committed on revoke, and where the second member started on each of its partitions."""
    config = {
        "bootstrap.servers": bootstrap,
        "group.id": group,
        "auto.offset.reset": "earliest",
        "enable.auto.commit": False,
        "partition.assignment.strategy": "range",
        "heartbeat.interval.ms": 100,
    }
    first = Consumer(config)
    committed: dict[int, int] = {}
    failures: list[BaseException] = []

    def on_revoke(consumer: Consumer, partitions: list[Any]) -> None:
        try:
            answered = consumer.commit(asynchronous=False) or []
            for tp in answered:
                assert tp.error is None, tp.error
                committed[tp.partition] = tp.offset
        except BaseException as e:
            failures.append(e)

    first.subscribe(["grouped"], on_revoke=on_revoke)
    read: dict[int, int] = {}
    deadline = time.monotonic() + 60
    while len(read) < PARTITIONS or min(read.values()) < READ_BEFORE_REVOKE:
        assert time.monotonic() < deadline, f"read {read}"
        message = first.poll(0.5)
        if message is not None and message.error() is None:
            partition = message.partition()
            assert partition is not None
            read[partition] = read.get(partition, 0) + 1
            if read[partition] == READ_BEFORE_REVOKE:  # the position stays there
                first.pause([CkTopicPartition(message.topic(), partition)])
    second = Consumer(config)
    second.subscribe(["grouped"])
    started: dict[int, int] = {}
    while not committed or len(started) < PARTITIONS // 2:
        assert time.monotonic() < deadline, f"committed {committed}, second read {started}"
        assert not failures, failures
        first.poll(0)
        for message in second.consume(1000, 0.1):
            partition, offset = message.partition(), message.offset()
            if message.error() is None and partition is not None and offset is not None:
                started.setdefault(partition, offset)
    assert not failures, failures
    for consumer in (second, first):
        _close_within(consumer, CLOSE_WITHIN_S)
    return committed, started


CLOSE_WITHIN_S: Final = 60.0


def _close_within(consumer: Consumer, seconds: float) -> None:
    """librdkafka's close waits on the group (a leave, an outstanding join): bounded here, so
    that one that never returns fails the test instead of hanging its worker until the suite's
    watchdog ends it (the worker's crash then left the whole run waiting, without a summary)."""
    closing = threading.Thread(target=consumer.close, daemon=True)
    closing.start()
    closing.join(seconds)
    assert not closing.is_alive(), f"close() did not return within {seconds} s"


async def test_librdkafka_commits_on_revoke_during_a_rebalance(cluster: KafkaCluster) -> None:
    """librdkafka's test 0113: the eager assignor's usual commit in the revoke callback is
    accepted (the group is preparing its rebalance), so the member that takes a partition over
    resumes exactly where the commit left it, and nothing committed is read again."""
    await cluster.create_topic("grouped", PARTITIONS)
    bootstrap = cluster.bootstrap("rack-0")
    await asyncio.to_thread(_produce, bootstrap)
    committed, started = await asyncio.to_thread(_commit_on_revoke, bootstrap, "revoking")
    assert committed == dict.fromkeys(range(PARTITIONS), READ_BEFORE_REVOKE)
    assert len(started) == PARTITIONS // 2
    assert all(offset == READ_BEFORE_REVOKE for offset in started.values()), started


def _offset_commit(
    generation: int, member_id: str, offset: int, leader_epoch: int
) -> offset_commit_v8.OffsetCommitRequest:
    partition = offset_commit_v8.OffsetCommitRequestPartition(
        partition_index=i32(0),
        committed_offset=i64(offset),
        committed_leader_epoch=i32(leader_epoch),
        committed_metadata=None,
    )
    return offset_commit_v8.OffsetCommitRequest(
        group_id="g",
        generation_id_or_member_epoch=i32(generation),
        member_id=member_id,
        group_instance_id=None,
        topics=(offset_commit_v8.OffsetCommitRequestTopic(name="t", partitions=(partition,)),),
    )


async def test_offset_commit_on_the_wire_while_the_group_rebalances() -> None:
    """The same rule through a broker's OffsetCommit: accepted from the current generation
    while the rebalance is prepared (its leader epoch kept), REBALANCE_IN_PROGRESS from the
    next one until it is synced."""
    coordinator = InMemoryBatchCoordinator()
    await coordinator.create_topic("t", 1)
    async with local_cluster(coordinator, brokers=1, server_config=server_config()) as cluster:
        await cluster.view.renew()  # the broker's registration is live: it may own groups
        assert await cluster.groups.locate("g") == cluster.servers[0].address
        epoch = cluster.view.epoch_of(0)
        assert epoch is not None
        owner = Owner(cluster.groups, GroupOwnership(0, epoch, -1), coordinator, cluster.view)
        first = await _join(owner)
        member, generation = first.member_id, first.generation
        await cluster.groups.sync(owner.me, "g", generation, member, {member: b"all"})
        client = await WireClient.connect(cluster.servers[0])
        try:
            second = asyncio.create_task(_join(owner))
            await asyncio.sleep(0.01)
            preparing = await client.request(_offset_commit(generation, member, 10, 2))
            rejoined, _ = await asyncio.gather(_join(owner, member), second)
            assert rejoined.generation == generation + 1
            completing = await client.request(_offset_commit(generation + 1, member, 11, 3))
            fetch = offset_fetch_v7.OffsetFetchRequest(
                group_id="g", topics=None, require_stable=False
            )
            read = await client.request(fetch)
        finally:
            await client.close()
    assert preparing.topics[0].partitions[0].error_code == WireError.none
    assert completing.topics[0].partitions[0].error_code == WireError.rebalance_in_progress
    assert [(p.committed_offset, p.committed_leader_epoch) for p in read.topics[0].partitions] == [
        (10, 2)
    ]
    await coordinator.close()
