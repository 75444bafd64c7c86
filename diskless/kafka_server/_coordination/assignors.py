"""Kafka's server-side assignors for the consumer group protocol (KIP-848), as pure functions.

A consumer group's target assignment is computed by its coordinator, not by a member: from the
members' subscriptions, the partition counts of the topics they subscribe to, and the target
assignment before (for stickiness). Both assignors are deterministic (members and partitions are
taken in sorted order, so every process computes the same target from the same inputs) and give
each subscribed partition to exactly one member subscribed to its topic.

- `uniform` (Kafka's default, `UniformAssignor`): the partitions of all subscribed topics are
  spread so that member counts differ by at most one when every member subscribes to the same
  topics (`OptimizedUniformAssignmentBuilder`): each member keeps up to its quota of what it
  had, and the rest go to the members under quota. With different subscriptions
  (`UniformHeterogeneousAssignmentBuilder`), each member keeps what it had of its topics, the
  unassigned partitions go to the least loaded eligible member, and partitions then move from
  a member to an eligible one with at least two fewer until none can: counts are balanced as
  far as the subscriptions allow, by a simpler walk than Kafka's.
- `range` (`RangeAssignor`): per topic, its subscribers in member id order share its
  partitions in contiguous ranges, the first `partitions % members` getting one more; a member
  keeps the partitions it had of the topic up to its quota (Kafka's server-side stickiness), so
  co-partitioned topics stay co-assigned as long as membership is stable.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Set
from typing import Final, TypeAlias

from diskless._types import TopicPartition

Assignment: TypeAlias = dict[str, frozenset[TopicPartition]]
"""The partitions of each member, by member id."""

Assignor: TypeAlias = Callable[
    [Mapping[str, Set[str]], Mapping[str, int], Mapping[str, Set[TopicPartition]]], Assignment
]
"""(subscribed topics by member, partition count by topic, the assignment before) -> the new
assignment. Topics absent from the counts do not exist (yet) and are not assigned."""

UNIFORM: Final = "uniform"
RANGE: Final = "range"
DEFAULT_ASSIGNOR: Final = UNIFORM
"""Kafka's `group.consumer.assignors` default lists `uniform` first."""


def _subscribed_partitions(topics: Set[str], partitions: Mapping[str, int]) -> list[TopicPartition]:
    return [
        TopicPartition(topic, index)
        for topic in sorted(topics)
        if topic in partitions
        for index in range(partitions[topic])
    ]


def uniform(
    subscriptions: Mapping[str, Set[str]],
    partitions: Mapping[str, int],
    current: Mapping[str, Set[TopicPartition]],
) -> Assignment:
    """Kafka's `uniform` assignor (see the module's docstring)."""
    members = sorted(subscriptions)
    if not members:
        return {}
    if len({frozenset(subscriptions[m]) for m in members}) == 1:
        return _uniform_homogeneous(members, subscriptions[members[0]], partitions, current)
    return _uniform_heterogeneous(members, subscriptions, partitions, current)


def _uniform_homogeneous(
    members: list[str],
    topics: Set[str],
    partitions: Mapping[str, int],
    current: Mapping[str, Set[TopicPartition]],
) -> Assignment:
    every = _subscribed_partitions(topics, partitions)
    valid = set(every)
    quota, extra = divmod(len(every), len(members))
    assigned: dict[str, list[TopicPartition]] = {}
    taken: set[TopicPartition] = set()
    for member in members:  # each keeps up to its quota of what it had
        kept = sorted(tp for tp in current.get(member, ()) if tp in valid and tp not in taken)
        limit = quota
        if len(kept) > quota and extra > 0:
            limit, extra = quota + 1, extra - 1
        assigned[member] = kept[:limit]
        taken.update(assigned[member])
    unassigned = [tp for tp in every if tp not in taken]
    for member in members:  # fill every member to its quota, then hand out the extras
        need = quota - len(assigned[member])
        if need > 0:
            assigned[member] += unassigned[:need]
            del unassigned[:need]
    for member in members:
        if not unassigned or extra == 0:
            break
        if len(assigned[member]) == quota:
            assigned[member].append(unassigned.pop(0))
            extra -= 1
    assert not unassigned, "every partition is assigned"
    return {member: frozenset(assigned[member]) for member in members}


def _uniform_heterogeneous(
    members: list[str],
    subscriptions: Mapping[str, Set[str]],
    partitions: Mapping[str, int],
    current: Mapping[str, Set[TopicPartition]],
) -> Assignment:
    every = _subscribed_partitions(set().union(*subscriptions.values()), partitions)
    eligible = {tp: [m for m in members if tp.topic in subscriptions[m]] for tp in every}
    owner: dict[TopicPartition, str] = {}
    for member in members:  # each keeps what it had of its topics
        for tp in sorted(current.get(member, ())):
            if tp in eligible and member in eligible[tp] and tp not in owner:
                owner[tp] = member
    counts = dict.fromkeys(members, 0)
    for member in owner.values():
        counts[member] += 1
    for tp in every:
        if tp not in owner:
            chosen = min(eligible[tp], key=lambda m: (counts[m], m))
            owner[tp] = chosen
            counts[chosen] += 1
    moved = True
    while moved:  # move one partition at a time from a member to one with two fewer
        moved = False
        for tp in every:
            holder = owner[tp]
            target = min(eligible[tp], key=lambda m: (counts[m], m))
            if counts[target] + 1 < counts[holder]:
                owner[tp] = target
                counts[holder] -= 1
                counts[target] += 1
                moved = True
    result: dict[str, set[TopicPartition]] = {member: set() for member in members}
    for tp, member in owner.items():
        result[member].add(tp)
    return {member: frozenset(tps) for member, tps in result.items()}


def range_(
    subscriptions: Mapping[str, Set[str]],
    partitions: Mapping[str, int],
    current: Mapping[str, Set[TopicPartition]],
) -> Assignment:
    """Kafka's `range` assignor (see the module's docstring)."""
    assigned: dict[str, set[TopicPartition]] = {member: set() for member in subscriptions}
    topics = sorted(set().union(*subscriptions.values(), set()) & set(partitions))
    for topic in topics:
        members = sorted(m for m in subscriptions if topic in subscriptions[m])
        quota, extra = divmod(partitions[topic], len(members))
        quotas = {m: quota + (1 if i < extra else 0) for i, m in enumerate(members)}
        taken: set[int] = set()
        mine: dict[str, list[int]] = {}
        for member in members:  # each keeps what it had of the topic, up to its quota
            had = sorted(
                tp.partition
                for tp in current.get(member, ())
                if tp.topic == topic and tp.partition < partitions[topic]
            )
            mine[member] = [p for p in had if p not in taken][: quotas[member]]
            taken.update(mine[member])
        free = [p for p in range(partitions[topic]) if p not in taken]
        for member in members:
            need = quotas[member] - len(mine[member])
            mine[member] += free[:need]
            del free[:need]
            assigned[member].update(TopicPartition(topic, p) for p in mine[member])
        assert not free, "every partition of the topic is assigned"
    return {member: frozenset(tps) for member, tps in assigned.items()}


ASSIGNORS: Final[Mapping[str, Assignor]] = {UNIFORM: uniform, RANGE: range_}
"""The server-side assignors by the name a member asks for (`server_assignor`)."""
