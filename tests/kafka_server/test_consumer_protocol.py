"""Acceptance: Kafka 4's consumer group protocol (KIP-848) with librdkafka consumers
(`group.protocol=consumer`) against real broker processes over a PostgreSQL batch coordinator.

Broker processes 0 and 1 serve a 6-partition topic that an idempotent producer keeps filling.
One member reads every partition; two more join and the three split them; the process of the
group's coordinator is SIGKILLed and restarted (the group's state, stored in the batch
coordinator, carries the members' epochs and partitions to the next owner); a member leaves and
the other two take its partitions. Then the run is checked as the classic protocol's is
(`_group_audit`): committed offsets never move backwards, every produced record is consumed,
each partition is resumed at its committed offset; and, in every state the group stored, no
partition is owned by two members and no epoch goes back. ConsumerGroupDescribe is read through
confluent-kafka's AdminClient along the way.
"""

from __future__ import annotations

import logging
import time
from pathlib import Path
from typing import Final

from confluent_kafka import ConsumerGroupState, ConsumerGroupType, KafkaException
from confluent_kafka.admin import AdminClient

from diskless.coordinator import PostgresBatchCoordinator
from testkit.postgres import database_dsn
from testkit.processes import BrokerProcess, bootstrap
from tests.kafka_server._group_audit import (
    Commits,
    KeepProducing,
    Member,
    Observer,
    check_all_consumed,
    check_forward,
    check_owned_once,
    check_resumes,
    end_offsets,
    episodes,
    longest_double_ownership,
    print_group_logs,
    progressing,
    raise_member_failure,
    stop_all,
    wait_until,
)

TOPIC: Final = "events"
PARTITIONS: Final = 6
GROUP: Final = "kip848"
HEARTBEAT_MS: Final = 300
MEMBER_CONFIG: Final = {"group.id": GROUP, "group.protocol": "consumer"}
"""No `partition.assignment.strategy` nor session settings: the consumer protocol refuses them
(the broker assigns, and its group configs set the session)."""
PRODUCE_INTERVAL_S: Final = 0.005


def _cluster(tmp_path: Path) -> tuple[str, list[BrokerProcess]]:
    """The PostgreSQL database's DSN, and broker processes 0 and 1 on it (not started yet)."""
    dsn = database_dsn(tmp_path, "cluster")
    options = [
        "--coordinator", dsn, "--data-dir", str(tmp_path / "data"),
        "--topic", f"{TOPIC}:{PARTITIONS}", "--log-level", "INFO",
        "--override", f"group.consumer.heartbeat.interval.ms={HEARTBEAT_MS}",
        "--override", "group.consumer.session.timeout.ms=10000",
        # A restarted broker waits for its old registration to expire: keep that short.
        "--server-option", "broker_session_timeout_ms=3000",
    ]  # fmt: skip
    return dsn, [BrokerProcess(i, 2, options, tmp_path / f"broker-{i}.log") for i in range(2)]


def _describe(address: str) -> tuple[ConsumerGroupState, ConsumerGroupType, dict[str, list[int]]]:
    """The group as ConsumerGroupDescribe answers it; on failure, the admin client's own log of
    the requests it sent and what came back is printed (shown when the test fails)."""
    log = logging.getLogger(f"{__name__}.admin")
    lines = LogLines()
    log.addHandler(lines)
    log.setLevel(logging.DEBUG)
    log.propagate = False
    admin = AdminClient({"bootstrap.servers": address, "debug": "admin,protocol", "logger": log})
    (future,) = admin.describe_consumer_groups([GROUP], request_timeout=10).values()
    try:
        described = future.result()
    except KafkaException:
        admin.poll(0)  # hands the client's queued log lines to `log`
        print("the admin client's log:", *lines.records[-300:], sep="\n  ")
        raise
    finally:
        log.removeHandler(lines)
    members = {
        m.client_id or m.member_id: sorted(tp.partition for tp in m.assignment.topic_partitions)
        for m in described.members
    }
    return described.state, described.type, members


class LogLines(logging.Handler):
    """Keeps the lines logged to it."""

    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.records: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append(self.format(record))


