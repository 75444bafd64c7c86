"""The server-side assignors of the consumer group protocol: examples, and properties over random
groups (every subscribed partition assigned exactly once to a subscriber, balance, stickiness,
determinism)."""

from __future__ import annotations

import os
import random
from collections.abc import Mapping, Set

import hypothesis
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from diskless._types import TopicPartition
from diskless.kafka_server._coordination.assignors import (
    ASSIGNORS,
    Assignment,
    range_,
    uniform,
)

SEED = int(os.environ.get("KAFKA_FUZZ_SEED", random.randrange(2**32)))

TOPICS = ("a", "b", "c")


def tps(topic: str, *indexes: int) -> frozenset[TopicPartition]:
    return frozenset(TopicPartition(topic, i) for i in indexes)


def _check_exactly_once(
    subscriptions: Mapping[str, Set[str]], partitions: Mapping[str, int], result: Assignment
) -> None:
    assert set(result) == set(subscriptions)
    seen: list[TopicPartition] = [tp for owned in result.values() for tp in owned]
    assert len(seen) == len(set(seen)), "no partition is given to two members"
    for member, owned in result.items():
        assert all(tp.topic in subscriptions[member] for tp in owned)
    wanted = {
        TopicPartition(t, i)
        for topics in subscriptions.values()
        for t in topics
        if t in partitions
        for i in range(partitions[t])
    }
    assert set(seen) == wanted, "every subscribed partition is assigned"


def test_uniform_spreads_one_topic_and_keeps_what_members_had() -> None:
    subs = {"m1": {"a"}, "m2": {"a"}}
    first = uniform(subs, {"a": 4}, {})
    assert first == {"m1": tps("a", 0, 1), "m2": tps("a", 2, 3)}
    third = uniform({**subs, "m3": {"a"}}, {"a": 4}, first)
    _check_exactly_once({**subs, "m3": {"a"}}, {"a": 4}, third)
    assert sorted(len(v) for v in third.values()) == [1, 1, 2]
    assert third["m1"] <= first["m1"] and third["m2"] <= first["m2"], "nobody gains by moving"
    assert uniform({"m1": {"a"}}, {"a": 4}, third) == {"m1": tps("a", 0, 1, 2, 3)}


def test_range_gives_contiguous_ranges_per_topic_and_is_co_partitioned() -> None:
    subs = {"m1": {"a", "b"}, "m2": {"a", "b"}}
    result = range_(subs, {"a": 3, "b": 3}, {})
    assert result == {"m1": tps("a", 0, 1) | tps("b", 0, 1), "m2": tps("a", 2) | tps("b", 2)}


def test_a_topic_that_does_not_exist_is_not_assigned() -> None:
    for assignor in ASSIGNORS.values():
        assert assignor({"m1": {"missing"}}, {"a": 2}, {}) == {"m1": frozenset()}


@st.composite
def groups(
    draw: st.DrawFn,
) -> tuple[dict[str, set[str]], dict[str, int], dict[str, set[TopicPartition]]]:
    partitions = {t: draw(st.integers(0, 7)) for t in TOPICS if draw(st.booleans())}
    members = draw(st.lists(st.sampled_from([f"m{i}" for i in range(8)]), unique=True))
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


@hypothesis.seed(SEED)
@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(group=groups())
def test_uniform_assigns_every_partition_once_and_balances(
    group: tuple[dict[str, set[str]], dict[str, int], dict[str, set[TopicPartition]]],
) -> None:
    print(f"seed: {SEED} (set KAFKA_FUZZ_SEED to replay)")
    subscriptions, partitions, current = group
    result = uniform(subscriptions, partitions, current)
    _check_exactly_once(subscriptions, partitions, result)
    assert result == uniform(dict(reversed(subscriptions.items())), partitions, current)
    counts = {m: len(owned) for m, owned in result.items()}
    for member, owned in result.items():  # no partition could move to balance better
        for tp in owned:
            eligible = [m for m in subscriptions if tp.topic in subscriptions[m]]
            assert all(counts[m] + 1 >= counts[member] for m in eligible)
    if len({frozenset(s) for s in subscriptions.values()}) == 1:
        assert max(counts.values()) - min(counts.values()) <= 1
    assert uniform(subscriptions, partitions, result) == result, "stable input, no movement"


@hypothesis.seed(SEED)
@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(group=groups())
def test_range_assigns_every_partition_once_and_balances_each_topic(
    group: tuple[dict[str, set[str]], dict[str, int], dict[str, set[TopicPartition]]],
) -> None:
    print(f"seed: {SEED} (set KAFKA_FUZZ_SEED to replay)")
    subscriptions, partitions, current = group
    result = range_(subscriptions, partitions, current)
    _check_exactly_once(subscriptions, partitions, result)
    for topic in partitions:
        counts = [
            sum(tp.topic == topic for tp in result[m])
            for m in subscriptions
            if topic in subscriptions[m]
        ]
        assert not counts or max(counts) - min(counts) <= 1
    assert range_(subscriptions, partitions, result) == result, "stable input, no movement"


@hypothesis.seed(SEED)
@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(group=groups(), joining=st.sampled_from(["n1", "n2"]))
def test_uniform_moves_only_what_a_new_member_takes(
    group: tuple[dict[str, set[str]], dict[str, int], dict[str, set[TopicPartition]]],
    joining: str,
) -> None:
    """Homogeneous subscriptions: a member joining takes partitions from others, and nobody
    else's partitions move between the members already there."""
    print(f"seed: {SEED} (set KAFKA_FUZZ_SEED to replay)")
    subscriptions, partitions, _ = group
    if not subscriptions:
        return
    common = next(iter(subscriptions.values()))
    subscriptions = dict.fromkeys(subscriptions, common)
    before = uniform(subscriptions, partitions, {})
    after = uniform({**subscriptions, joining: common}, partitions, before)
    for member in subscriptions:
        assert after[member] <= before[member]
