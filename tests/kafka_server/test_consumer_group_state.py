"""The consumer group protocol's state machine (KIP-848), on a virtual clock: each rule, and a
random simulation of well-behaved and lagging members in which no partition is ever owned by
two members."""

from __future__ import annotations

import os
import random

import hypothesis
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from kio.schema.errors import ErrorCode as WireError

from diskless._types import TopicPartition
from diskless.kafka_server._coordination.consumer_group_state import (
    DEFAULT_CONFIG,
    ConsumerGroupConfig,
    ConsumerGroupState,
    HeartbeatAnswer,
    HeartbeatRequest,
    Step,
    decode_snapshot,
    encode_snapshot,
)

SEED = int(os.environ.get("KAFKA_FUZZ_SEED", random.randrange(2**32)))
TOPICS = {"a": 4, "b": 2}


def tps(topic: str, *indexes: int) -> frozenset[TopicPartition]:
    return frozenset(TopicPartition(topic, i) for i in indexes)


class Rig:
    """A group and a virtual clock; heartbeats as a member would send them."""

    def __init__(self, config: ConsumerGroupConfig = DEFAULT_CONFIG) -> None:
        self.group = ConsumerGroupState("g")
        self.now = 0.0
        self.config = config
        self.topics = dict(TOPICS)
        self.stored: list[bytes] = []

    def send(self, request: HeartbeatRequest) -> HeartbeatAnswer:
        step = self.group.heartbeat(
            request,
            topics=self.topics,
            describable=set(self.topics),
            config=self.config,
            now=self.now,
        )
        self._keep(step)
        assert step.answer is not None
        check_owned_once(self.group)
        return step.answer

    def _keep(self, step: Step) -> None:
        if step.store is not None:
            self.stored.append(encode_snapshot(step.store))

    def join(
        self,
        member: str,
        topics: tuple[str, ...] = ("a",),
        *,
        instance_id: str | None = None,
        server_assignor: str | None = None,
    ) -> HeartbeatAnswer:
        request = HeartbeatRequest(
            member,
            0,
            instance_id=instance_id,
            rebalance_timeout_ms=10_000,
            subscribed_topic_names=topics,
            server_assignor=server_assignor,
        )
        return self.send(request)

    def beat(
        self, member: str, epoch: int, owned: frozenset[TopicPartition] | None = None
    ) -> HeartbeatAnswer:
        return self.send(HeartbeatRequest(member, epoch, owned=owned))

    def expire(self) -> None:
        self._keep(self.group.expire(self.now, self.config))
        check_owned_once(self.group)


def check_owned_once(group: ConsumerGroupState) -> None:
    seen: set[TopicPartition] = set()
    for member in group.members.values():
        owned = member.owned()
        assert not owned & seen, f"owned twice: {owned & seen}"
        seen |= owned


def test_a_lone_member_gets_every_partition_and_then_no_assignment_until_it_changes() -> None:
    rig = Rig()
    first = rig.join("m1")
    assert (first.error, first.member_epoch, first.assignment) == (
        WireError.none,
        1,
        tps("a", 0, 1, 2, 3),
    )
    assert first.heartbeat_interval_ms == 5_000
    again = rig.beat("m1", 1, tps("a", 0, 1, 2, 3))
    assert (again.member_epoch, again.assignment) == (1, None)
    assert rig.group.state_name() == "Stable"
    assert len(rig.stored) == 1, "a heartbeat that changes nothing stores nothing"


def test_a_partition_goes_to_its_new_owner_only_after_the_old_one_revoked_it() -> None:
    rig = Rig()
    rig.join("m1")
    second = rig.join("m2")
    assert (second.member_epoch, second.assignment) == (2, frozenset()), "all held by m1"
    assert rig.group.state_name() == "Reconciling"
    revoke = rig.beat("m1", 1, tps("a", 0, 1, 2, 3))
    assert (revoke.member_epoch, revoke.assignment) == (1, tps("a", 0, 1)), "keeps its epoch"
    still = rig.beat("m2", 2, frozenset())
    assert still.assignment is None, "m1 has not revoked yet"
    assert rig.beat("m1", 1, tps("a", 0, 1, 2, 3)).member_epoch == 1, "still revoking"
    done = rig.beat("m1", 1, tps("a", 0, 1))
    assert (done.member_epoch, done.assignment) == (2, tps("a", 0, 1)), "a new epoch is sent"
    got = rig.beat("m2", 2, frozenset())
    assert got.assignment == tps("a", 2, 3)
    rig.beat("m2", 2, tps("a", 2, 3))
    assert rig.group.state_name() == "Stable"