def test_consumers_share_rebalance_and_survive_their_coordinators_death(tmp_path: Path) -> None:
    dsn, brokers = _cluster(tmp_path)
    commits = Commits()
    members: list[Member] = []
    observer: Observer | None = None
    producer: KeepProducing | None = None
    try:
        for broker in brokers:
            broker.start()
        servers = bootstrap(brokers)
        observer = Observer(lambda: PostgresBatchCoordinator(dsn), GROUP, TOPIC)
        producer = KeepProducing(servers, TOPIC, PARTITIONS, PRODUCE_INTERVAL_S)
        members = [Member(f"m{i}", servers, MEMBER_CONFIG, commits) for i in range(3)]

        members[0].start(TOPIC)  # one consumer reads everything
        wait_until(
            "one member reads every partition",
            progressing(members[:1], observer, PARTITIONS),
            members,
        )
        alone = _describe(servers)
        assert alone[:2] == (ConsumerGroupState.STABLE, ConsumerGroupType.CONSUMER), alone
        assert alone[2] == {"m0": list(range(PARTITIONS))}

        for member in members[1:]:  # two more join: the three split the partitions
            member.start(TOPIC)
        wait_until(
            "three members share the topic", progressing(members, observer, PARTITIONS), members
        )
        assert sorted(len(m.holding()) for m in members) == [2, 2, 2]

        owner = observer.owner()  # the coordinator's process dies, and comes back
        assert owner is not None
        victim = brokers[owner.broker_id]
        victim.kill()
        time.sleep(1.0)
        victim.start()
        wait_until("the group recovered", progressing(members, observer, PARTITIONS), members)
        moved = observer.owner()
        assert moved is not None and moved[:2] != owner[:2], "the group has a new owner"

        members[2].stop()  # a member leaves: the two others take its partitions
        wait_until(
            "two members share the topic", progressing(members[:2], observer, PARTITIONS), members
        )

        producer.stop()
        ends = end_offsets(producer.sent, PARTITIONS)
        wait_until("the group committed everything", lambda: observer.committed() == ends, members)
        final = _describe(servers)
    finally:
        stop_all(members, producer, observer, brokers)
        print_group_logs(brokers, GROUP)  # shown when the test fails, wherever it failed
    run_end = time.monotonic()
    raise_member_failure(members)

    found = episodes(members, run_end)
    overlap, who = longest_double_ownership(found)
    print(
        f"{len(observer.states)} group states stored; {producer.sent} records;"
        f" longest double ownership seen by the clients {overlap:.3f} s ({who});"
        f" {commits.summary()}"
    )
    assert final[:2] == (ConsumerGroupState.STABLE, ConsumerGroupType.CONSUMER), final
    assert sorted(p for held in final[2].values() for p in held) == list(range(PARTITIONS))
    assert set(final[2]) == {"m0", "m1"}
    check_owned_once(observer.states)
    # Three joins and a leave, each a bump; the members' own leaves at the end may come after
    # the observer's last look, and the takeover carries the epoch over without one.
    assert observer.states[-1][1].group_epoch >= 4, "joins, a leave: each bumped the epoch"
    check_forward(observer.offsets)
    check_resumes(found, commits.done, commits.uncertain)
    check_all_consumed(members, producer.sent)


CHURN_ROUNDS: Final = 4


def test_members_come_and_go_under_load_while_a_broker_process_dies(tmp_path: Path) -> None:
    """Churn: three members read; one after another leaves and a new one joins in its place,
    every second, while the producer writes; in the middle of it the coordinator's process is
    SIGKILLed (it comes back later). Every record is consumed, committed offsets never go back,
    and no stored state of the group has a partition owned twice."""
    dsn, brokers = _cluster(tmp_path)
    commits = Commits()
    members: list[Member] = []
    observer: Observer | None = None
    producer: KeepProducing | None = None
    try:
        for broker in brokers:
            broker.start()
        servers = bootstrap(brokers)
        observer = Observer(lambda: PostgresBatchCoordinator(dsn), GROUP, TOPIC)
        producer = KeepProducing(servers, TOPIC, PARTITIONS, PRODUCE_INTERVAL_S)
        members = [Member(f"m{i}", servers, MEMBER_CONFIG, commits) for i in range(3)]
        for member in members:
            member.start(TOPIC)
        wait_until(
            "three members share the topic", progressing(members, observer, PARTITIONS), members
        )
        live = list(members)
        victim: BrokerProcess | None = None
        for round_ in range(CHURN_ROUNDS):
            leaving = live.pop(0)
            leaving.stop()
            joining = Member(f"m{3 + round_}", servers, MEMBER_CONFIG, commits)
            members.append(joining)
            live.append(joining)
            joining.start(TOPIC)
            if round_ == 1:  # the coordinator dies in the middle of the churn
                owner = observer.owner()
                assert owner is not None
                victim = brokers[owner.broker_id]
                victim.kill()
            time.sleep(1.0)
        assert victim is not None
        victim.start()
        wait_until(
            "the last three share the topic", progressing(live, observer, PARTITIONS), members
        )

        producer.stop()
        ends = end_offsets(producer.sent, PARTITIONS)
        wait_until("the group committed everything", lambda: observer.committed() == ends, members)
    finally:
        stop_all(members, producer, observer, brokers)
    run_end = time.monotonic()
    raise_member_failure(members)
    found = episodes(members, run_end)
    overlap, who = longest_double_ownership(found)
    print(
        f"{len(observer.states)} group states stored; {producer.sent} records;"
        f" longest double ownership seen by the clients {overlap:.3f} s ({who});"
        f" {commits.summary()}"
    )
    check_owned_once(observer.states)
    check_forward(observer.offsets)
    check_resumes(found, commits.done, commits.uncertain)
    check_all_consumed(members, producer.sent)
