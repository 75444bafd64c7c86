"""Integration: share groups (KIP-932) with librdkafka's `ShareConsumer` on an in-process
cluster: three members split a topic's partitions (seen through ShareGroupDescribe and the
stored state), a member whose process is SIGKILLed is removed after the session timeout and its
partitions go to the others, and the departure is told to who listens; a group is of one kind
(Kafka's refusals both ways); the admin APIs list, describe, delete a share group and describe,
alter and delete its offsets, as Kafka's rules say; a group's own `share.*` configs override
the broker's `group.share.*` properties."""

from __future__ import annotations

import asyncio
import datetime
import signal
import subprocess
import sys
import threading
import time
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from typing import Any, Final

import kio.schema.alter_share_group_offsets.v0.request as alter_v0
import kio.schema.consumer_group_heartbeat.v0.request as consumer_heartbeat_v0
import kio.schema.delete_groups.v2.request as delete_groups_v2
import kio.schema.delete_share_group_offsets.v0.request as delete_offsets_v0
import kio.schema.describe_groups.v5.request as describe_groups_v5
import kio.schema.describe_share_group_offsets.v1.request as describe_offsets_v1
import kio.schema.find_coordinator.v4.request as find_coordinator_v4
import kio.schema.join_group.v5.request as join_group_v5
import kio.schema.list_groups.v5.request as list_groups_v5
import kio.schema.share_group_describe.v1.request as describe_v1
import kio.schema.share_group_heartbeat.v1.request as heartbeat_v1
import pytest
from confluent_kafka import Consumer, ShareConsumer
from confluent_kafka.admin import AdminClient, AlterConfigOpType, ConfigEntry, ConfigResource
from kio.schema.errors import ErrorCode as WireError
from kio.static.primitive import i8, i32, i64

from diskless.kafka_server import KafkaCluster
from diskless.kafka_server._server.settings.config import ServerConfig
from testkit.cluster import FETCH_WAIT_MS_MAX, local_cluster
from testkit.wire import ask

TOPIC: Final = "queue"
PARTITIONS: Final = 6
SESSION_MS: Final = 3_000
CONFIG: Final = ServerConfig(
    fetch_wait_ms_max=FETCH_WAIT_MS_MAX,
    group_share_heartbeat_interval_ms=200,
    group_share_session_timeout_ms=SESSION_MS,
)
MEMBER_SCRIPT: Final = """
import sys
from confluent_kafka import Consumer, ShareConsumer
consumer = ShareConsumer({"bootstrap.servers": sys.argv[1], "group.id": sys.argv[2]})
consumer.subscribe([sys.argv[3]])
while True:
    try:
        consumer.poll(0.5)
    except Exception:
        pass
"""


@pytest.fixture
async def cluster() -> AsyncIterator[KafkaCluster]:
    async with local_cluster(brokers=1, server_config=CONFIG) as running:
        await running.create_topic(TOPIC, PARTITIONS)
        yield running


class Members:
    """Share consumers polling in threads of this process, and others in child processes."""

    def __init__(self, bootstrap: str, group: str) -> None:
        self.bootstrap, self.group = bootstrap, group
        self._stop = threading.Event()
        self._threads: list[threading.Thread] = []
        self.processes: list[subprocess.Popen[bytes]] = []

    def start_thread(self) -> None:
        def run() -> None:
            consumer = ShareConsumer({"bootstrap.servers": self.bootstrap, "group.id": self.group})
            consumer.subscribe([TOPIC])
            while not self._stop.is_set():
                try:
                    consumer.poll(0.2)
                except Exception:  # no share fetch is needed to be a member
                    time.sleep(0.2)
            consumer.close()

        thread = threading.Thread(target=run, daemon=True)
        thread.start()
        self._threads.append(thread)

    def start_process(self) -> subprocess.Popen[bytes]:
        args = [sys.executable, "-c", MEMBER_SCRIPT, self.bootstrap, self.group, TOPIC]
        process = subprocess.Popen(args, stderr=subprocess.DEVNULL)
        self.processes.append(process)
        return process

    def stop(self) -> None:
        self._stop.set()
        for thread in self._threads:
            thread.join(30)
        for process in self.processes:
            if process.poll() is None:
                process.kill()
            process.wait(30)


@asynccontextmanager
async def members(bootstrap: str, group: str) -> AsyncIterator[Members]:
    """Members stopped at the end from a thread: closing, they still talk to the cluster, which
    runs on this event loop."""
    running = Members(bootstrap, group)
    try:
        yield running
    finally:
        await asyncio.to_thread(running.stop)


def describe(bootstrap: str, group: str) -> Any:
    body = describe_v1.ShareGroupDescribeRequest(
        group_ids=(group,), include_authorized_operations=False
    )
    (described,) = ask(bootstrap, body, 30).groups
    return described


