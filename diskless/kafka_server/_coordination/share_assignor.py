"""Kafka's `simple` assignor for share groups (KIP-932), as a pure function.

A share group's members do not own their partitions: the records of a partition are acquired
one by one by whichever member fetches them, so a partition may be given to several members,
and moving it costs nothing (no revocation). Kafka's `SimpleAssignor` gives, in order of
priority:
- **Balance.** With M members and P partitions, each partition is shared by
  `sharing = ceil(M / P)` members (one when there are at least as many partitions as members),
  and the `sharing * P` assignments are spread over the members so that their counts differ by
  at most one (member i's quota: `ceil(t * (i + 1) / M) - ceil(t * i / M)`, t the total).
- **Stickiness.** A member keeps what it had of the partitions it still subscribes to, except
  where a partition is shared by more members than `sharing` (the most loaded give it up first)
  or the member holds more than its quota; the partitions short of `sharing` members then go,
  in order, to the members short of their quota, in turn (a member never twice the same one).
So every subscribed partition has at least one member as long as one member subscribes to its
topic. Members and partitions are taken in sorted order, so every process computes the same
target from the same inputs.

When the members subscribe to different topics, each topic is balanced alone among its
subscribers, by the same rules, and the results combined (Kafka's
`SimpleHeterogeneousAssignmentBuilder`): a member subscribed to more topics gets more partitions.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence, Set
from typing import Final

from diskless._types import TopicPartition
from diskless.kafka_server._coordination.assignors import Assignment

SIMPLE: Final = "simple"
"""Kafka's name of the share groups' one server assignor (`group.share.assignors`)."""


def simple(
    subscriptions: Mapping[str, Set[str]],
    partitions: Mapping[str, int],
    current: Mapping[str, Set[TopicPartition]],
) -> Assignment:
    """Kafka's `simple` share assignor (see the module's docstring): (subscribed topics by
    member, partition count by topic, the assignment before) -> the new one. Topics absent
    from the counts do not exist (yet) and are not assigned."""
    members = sorted(subscriptions)
    assigned: dict[str, set[TopicPartition]] = {m: set() for m in members}
    topics = {frozenset(t for t in subscriptions[m] if t in partitions) for m in members}
    if len(topics) == 1:
        groups = [(members, topics.pop())]
    else:
        every = sorted({t for m in members for t in subscriptions[m] if t in partitions})
        groups = [([m for m in members if t in subscriptions[m]], frozenset([t])) for t in every]
    for group_members, group_topics in groups:
        targets = [
            TopicPartition(topic, index)
            for topic in sorted(group_topics)
            for index in range(partitions[topic])
        ]
        shares = _share(group_members, targets, current)
        for member, held in shares.items():
            assigned[member] |= held
    return {m: frozenset(tps) for m, tps in assigned.items()}


def _share(
    members: Sequence[str],
    targets: Sequence[TopicPartition],
    current: Mapping[str, Set[TopicPartition]],
) -> dict[str, set[TopicPartition]]:
    """The balanced, sticky sharing of `targets` among `members` (sorted)."""
    if not members or not targets:
        return {m: set() for m in members}
    count, total_partitions = len(members), len(targets)
    sharing = -(-count // total_partitions)
    total = sharing * total_partitions
    quota = {
        m: -(-total * (i + 1) // count) - -(-total * i // count) for i, m in enumerate(members)
    }
    wanted = set(targets)
    held = {m: set(current.get(m, ())) & wanted for m in members}
    holders: dict[TopicPartition, list[str]] = {tp: [] for tp in targets}
    for m in members:
        for tp in held[m]:
            holders[tp].append(m)
    for tp in targets:  # shared by too many: the most loaded give it up first
        while len(holders[tp]) > sharing:
            giver = max(holders[tp], key=lambda m: (len(held[m]) - quota[m], m))
            holders[tp].remove(giver)
            held[giver].discard(tp)
    for m in members:  # above quota: give up the last partitions
        for tp in sorted(held[m], reverse=True)[: max(0, len(held[m]) - quota[m])]:
            held[m].discard(tp)
            holders[tp].remove(m)
    unfilled = [m for m in members if len(held[m]) < quota[m]]
    turn = 0
    for tp in targets:
        tried = 0
        while len(holders[tp]) < sharing and unfilled and tried < len(unfilled):
            m = unfilled[turn % len(unfilled)]
            if tp in held[m]:
                turn, tried = turn + 1, tried + 1
                continue
            held[m].add(tp)
            holders[tp].append(m)
            tried = 0
            if len(held[m]) >= quota[m]:
                unfilled.remove(m)
            else:
                turn += 1
    return held