def test_fencing_by_member_epoch_and_unknown_members() -> None:
    rig = Rig()
    rig.join("m1")
    assert rig.beat("m1", 2).error is WireError.fenced_member_epoch
    assert rig.beat("m9", 1).error is WireError.unknown_member_id
    rig.join("m2")
    rig.beat("m1", 1, tps("a", 0, 1, 2, 3))
    rig.beat("m1", 1, tps("a", 0, 1))  # m1 now at epoch 2, previous 1
    lost = rig.beat("m1", 1, tps("a", 0, 1))
    assert (lost.error, lost.member_epoch) == (WireError.none, 2), "its last answer was lost"
    assert rig.beat("m1", 1, tps("a", 0, 1, 2)).error is WireError.fenced_member_epoch
    assert rig.beat("m1", 0, None).error is WireError.invalid_request, "a join needs topics"


def test_a_member_that_leaves_frees_its_partitions_and_bumps_the_epoch() -> None:
    rig = Rig()
    rig.join("m1")
    rig.join("m2")
    rig.beat("m1", 1, tps("a", 0, 1, 2, 3))
    rig.beat("m1", 1, tps("a", 0, 1))
    rig.beat("m2", 2, frozenset())
    left = rig.beat("m1", -1)
    assert (left.error, left.member_epoch) == (WireError.none, -1)
    assert rig.group.group_epoch == 3 and "m1" not in rig.group.members
    taken = rig.beat("m2", 2, tps("a", 2, 3))
    assert (taken.member_epoch, taken.assignment) == (3, tps("a", 0, 1, 2, 3))
    assert rig.beat("m1", 2).error is WireError.unknown_member_id


def test_a_static_member_rejoins_within_its_session_with_its_partitions_and_epoch() -> None:
    rig = Rig()
    rig.join("m1", instance_id="i1")
    rig.join("m2")
    rig.beat("m1", 1, tps("a", 0, 1, 2, 3))
    rig.beat("m1", 1, tps("a", 0, 1))
    rig.beat("m2", 2, frozenset())
    rig.beat("m2", 2, tps("a", 2, 3))
    epoch = rig.group.group_epoch
    gone = rig.send(HeartbeatRequest("m1", -2, instance_id="i1"))
    assert (gone.error, gone.member_epoch) == (WireError.none, -2)
    assert rig.group.group_epoch == epoch, "no rebalance"
    taken = rig.join("m3", instance_id="i2")  # a new member does not get i1's partitions
    assert taken.assignment == frozenset()
    refused = rig.join("m4", instance_id="i2")
    assert refused.error is WireError.unreleased_instance_id
    rig.now += 30
    epoch = rig.group.group_epoch
    back = rig.join("m1b", instance_id="i1")
    assert (back.error, back.assignment) == (WireError.none, tps("a", 0, 1))
    assert rig.group.group_epoch == epoch, "its return is no rebalance either"
    assert back.member_epoch == epoch and "m1" not in rig.group.members
    assert rig.send(HeartbeatRequest("m1", 2, instance_id="i1")).error is (
        WireError.fenced_instance_id
    )


def test_a_static_member_that_stays_away_past_its_session_is_removed() -> None:
    rig = Rig()
    rig.join("m1", instance_id="i1")
    rig.send(HeartbeatRequest("m1", -2, instance_id="i1"))
    rig.now += 45.1
    rig.expire()
    assert rig.group.is_empty() and rig.group.state_name() == "Empty"


def test_a_silent_member_is_removed_after_its_session_timeout() -> None:
    rig = Rig(ConsumerGroupConfig(session_timeout_ms=6_000, heartbeat_interval_ms=2_000))
    rig.join("m1")
    rig.join("m2")
    rig.now += 5
    rig.beat("m2", 2, frozenset())
    rig.expire()
    assert set(rig.group.members) == {"m1", "m2"}
    rig.now += 2
    rig.expire()
    assert set(rig.group.members) == {"m2"}
    assert rig.beat("m2", 2, frozenset()).assignment == tps("a", 0, 1, 2, 3)


def test_a_member_that_does_not_revoke_within_its_rebalance_timeout_is_removed() -> None:
    rig = Rig()
    rig.join("m1")
    rig.join("m2")
    rig.beat("m1", 1, tps("a", 0, 1, 2, 3))  # told to revoke a-2, a-3
    for _ in range(3):
        rig.now += 4
        rig.beat("m1", 1, tps("a", 0, 1, 2, 3))  # keeps its session, not its partitions
        rig.expire()
    assert "m1" not in rig.group.members
    assert rig.beat("m2", 2, frozenset()).assignment == tps("a", 0, 1, 2, 3)