def holdings(described: Any) -> dict[str, tuple[int, ...]]:
    """Member id -> its partitions of TOPIC, as ShareGroupDescribe shows them."""
    return {
        m.member_id: tuple(
            sorted(
                p
                for t in m.assignment.topic_partitions
                if t.topic_name == TOPIC
                for p in t.partitions
            )
        )
        for m in described.members
    }  # fmt: skip


def wait_for(what: str, check: Callable[[], Any], timeout_s: float = 60.0) -> Any:
    deadline = time.monotonic() + timeout_s
    while True:
        found = check()
        if found:
            return found
        assert time.monotonic() < deadline, f"waited {timeout_s} s for {what}"
        time.sleep(0.2)


def split_among(bootstrap: str, group: str, count: int) -> Callable[[], Any]:
    """Whether `count` members, all at the assignment epoch, hold every partition once."""

    def check() -> Any:
        described = describe(bootstrap, group)
        held = holdings(described)
        epochs = {m.member_epoch for m in described.members}
        every = sorted(p for ps in held.values() for p in ps)
        settled = epochs == {described.assignment_epoch}
        if len(held) == count and settled and every == list(range(PARTITIONS)):
            return described
        return None

    return check


async def test_three_members_split_the_topic_and_a_killed_ones_partitions_move(
    cluster: KafkaCluster,
) -> None:
    bootstrap = cluster.bootstrap()
    departed: list[tuple[str, str]] = []
    cluster.groups.shares.on_departure(lambda group, member: departed.append((group, member)))
    async with members(bootstrap, "workers") as running:
        running.start_thread()
        running.start_thread()
        victim = running.start_process()
        described = await asyncio.to_thread(
            wait_for, "three members", split_among(bootstrap, "workers", 3)
        )
        assert described.error_code is WireError.none and described.group_state == "Stable"
        assert described.assignor_name == "simple"
        before = holdings(described)
        assert sorted(len(ps) for ps in before.values()) == [2, 2, 2]
        for member_id, partitions in before.items():  # the seam a share fetch may ask
            seen = await cluster.groups.shares.assignment("workers", member_id)
            assert seen is not None and sorted(tp.partition for tp in seen) == list(partitions)
        assert await cluster.groups.shares.assignment("workers", "nobody") is None

        victim.send_signal(signal.SIGKILL)
        victim.wait(30)
        after = holdings(
            await asyncio.to_thread(
                wait_for, "two members", split_among(bootstrap, "workers", 2), SESSION_MS / 100
            )
        )
    (gone,) = set(before) - set(after)
    assert ("workers", gone) in departed
    assert sorted(len(ps) for ps in after.values()) == [3, 3]
    for member_id, partitions in after.items():
        assert set(before[member_id]) <= set(partitions), "the others kept theirs"


def _list_groups(bootstrap: str, *types: str) -> dict[str, tuple[str, str, str]]:
    body = list_groups_v5.ListGroupsRequest(states_filter=(), types_filter=types)
    listed = ask(bootstrap, body, 30)
    assert listed.error_code is WireError.none
    return {g.group_id: (g.group_type, g.group_state, g.protocol_type) for g in listed.groups}


def _find(bootstrap: str, *groups: str) -> None:
    """FindCoordinator, as clients ask it first: the group is claimed for a broker."""
    find = find_coordinator_v4.FindCoordinatorRequest(key_type=i8(0), coordinator_keys=groups)
    assert {c.error_code for c in ask(bootstrap, find, 30).coordinators} == {WireError.none}


def _share_heartbeat(bootstrap: str, group: str, member: str, epoch: int) -> Any:
    body = heartbeat_v1.ShareGroupHeartbeatRequest(
        group_id=group,
        member_id=member,
        member_epoch=i32(epoch),
        rack_id=None,
        subscribed_topic_names=(TOPIC,) if epoch == 0 else None,
    )
    return ask(bootstrap, body, 30)


def _consumer_heartbeat(bootstrap: str, group: str) -> Any:
    body = consumer_heartbeat_v0.ConsumerGroupHeartbeatRequest(
        group_id=group,
        member_id="",
        member_epoch=i32(0),
        instance_id=None,
        rack_id=None,
        rebalance_timeout=_timedelta_ms(30_000),
        subscribed_topic_names=(TOPIC,),
        server_assignor=None,
        topic_partitions=(),
    )
    return ask(bootstrap, body, 30)


def _timedelta_ms(ms: int) -> datetime.timedelta:
    return datetime.timedelta(milliseconds=ms)


