"""Unit: a share group's state machine (KIP-932's ShareGroupHeartbeat): joins, epochs and
fencing, leaving and session expiry (with the members that departed), the maximum size, the
requests Kafka refuses, and the stored state (a new owner continues from it); then a property
over random heartbeats, leaves and expiries, with its seed printed."""

from __future__ import annotations

import os
import random

import hypothesis
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from kio.schema.errors import ErrorCode as WireError

from diskless._types import TopicPartition
from diskless.kafka_server._coordination.consumer_group_state import Snapshot, encode_snapshot
from diskless.kafka_server._coordination.share_group_state import (
    ShareGroupConfig,
    ShareGroupState,
    ShareHeartbeatAnswer,
    ShareHeartbeatRequest,
    ShareSnapshot,
    decode_group_state,
    encode_share_snapshot,
)

SEED = int(os.environ.get("KAFKA_FUZZ_SEED", random.randrange(2**32)))
CONFIG = ShareGroupConfig(session_timeout_ms=10_000, heartbeat_interval_ms=1_000, max_size=4)
TOPICS = {"q": 4, "r": 2}


def beat(
    group: ShareGroupState,
    member: str,
    epoch: int,
    topics: tuple[str, ...] | None = None,
    *,
    now: float = 0,
) -> ShareHeartbeatAnswer:
    request = ShareHeartbeatRequest(member, epoch, subscribed_topic_names=topics)
    step = group.heartbeat(request, topics=TOPICS, config=CONFIG, now=now)
    assert step.answer is not None
    return step.answer


def q(*indexes: int) -> frozenset[TopicPartition]:
    return frozenset(TopicPartition("q", i) for i in indexes)


def test_a_member_joins_with_the_whole_topic_then_shares_it_with_the_next() -> None:
    group = ShareGroupState("g")
    first = beat(group, "m1", 0, ("q",))
    assert first.error is WireError.none and first.member_epoch == 1
    assert first.assignment == q(0, 1, 2, 3) and first.heartbeat_interval_ms == 1_000
    second = beat(group, "m2", 0, ("q",))
    assert second.member_epoch == 2 and second.assignment is not None
    moved = beat(group, "m1", 1)  # no revocation: it moves to the new target at once
    assert moved.member_epoch == 2 and moved.assignment is not None
    assert moved.assignment | second.assignment == q(0, 1, 2, 3)
    assert not moved.assignment & second.assignment
    assert beat(group, "m1", 2).assignment is None, "unchanged: not sent again"
    assert group.describe().state == "Stable" and group.describe().assignor == "simple"


def test_epochs_fence_and_unknown_members_are_refused() -> None:
    group = ShareGroupState("g")
    beat(group, "m1", 0, ("q",))
    beat(group, "m2", 0, ("q",))
    assert beat(group, "m1", 1).member_epoch == 2
    assert beat(group, "m1", 1).error is WireError.none, "the previous epoch: a lost answer"
    assert beat(group, "m1", 3).error is WireError.fenced_member_epoch
    beat(group, "m3", 0, ("q",))
    assert beat(group, "m1", 2).member_epoch == 3
    assert beat(group, "m1", 1).error is WireError.fenced_member_epoch
    assert beat(group, "nobody", 2).error is WireError.unknown_member_id
    rejoined = beat(group, "m1", 0, ("q",))
    assert rejoined.error is WireError.none and rejoined.assignment is not None


def test_the_maximum_size_refuses_a_new_member_only() -> None:
    group = ShareGroupState("g")
    for i in range(4):
        assert beat(group, f"m{i}", 0, ("q",)).error is WireError.none
    assert beat(group, "m9", 0, ("q",)).error is WireError.group_max_size_reached
    assert beat(group, "m0", 0, ("q",)).error is WireError.none


def test_kafkas_invalid_requests() -> None:
    group = ShareGroupState("g")
    assert beat(group, "", 0, ("q",)).error is WireError.invalid_request
    assert beat(group, "m1", 0).error is WireError.invalid_request
    assert beat(group, "m1", -2).error is WireError.invalid_request
    step = group.heartbeat(
        ShareHeartbeatRequest("m1", 0, rack_id=" ", subscribed_topic_names=("q",)),
        topics=TOPICS,
        config=CONFIG,
        now=0,
    )
    assert step.answer is not None and step.answer.error is WireError.invalid_request
    assert not group.members and step.store is None


