"""Unit and property tests of produce routing (rendezvous hashing within the client's rack)."""

from __future__ import annotations

import collections
import subprocess
import sys

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from diskless._types import TopicPartition
from diskless.routing import (
    BrokerNode,
    produce_assignment,
    produce_broker,
    rack_candidates,
    rendezvous_weight,
)

RACKS = ["az-a", "az-b", "az-c"]

topics = st.text(alphabet="abcdefghijklmnopqrstuvwxyz._-0123456789", min_size=1, max_size=20)
partitions = st.builds(TopicPartition, topics, st.integers(min_value=0, max_value=10_000))
broker_sets = st.lists(
    st.builds(BrokerNode, st.integers(min_value=0, max_value=1000), st.sampled_from(RACKS)),
    min_size=1,
    max_size=12,
    unique_by=lambda node: node.broker_id,
)
client_racks = st.sampled_from([*RACKS, "az-elsewhere", None])


def _partitions(count: int, topic: str = "orders") -> list[TopicPartition]:
    return [TopicPartition(topic, p) for p in range(count)]


@settings(deadline=None)
@given(partitions, client_racks, broker_sets, st.randoms(use_true_random=False))
def test_choice_does_not_depend_on_broker_order(
    tp: TopicPartition, rack: str | None, brokers: list[BrokerNode], rng: object
) -> None:
    shuffled = list(brokers)
    rng.shuffle(shuffled)  # type: ignore[attr-defined]
    assert produce_broker(tp, rack, brokers) == produce_broker(tp, rack, shuffled)


@settings(deadline=None)
@given(partitions, client_racks, broker_sets)
def test_choice_stays_in_the_client_rack_when_it_has_brokers(
    tp: TopicPartition, rack: str | None, brokers: list[BrokerNode]
) -> None:
    chosen = produce_broker(tp, rack, brokers)
    in_rack = {b.broker_id for b in brokers if b.rack == rack}
    if rack is not None and in_rack:
        assert chosen in in_rack
    else:
        assert chosen in {b.broker_id for b in brokers}


@settings(max_examples=50, deadline=None)
@given(client_racks, broker_sets, st.data())
def test_removing_a_broker_moves_only_its_partitions(
    rack: str | None, brokers: list[BrokerNode], data: st.DataObject
) -> None:
    removed = data.draw(st.sampled_from(brokers))
    remaining = [b for b in brokers if b != removed]
    tps = _partitions(300)
    before = produce_assignment(tps, rack, brokers)
    if not remaining:
        with pytest.raises(ValueError):
            produce_assignment(tps, rack, remaining)
        return
    after = produce_assignment(tps, rack, remaining)
    # If the removal empties the client's rack, the fallback to every broker is a new candidate
    # set and everything may move; otherwise only the removed broker's partitions move.
    if rack_candidates(rack, remaining) == [
        c for c in rack_candidates(rack, brokers) if c != removed.broker_id
    ]:
        moved = {tp for tp in tps if before[tp] != after[tp]}
        assert moved == {tp for tp in tps if before[tp] == removed.broker_id}


@settings(max_examples=50, deadline=None)
@given(
    client_racks, broker_sets, st.integers(min_value=1001, max_value=2000), st.sampled_from(RACKS)
)
def test_adding_a_broker_moves_partitions_only_to_it(
    rack: str | None, brokers: list[BrokerNode], new_id: int, new_rack: str
) -> None:
    tps = _partitions(300)
    added = BrokerNode(new_id, new_rack)
    before = produce_assignment(tps, rack, brokers)
    after = produce_assignment(tps, rack, [*brokers, added])
    if rack_candidates(rack, [*brokers, added]) == sorted(
        [*rack_candidates(rack, brokers), new_id]
    ):
        for tp in tps:
            assert after[tp] == before[tp] or after[tp] == new_id


@settings(max_examples=30, deadline=None)
@given(
    st.lists(st.integers(min_value=0, max_value=10_000), min_size=2, max_size=8, unique=True),
    topics,
)
def test_partitions_spread_evenly(broker_ids: list[int], topic: str) -> None:
    count = 4000
    brokers = [BrokerNode(b, "az-a") for b in broker_ids]
    load = collections.Counter(
        produce_assignment(_partitions(count, topic), "az-a", brokers).values()
    )
    expected = count / len(brokers)
    # A binomial share's standard deviation is below sqrt(expected) <= 45 here; 30% of the
    # expected share is more than 5 of them, so this fails only for a biased hash.
    for broker_id in broker_ids:
        assert abs(load[broker_id] - expected) <= 0.3 * expected, (broker_id, load, expected)


def test_falls_back_to_every_broker_without_a_rack_or_without_brokers_in_it() -> None:
    brokers = [BrokerNode(1, "az-a"), BrokerNode(2, "az-b"), BrokerNode(3, None)]
    assert rack_candidates(None, brokers) == [1, 2, 3]
    assert rack_candidates("az-z", brokers) == [1, 2, 3]
    assert rack_candidates("az-b", brokers) == [2]
    chosen = {produce_broker(tp, None, brokers) for tp in _partitions(100)}
    assert chosen == {1, 2, 3}


def test_no_broker_is_an_error() -> None:
    with pytest.raises(ValueError):
        produce_broker(TopicPartition("t", 0), "az-a", [])


def test_weights_are_stable_across_processes() -> None:
    # Python's str hash is salted per process; the routing hash must not be.
    tp = TopicPartition("orders", 7)
    code = (
        "from diskless.routing import rendezvous_weight;"
        "from diskless._types import TopicPartition;"
        "print(rendezvous_weight(TopicPartition('orders', 7), 3))"
    )
    out = subprocess.run(
        [sys.executable, "-c", code],
        check=True,
        capture_output=True,
        text=True,
        env={"PYTHONHASHSEED": "12345"},
    ).stdout
    assert int(out) == rendezvous_weight(tp, 3)
    # Distinct inputs give distinct weights (the topic is length-prefixed, not just joined).
    assert rendezvous_weight(TopicPartition("a", 1), 2) != rendezvous_weight(
        TopicPartition("a", 2), 1
    )


def test_weights_are_pinned() -> None:
    # Brokers of different versions must route alike: changing the hash is a breaking change.
    assert rendezvous_weight(TopicPartition("orders", 7), 3) == 3607970033780982451