def _classic_join(bootstrap: str, group: str) -> WireError:
    body = join_group_v5.JoinGroupRequest(
        group_id=group,
        session_timeout=_timedelta_ms(30_000),
        rebalance_timeout=_timedelta_ms(30_000),
        member_id="",
        group_instance_id=None,
        protocol_type="consumer",
        protocols=(join_group_v5.JoinGroupRequestProtocol(name="range", metadata=b""),),
    )
    error: WireError = ask(bootstrap, body, 30).error_code
    return error


def _describe_groups(bootstrap: str, group: str) -> tuple[WireError, str]:
    body = describe_groups_v5.DescribeGroupsRequest(
        groups=(group,), include_authorized_operations=False
    )
    (described,) = ask(bootstrap, body, 30).groups
    return described.error_code, described.group_state


def _describe_offsets(bootstrap: str, group: str) -> Any:
    body = describe_offsets_v1.DescribeShareGroupOffsetsRequest(
        groups=(
            describe_offsets_v1.DescribeShareGroupOffsetsRequestGroup(
                group_id=group,
                topics=(
                    describe_offsets_v1.DescribeShareGroupOffsetsRequestTopic(
                        topic_name=TOPIC, partitions=(i32(0), i32(1))
                    ),
                ),
            ),
        )
    )
    (answer,) = ask(bootstrap, body, 30).groups
    return answer


def _alter_offsets(bootstrap: str, group: str, offset: int) -> Any:
    body = alter_v0.AlterShareGroupOffsetsRequest(
        group_id=group,
        topics=(
            alter_v0.AlterShareGroupOffsetsRequestTopic(
                topic_name=TOPIC,
                partitions=(
                    alter_v0.AlterShareGroupOffsetsRequestPartition(
                        partition_index=i32(0), start_offset=i64(offset)
                    ),
                ),
            ),
        ),
    )
    return ask(bootstrap, body, 30)


def _delete_offsets(bootstrap: str, group: str, *topics: str) -> Any:
    body = delete_offsets_v0.DeleteShareGroupOffsetsRequest(
        group_id=group,
        topics=tuple(
            delete_offsets_v0.DeleteShareGroupOffsetsRequestTopic(topic_name=t) for t in topics
        ),
    )
    return ask(bootstrap, body, 30)


def _delete_group(bootstrap: str, group: str) -> WireError:
    body = delete_groups_v2.DeleteGroupsRequest(groups_names=(group,))
    (result,) = ask(bootstrap, body, 30).results
    error: WireError = result.error_code
    return error


def _admin_run(bootstrap: str) -> dict[str, Any]:
    seen: dict[str, Any] = {}
    _find(bootstrap, "admin")
    joined = _share_heartbeat(bootstrap, "admin", "m1", 0)
    seen["joined"] = joined.error_code
    seen["no_group"] = _share_heartbeat(bootstrap, " ", "m1", 0).error_code
    seen["listed"] = _list_groups(bootstrap, "share")
    seen["listed_consumer"] = _list_groups(bootstrap, "consumer")
    seen["consumer_heartbeat"] = _consumer_heartbeat(bootstrap, "admin").error_code
    seen["classic_join"] = _classic_join(bootstrap, "admin")
    seen["describe_groups"] = _describe_groups(bootstrap, "admin")
    seen["delete_while_member"] = _delete_group(bootstrap, "admin")
    seen["alter_while_member"] = _alter_offsets(bootstrap, "admin", 0).error_code
    seen["delete_offsets_while_member"] = _delete_offsets(bootstrap, "admin", TOPIC).error_code
    seen["left"] = _share_heartbeat(bootstrap, "admin", "m1", -1).error_code
    seen["listed_empty"] = _list_groups(bootstrap, "share")
    altered = _alter_offsets(bootstrap, "admin", 0)
    seen["altered"] = (altered.error_code, altered.responses[0].partitions[0].error_code)
    described = _describe_offsets(bootstrap, "admin")
    seen["described"] = (
        described.error_code,
        {p.partition_index: (p.start_offset, p.error_code) for p in described.topics[0].partitions},
    )
    deleted = _delete_offsets(bootstrap, "admin", TOPIC, "missing")
    seen["deleted"] = (deleted.error_code, {t.topic_name: t.error_code for t in deleted.responses})
    after = _describe_offsets(bootstrap, "admin")
    seen["after"] = {p.partition_index: p.start_offset for p in after.topics[0].partitions}
    _alter_offsets(bootstrap, "admin", 0)  # the group's deletion takes its offsets with it
    admin = AdminClient({"bootstrap.servers": bootstrap})
    listed = admin.list_consumer_groups(request_timeout=30).result(30)
    seen["admin_listed"] = {g.group_id: g.is_simple_consumer_group for g in listed.valid}
    admin.delete_consumer_groups(["admin"], request_timeout=30)["admin"].result(30)
    seen["listed_after"] = _list_groups(bootstrap)
    seen["described_after"] = describe(bootstrap, "admin").error_code
    gone = _describe_offsets(bootstrap, "admin")
    seen["offsets_after"] = {p.partition_index: p.start_offset for p in gone.topics[0].partitions}
    return seen