def test_leaving_and_expiry_remove_members_and_name_them() -> None:
    group = ShareGroupState("g")
    beat(group, "m1", 0, ("q",), now=0)
    beat(group, "m2", 0, ("q",), now=0)
    step = group.heartbeat(ShareHeartbeatRequest("m1", -1), topics=TOPICS, config=CONFIG, now=1)
    assert step.answer is not None and step.answer.member_epoch == -1
    assert step.departed == ("m1",) and step.store is not None
    assert beat(group, "m2", 2, now=5).assignment == q(0, 1, 2, 3)
    assert group.expire(14, CONFIG).departed == (), "heard from at 5"
    expired = group.expire(16, CONFIG)
    assert expired.departed == ("m2",) and expired.store is not None
    assert group.describe().state == "Empty" and group.exists()
    gone = group.heartbeat(ShareHeartbeatRequest("m2", -1), topics=TOPICS, config=CONFIG, now=17)
    assert gone.answer is not None and gone.answer.error is WireError.unknown_member_id


def test_a_new_owner_continues_from_the_stored_state() -> None:
    group = ShareGroupState("g")
    beat(group, "m1", 0, ("q", "r"))
    step = group.heartbeat(
        ShareHeartbeatRequest("m2", 0, subscribed_topic_names=("q",)),
        topics=TOPICS,
        config=CONFIG,
        now=0,
    )
    assert step.store is not None
    decoded = decode_group_state(encode_share_snapshot(step.store))
    assert isinstance(decoded, ShareSnapshot) and decoded == step.store
    taken = ShareGroupState("g", decoded, now=100)
    assert taken.describe() == group.describe()
    assert beat(taken, "m2", 2, now=100).error is WireError.none
    assert taken.expire(105, CONFIG).departed == (), "sessions start afresh"
    consumer = Snapshot(1, 1, (), (), ())
    assert decode_group_state(encode_snapshot(consumer)) == consumer


@hypothesis.seed(SEED)
@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    ops=st.lists(
        st.tuples(
            st.sampled_from(["join", "beat", "leave", "expire", "reload"]),
            st.sampled_from([f"m{i}" for i in range(6)]),
            st.sampled_from([("q",), ("r",), ("q", "r")]),
        ),
        max_size=40,
    )
)
def test_random_steps_keep_every_partition_assigned_and_epochs_forward(
    ops: list[tuple[str, str, tuple[str, ...]]],
) -> None:
    print(f"seed: {SEED} (set KAFKA_FUZZ_SEED to replay)")
    config = ShareGroupConfig(session_timeout_ms=3_000, heartbeat_interval_ms=1_000, max_size=5)
    group, now, stored = ShareGroupState("g"), 0.0, None
    epochs: dict[str, int] = {}
    for op, member, topics in ops:
        now += 1
        step = None
        if op == "join":
            step = group.heartbeat(
                ShareHeartbeatRequest(member, 0, subscribed_topic_names=topics),
                topics=TOPICS, config=config, now=now,
            )  # fmt: skip
        elif op == "beat" and member in group.members:
            epoch = group.members[member].member_epoch
            step = group.heartbeat(
                ShareHeartbeatRequest(member, epoch), topics=TOPICS, config=config, now=now
            )
        elif op == "leave":
            step = group.heartbeat(
                ShareHeartbeatRequest(member, -1), topics=TOPICS, config=config, now=now
            )
        elif op == "expire":
            step = group.expire(now, config)
        elif op == "reload" and stored is not None:
            group = ShareGroupState("g", stored, now=now)
        if step is not None and step.store is not None:
            stored = step.store
        for m in step.departed if step is not None else ():
            assert m not in group.members
        for m, state in group.members.items():
            assert state.member_epoch >= epochs.get(m, 0) or m not in epochs
            epochs[m] = state.member_epoch
            assert state.member_epoch <= group.group_epoch
        epochs = {m: e for m, e in epochs.items() if m in group.members}
    for m in list(group.members):  # once every member has heartbeaten, all is assigned
        epoch = group.members[m].member_epoch
        answer = group.heartbeat(
            ShareHeartbeatRequest(m, epoch), topics=TOPICS, config=config, now=now
        ).answer
        assert answer is not None and answer.error is WireError.none
    for topic, count in TOPICS.items():
        subscribers = [m for m in group.members.values() if topic in m.subscribed_topic_names]
        for index in range(count if subscribers else 0):
            tp = TopicPartition(topic, index)
            assert any(tp in m.assigned for m in subscribers), tp
    for m in group.members.values():
        assert m.member_epoch == group.assignment_epoch
        assert all(tp.topic in m.subscribed_topic_names for tp in m.assigned)
