"""Static members (KIP-345) under real clients: a restart within the session keeps the group.

Integration tests on the 3-broker cluster, after librdkafka's test 0102: two consumers with a
`group.instance.id` share a topic; one is closed (a static member sends no LeaveGroup) and a new
consumer with the same instance id starts within the session timeout. It gets the partitions
its instance had, the group's generation does not change, and the other member sees no
rebalance (no revoke or assign). Once a static member stays away past its session timeout, the
group rebalances and the other member takes every partition.
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Callable
from typing import Any, Final

from confluent_kafka import Consumer
from kafka import ConsumerRebalanceListener, KafkaConsumer

from diskless.kafka_server import KafkaCluster

PARTITIONS: Final = 4
SESSION_TIMEOUT_MS: Final = 6000
QUIET_S: Final = 3.0
"""How long the other member is watched for a rebalance that must not come (half a session)."""
DEADLINE_S: Final = 60.0

Events = list[tuple[str, frozenset[int]]]


class _Librdkafka:
    """confluent-kafka consumers of one group, each a static member, and the rebalance callbacks
    each saw (driven by `poll`, from one thread at a time)."""

    def __init__(self, bootstrap: str, group: str, topic: str) -> None:
        self.bootstrap, self.group, self.topic = bootstrap, group, topic
        self.events: dict[str, Events] = {}

    def start(self, name: str, instance: str) -> Consumer:
        consumer = Consumer(
            {
                "bootstrap.servers": self.bootstrap,
                "group.id": self.group,
                "group.instance.id": instance,
                "client.id": name,
                "session.timeout.ms": SESSION_TIMEOUT_MS,
                "heartbeat.interval.ms": 300,
                "enable.auto.commit": False,
            }
        )
        events = self.events.setdefault(name, [])

        def on_assign(_: Consumer, partitions: list[Any]) -> None:
            events.append(("assign", frozenset(p.partition for p in partitions)))

        def on_revoke(_: Consumer, partitions: list[Any]) -> None:
            events.append(("revoke", frozenset(p.partition for p in partitions)))

        consumer.subscribe([self.topic], on_assign=on_assign, on_revoke=on_revoke)
        return consumer


def _owned(consumer: Consumer) -> frozenset[int]:
    return frozenset(tp.partition for tp in consumer.assignment())


def _poll_until(consumers: list[Consumer], done: Callable[[], bool], what: str) -> None:
    deadline = time.monotonic() + DEADLINE_S
    while not done():
        assert time.monotonic() < deadline, f"timed out waiting until {what}"
        for consumer in consumers:
            message = consumer.poll(0.1)
            assert message is None or message.error() is None, message.error()


def _poll_for(consumers: list[Consumer], seconds: float) -> None:
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        for consumer in consumers:
            consumer.poll(0.1)


def _split(*consumers: Consumer) -> bool:
    owned = [_owned(c) for c in consumers]
    return all(owned) and sum(map(len, owned)) == PARTITIONS == len(frozenset().union(*owned))


async def _generation(cluster: KafkaCluster, group: str) -> int:
    owner = await cluster.coordinator.group_ownership(group)
    assert owner is not None
    return owner.generation


async def test_librdkafka_static_member_restarted_within_its_session_keeps_its_partitions(
    cluster: KafkaCluster,
) -> None:
    await cluster.create_topic("static", PARTITIONS)
    group = _Librdkafka(cluster.bootstrap("rack-0"), "static-group", "static")
    a = group.start("a", "instance-a")
    b = group.start("b", "instance-b")
    await asyncio.to_thread(_poll_until, [a, b], lambda: _split(a, b), "a and b share")
    a_owned, b_owned = _owned(a), _owned(b)
    a_events = list(group.events["a"])
    generation = await _generation(cluster, "static-group")

    # b goes away without leaving (a static member), and a new b starts within the session.
    await asyncio.to_thread(b.close)
    b2 = group.start("b2", "instance-b")
    await asyncio.to_thread(_poll_until, [a, b2], lambda: bool(_owned(b2)), "b2 is assigned")
    await asyncio.to_thread(_poll_for, [a, b2], QUIET_S)
    assert group.events["b2"] == [("assign", b_owned)]
    assert _owned(b2) == b_owned and _owned(a) == a_owned
    assert group.events["a"] == a_events, "a saw a rebalance"
    assert await _generation(cluster, "static-group") == generation

    # b2 goes away too: the group waits for its session to time out, then rebalances.
    await asyncio.to_thread(b2.close)
    await asyncio.to_thread(_poll_for, [a], QUIET_S)
    assert group.events["a"] == a_events, "a rebalanced before b's session timed out"
    every = frozenset(range(PARTITIONS))
    await asyncio.to_thread(_poll_until, [a], lambda: _owned(a) == every, "a takes all")
    assert group.events["a"][len(a_events) :] == [("revoke", a_owned), ("assign", every)]
    assert await _generation(cluster, "static-group") > generation
    await asyncio.to_thread(a.close)


class _KafkaPythonMember(threading.Thread):
    """A kafka-python consumer, a static member, polled in a thread of its own until stopped:
    the partitions it owns after each poll, and the rebalance callbacks it saw."""

    def __init__(self, bootstrap: str, instance: str) -> None:
        super().__init__()
        self.bootstrap, self.instance = bootstrap, instance
        self.events: Events = []
        self.owned: frozenset[int] = frozenset()
        self.stop = threading.Event()
        self.failure: BaseException | None = None

    def run(self) -> None:
        consumer = KafkaConsumer(
            bootstrap_servers=self.bootstrap,
            group_id="kafka-python-static",
            group_instance_id=self.instance,
            session_timeout_ms=SESSION_TIMEOUT_MS,
            heartbeat_interval_ms=300,
            enable_auto_commit=False,
        )
        events = self.events

        class Listener(ConsumerRebalanceListener):  # type: ignore[misc]
            def on_partitions_revoked(self, revoked: Any) -> None:
                events.append(("revoke", frozenset(tp.partition for tp in revoked)))

            def on_partitions_assigned(self, assigned: Any) -> None:
                events.append(("assign", frozenset(tp.partition for tp in assigned)))

        try:
            consumer.subscribe(["static"], listener=Listener())
            while not self.stop.is_set():
                consumer.poll(timeout_ms=100)
                self.owned = frozenset(tp.partition for tp in consumer.assignment())
        except BaseException as e:
            self.failure = e
        finally:
            consumer.close()  # a static member sends no LeaveGroup

    def close(self) -> None:
        self.stop.set()
        self.join()
        assert self.failure is None, self.failure


def _wait_until(done: Callable[[], bool], what: str) -> None:
    deadline = time.monotonic() + DEADLINE_S
    while not done():
        assert time.monotonic() < deadline, f"timed out waiting until {what}"
        time.sleep(0.1)


def _kafka_python_restart(bootstrap: str) -> None:
    a = _KafkaPythonMember(bootstrap, "instance-a")
    b = _KafkaPythonMember(bootstrap, "instance-b")
    a.start()
    b.start()

    def split() -> bool:
        return bool(a.owned) and bool(b.owned) and a.owned | b.owned == set(range(PARTITIONS))

    _wait_until(split, "a and b share")
    time.sleep(QUIET_S)  # the first rebalances settle
    assert split() and not a.owned & b.owned
    a_owned, b_owned, a_events = a.owned, b.owned, list(a.events)
    b.close()
    b2 = _KafkaPythonMember(bootstrap, "instance-b")
    b2.start()
    _wait_until(lambda: bool(b2.owned), "b2 is assigned")
    time.sleep(QUIET_S)
    seen = {"a": list(a.events), "b2": list(b2.events)}  # closing revokes too
    owned = {"a": a.owned, "b2": b2.owned}
    b2.close()
    a.close()
    # kafka-python revokes nothing before its first assignment.
    assert seen["b2"] == [("revoke", frozenset()), ("assign", b_owned)]
    assert owned == {"a": a_owned, "b2": b_owned}
    assert seen["a"] == a_events, "a saw a rebalance"


async def test_kafka_python_static_member_restarted_within_its_session_keeps_its_partitions(
    cluster: KafkaCluster,
) -> None:
    await cluster.create_topic("static", PARTITIONS)
    await asyncio.to_thread(_kafka_python_restart, cluster.bootstrap("rack-1"))
