"""Unit: Kafka's `simple` assignor for share groups: examples, and properties over random groups
(every subscribed partition given to at least one subscriber and to no more than the sharing
asks, balanced member counts, stickiness, determinism)."""

from __future__ import annotations

import os
import random
from collections.abc import Mapping, Set

import hypothesis
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from diskless._types import TopicPartition
from diskless.kafka_server._coordination.assignors import Assignment
from diskless.kafka_server._coordination.share_assignor import simple

SEED = int(os.environ.get("KAFKA_FUZZ_SEED", random.randrange(2**32)))
TOPICS = ("a", "b", "c")
Group = tuple[dict[str, set[str]], dict[str, int], dict[str, set[TopicPartition]]]


def tps(topic: str, *indexes: int) -> frozenset[TopicPartition]:
    return frozenset(TopicPartition(topic, i) for i in indexes)


def test_fewer_members_than_partitions_split_them() -> None:
    result = simple({"m1": {"a"}, "m2": {"a"}, "m3": {"a"}}, {"a": 3}, {})
    assert sorted(result.values(), key=sorted) == [tps("a", 0), tps("a", 1), tps("a", 2)]


def test_more_members_than_partitions_share_them() -> None:
    members = {f"m{i}": {"a"} for i in range(5)}
    result = simple(members, {"a": 2}, {})
    holders = {tp: [m for m, held in result.items() if tp in held] for tp in tps("a", 0, 1)}
    assert sorted(len(h) for h in holders.values()) == [3, 3]  # ceil(5 / 2) members each
    assert all(len(held) >= 1 for held in result.values())


def test_a_departed_members_partitions_go_to_the_others_and_the_rest_stay() -> None:
    subs = {"m1": {"a"}, "m2": {"a"}, "m3": {"a"}}
    before = simple(subs, {"a": 6}, {})
    after = simple({"m1": {"a"}, "m2": {"a"}}, {"a": 6}, before)
    assert after["m1"] | after["m2"] == tps("a", *range(6))
    assert before["m1"] <= after["m1"] and before["m2"] <= after["m2"]


def test_a_topic_that_does_not_exist_is_not_assigned() -> None:
    assert simple({"m1": {"missing"}}, {"a": 2}, {}) == {"m1": frozenset()}


@st.composite
def groups(draw: st.DrawFn) -> Group:
    partitions = {t: draw(st.integers(0, 7)) for t in TOPICS if draw(st.booleans())}
    members = draw(st.lists(st.sampled_from([f"m{i}" for i in range(10)]), unique=True))
    homogeneous = draw(st.booleans())
    common = set(draw(st.lists(st.sampled_from(TOPICS), min_size=1, unique=True)))
    subscriptions = {
        m: common
        if homogeneous
        else set(draw(st.lists(st.sampled_from(TOPICS), min_size=1, unique=True)))
        for m in members
    }
    every = [TopicPartition(t, i) for t in TOPICS for i in range(8)]
    current = {m: set(draw(st.lists(st.sampled_from(every), max_size=6))) for m in members}
    return subscriptions, partitions, current


def _check(
    subscriptions: Mapping[str, Set[str]], partitions: Mapping[str, int], result: Assignment
) -> None:
    assert set(result) == set(subscriptions)
    for member, held in result.items():
        assert all(tp.topic in subscriptions[member] for tp in held), "only subscribed topics"
        assert all(tp.partition < partitions.get(tp.topic, 0) for tp in held), "only real ones"
    for topic, count in partitions.items():
        subscribers = [m for m in subscriptions if topic in subscriptions[m]]
        for index in range(count):
            holders = [m for m in subscribers if TopicPartition(topic, index) in result[m]]
            assert subscribers == [] or holders, f"{topic}-{index} has a member"


@hypothesis.seed(SEED)
@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(group=groups())
def test_every_partition_has_a_member_and_counts_are_balanced(group: Group) -> None:
    print(f"seed: {SEED} (set KAFKA_FUZZ_SEED to replay)")
    subscriptions, partitions, current = group
    result = simple(subscriptions, partitions, current)
    _check(subscriptions, partitions, result)
    assert result == simple(dict(reversed(subscriptions.items())), partitions, current)
    assert simple(subscriptions, partitions, result) == result, "stable input, no movement"
    if subscriptions and len({frozenset(s) for s in subscriptions.values()}) == 1:
        wanted = [tp for t in next(iter(subscriptions.values())) if t in partitions
                  for tp in tps(t, *range(partitions[t]))]  # fmt: skip
        if wanted:
            sharing = -(-len(subscriptions) // len(wanted))
            for tp in wanted:
                assert 1 <= sum(tp in held for held in result.values()) <= sharing
            counts = [len(held) for held in result.values()]
            assert max(counts) - min(counts) <= 1 or max(counts) <= sharing


@hypothesis.seed(SEED)
@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(group=groups(), leaving=st.integers(0, 9))
def test_a_member_leaving_moves_only_its_partitions(group: Group, leaving: int) -> None:
    """Homogeneous, at least as many partitions as members: the members that stay keep what
    they had up to a balanced share (balance comes first: quotas are counted again), and the
    partitions of the one that left all have a member."""
    print(f"seed: {SEED} (set KAFKA_FUZZ_SEED to replay)")
    subscriptions, partitions, _ = group
    if len(subscriptions) < 2:
        return
    common = next(iter(subscriptions.values()))
    subscriptions = dict.fromkeys(subscriptions, common)
    total = sum(partitions.get(t, 0) for t in common)
    if total < len(subscriptions):
        return
    before = simple(subscriptions, partitions, {})
    gone = sorted(subscriptions)[leaving % len(subscriptions)]
    stay = {m: s for m, s in subscriptions.items() if m != gone}
    after = simple(stay, partitions, before)
    _check(stay, partitions, after)
    for member in stay:
        kept = len(before[member] & after[member])
        assert kept >= min(len(before[member]), total // len(stay))