def test_the_group_refuses_members_beyond_its_maximum_size() -> None:
    rig = Rig(ConsumerGroupConfig(max_size=1))
    rig.join("m1")
    assert rig.join("m2").error is WireError.group_max_size_reached


def test_a_regular_expression_takes_topics_as_they_appear() -> None:
    rig = Rig()
    request = HeartbeatRequest("m1", 0, rebalance_timeout_ms=1000, subscribed_topic_regex="a.*")
    assert rig.send(request).assignment == tps("a", 0, 1, 2, 3)
    rig.topics["ab"] = 1
    rig.topics["xab"] = 1  # matched only in part: not a full match
    answer = rig.beat("m1", 1, tps("a", 0, 1, 2, 3))
    assert answer.assignment == tps("a", 0, 1, 2, 3) | tps("ab", 0)
    bad = HeartbeatRequest("m2", 0, rebalance_timeout_ms=1000, subscribed_topic_regex="(")
    assert rig.send(bad).error is WireError.invalid_regular_expression


def test_the_group_continues_from_its_stored_state_with_members_epochs_and_partitions() -> None:
    rig = Rig()
    rig.join("m1")
    rig.join("m2")
    rig.beat("m1", 1, tps("a", 0, 1, 2, 3))  # m1 revoking a-2, a-3
    restored = ConsumerGroupState("g", decode_snapshot(rig.stored[-1]), now=rig.now)
    assert restored.snapshot() == rig.group.snapshot()
    rig.group = restored
    assert rig.beat("m2", 2, frozenset()).assignment is None, "a-2, a-3 still revoking"
    rig.beat("m1", 1, tps("a", 0, 1))
    assert rig.beat("m2", 2, frozenset()).assignment == tps("a", 2, 3)


def test_describe_names_kafkas_states_and_the_chosen_assignor() -> None:
    rig = Rig()
    assert rig.group.describe().state == "Empty"
    rig.join("m1", server_assignor="range")
    described = rig.group.describe()
    assert (described.state, described.assignor, described.group_epoch) == ("Stable", "range", 1)
    assert described.members[0].target == tuple(sorted(tps("a", 0, 1, 2, 3)))


def test_offset_commits_need_the_members_current_epoch() -> None:
    rig = Rig()
    assert rig.group.check_commit(-1, "", now=0) is WireError.none, "empty group: an admin"
    rig.join("m1")
    assert rig.group.check_commit(-1, "", now=0) is WireError.unknown_member_id
    assert rig.group.check_commit(0, "m1", now=0) is WireError.stale_member_epoch
    assert rig.group.check_commit(1, "m1", now=0) is WireError.none


@hypothesis.seed(SEED)
@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    actions=st.lists(
        st.tuples(st.sampled_from(["beat", "join", "leave", "lag", "tick"]), st.integers(0, 3)),
        max_size=60,
    )
)
def test_no_partition_is_ever_owned_by_two_members(actions: list[tuple[str, int]]) -> None:
    """Members join, leave, heartbeat what they were told, or lag (heartbeat what they owned
    before); time passes. After every step no partition has two owners, and a member's view
    of its partitions is always within what the group says it owns."""
    print(f"seed: {SEED} (set KAFKA_FUZZ_SEED to replay)")
    rig = Rig(ConsumerGroupConfig(session_timeout_ms=20_000))
    view: dict[str, tuple[int, frozenset[TopicPartition], frozenset[TopicPartition]]] = {}
    """member -> (its epoch, what it was told it owns, what it was told before)"""
    for action, index in actions:
        member = f"m{index}"
        if action == "join" and member not in view:
            answer = rig.join(member, ("a", "b"))
            before: frozenset[TopicPartition] = frozenset()
        elif action == "tick":
            rig.now += 4
            rig.expire()
            continue
        elif member not in view:
            continue
        elif action == "leave":
            rig.beat(member, -1)
            del view[member]
            continue
        else:
            epoch, before, earlier = view[member]
            answer = rig.beat(member, epoch, before if action == "beat" else earlier)
        if answer.error is not WireError.none:
            view.pop(member, None)  # fenced or removed: it rejoins later
            continue
        owned = answer.assignment if answer.assignment is not None else before
        view[member] = (answer.member_epoch, owned, before)
        assert owned <= rig.group.members[member].owned()
        believed = [v[1] for m, v in view.items() if m in rig.group.members]
        assert sum(map(len, believed)) == len(frozenset().union(*believed))