async def test_the_admin_apis_list_describe_and_delete_a_share_group_and_its_offsets(
    cluster: KafkaCluster,
) -> None:
    seen = await asyncio.to_thread(_admin_run, cluster.bootstrap())
    assert seen["joined"] is WireError.none
    assert seen["no_group"] is WireError.invalid_request
    assert seen["listed"] == {"admin": ("share", "Stable", "share")}
    assert seen["listed_consumer"] == {}
    assert seen["consumer_heartbeat"] is WireError.group_id_not_found, "one kind of group"
    assert seen["classic_join"] is WireError.inconsistent_group_protocol
    assert seen["describe_groups"] == (WireError.none, "Dead"), "DescribeGroups: classic only"
    assert seen["delete_while_member"] is WireError.non_empty_group
    assert seen["alter_while_member"] is WireError.non_empty_group
    assert seen["delete_offsets_while_member"] is WireError.non_empty_group
    assert seen["left"] is WireError.none
    assert seen["listed_empty"] == {"admin": ("share", "Empty", "share")}
    assert seen["altered"] == (WireError.none, WireError.none)
    assert seen["described"] == (WireError.none, {0: (0, WireError.none), 1: (-1, WireError.none)})
    assert seen["deleted"] == (
        WireError.none,
        {TOPIC: WireError.none, "missing": WireError.unknown_topic_or_partition},
    )
    assert seen["after"] == {0: -1, 1: -1}
    assert seen["admin_listed"] == {}, "listing consumer groups asks for their types only"
    assert "admin" not in seen["listed_after"]
    assert seen["described_after"] is WireError.group_id_not_found
    assert seen["offsets_after"] == {0: -1, 1: -1}


def _classic_then_share(bootstrap: str) -> tuple[WireError, WireError]:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "classic"})
    consumer.subscribe([TOPIC])
    try:
        wait_for("a classic member", lambda: consumer.poll(0.2) is None and consumer.assignment())
        share = _share_heartbeat(bootstrap, "classic", "m1", 0).error_code
    finally:
        consumer.close()
    after = _share_heartbeat(bootstrap, "classic", "m1", 0).error_code
    return share, after


async def test_a_share_heartbeat_to_a_classic_group_with_members_is_refused(
    cluster: KafkaCluster,
) -> None:
    share, after = await asyncio.to_thread(_classic_then_share, cluster.bootstrap())
    assert share is WireError.group_id_not_found
    assert after is WireError.none, "an empty group may become a share group"


def _tune(bootstrap: str) -> dict[str, Any]:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    seen: dict[str, Any] = {}
    _find(bootstrap, "tuned", "untuned")
    seen["before"] = _share_heartbeat(bootstrap, "tuned", "m1", 0).heartbeat_interval
    (described,) = admin.describe_configs([ConfigResource("group", "tuned")]).values()
    entry = described.result(30)["share.heartbeat.interval.ms"]
    seen["default"] = entry.value
    changes = [
        ConfigEntry(
            "share.heartbeat.interval.ms", "7000", incremental_operation=AlterConfigOpType.SET
        ),
        ConfigEntry(
            "share.session.timeout.ms", "50000", incremental_operation=AlterConfigOpType.SET
        ),
    ]
    (altered,) = admin.incremental_alter_configs(
        [ConfigResource("group", "tuned", incremental_configs=changes)]
    ).values()
    altered.result(30)
    (described,) = admin.describe_configs([ConfigResource("group", "tuned")]).values()
    configs = described.result(30)
    seen["described"] = (
        configs["share.heartbeat.interval.ms"].value,
        configs["share.session.timeout.ms"].value,
    )
    epoch = 1

    def interval() -> Any:
        nonlocal epoch
        answer = _share_heartbeat(bootstrap, "tuned", "m1", epoch)
        epoch = int(answer.member_epoch) or epoch
        return answer.heartbeat_interval == _timedelta_ms(7000)

    wait_for("the group's own heartbeat interval", interval, 30)
    seen["other"] = _share_heartbeat(bootstrap, "untuned", "m1", 0).heartbeat_interval
    return seen


async def test_a_groups_own_share_configs_override_the_brokers_group_share_properties(
    cluster: KafkaCluster,
) -> None:
    seen = await asyncio.to_thread(_tune, cluster.bootstrap())
    assert seen["before"] == _timedelta_ms(200)
    assert seen["default"] == "200"
    assert seen["described"] == ("7000", "50000")
    assert seen["other"] == _timedelta_ms(200)
