"""Produce routing: which broker of the client's rack takes produce requests for a partition.

Any broker may accept a produce for any partition of a diskless topic, but sending a partition's
produce requests from rack (availability zone) k to one deterministic broker *in rack k* keeps the
produce path free of cross-AZ traffic and lets each broker commit to few partitions: the seeds'
"produce representative". A prototype broker puts this choice in its Metadata responses as the
partition's leader for clients of that rack.

The choice is rendezvous (highest-random-weight) hashing: every broker of the rack gets a weight
from a stable hash of (topic, partition, broker id) and the heaviest wins. Hence:
- it does not depend on the order in which brokers are listed;
- when a broker leaves, only the partitions it represented move (each to its runner-up), and when
  one joins, only the partitions it now wins move (all to it);
- partitions spread evenly, since the weights are uniform and independent.
The hash is blake2b, never Python's `hash`, which is salted per process: every broker process and
every restart must agree.
"""

from __future__ import annotations

import hashlib
import struct
from collections.abc import Iterable
from typing import Final, NamedTuple

from diskless._types import TopicPartition

_WEIGHT_DIGEST_BYTES: Final = 8
_PARTITION_AND_BROKER: Final = struct.Struct(">iq")


class BrokerNode(NamedTuple):
    """A broker as routing sees it: its id and its rack (None when the rack is unknown)."""

    broker_id: int
    rack: str | None = None


def rendezvous_weight(topic_partition: TopicPartition, broker_id: int) -> int:
    """The broker's weight for the partition: a 64-bit blake2b of (topic, partition, broker id).

    The topic is length-prefixed so that no two (topic, partition, broker) triples share input
    bytes.
    """
    topic = topic_partition.topic.encode()
    digest = hashlib.blake2b(
        struct.pack(">I", len(topic))
        + topic
        + _PARTITION_AND_BROKER.pack(topic_partition.partition, broker_id),
        digest_size=_WEIGHT_DIGEST_BYTES,
    ).digest()
    return int.from_bytes(digest, "big")


def rack_candidates(client_rack: str | None, brokers: Iterable[BrokerNode]) -> list[int]:
    """Ids of the brokers eligible for a client of `client_rack`, sorted and unique.

    The brokers of that rack; every broker when the rack is None or has no broker.
    """
    nodes = list(brokers)
    if client_rack is not None:
        local = sorted({node.broker_id for node in nodes if node.rack == client_rack})
        if local:
            return local
    return sorted({node.broker_id for node in nodes})


def produce_broker(
    topic_partition: TopicPartition, client_rack: str | None, brokers: Iterable[BrokerNode]
) -> int:
    """The id of the broker a client in `client_rack` should send this partition's produces to.

    Deterministic across processes and independent of the order of `brokers`. Raises ValueError
    when there is no broker at all.
    """
    return _heaviest(topic_partition, _nonempty(rack_candidates(client_rack, brokers)))


def produce_assignment(
    partitions: Iterable[TopicPartition], client_rack: str | None, brokers: Iterable[BrokerNode]
) -> dict[TopicPartition, int]:
    """`produce_broker` for many partitions at once (e.g. a whole Metadata response)."""
    candidates = _nonempty(rack_candidates(client_rack, brokers))
    return {tp: _heaviest(tp, candidates) for tp in partitions}


def _nonempty(candidates: list[int]) -> list[int]:
    if not candidates:
        raise ValueError("no broker to route produce requests to")
    return candidates


def _heaviest(topic_partition: TopicPartition, candidates: list[int]) -> int:
    # Ties (a 64-bit collision) break on the broker id, so the answer stays a function of the set.
    return max(
        candidates, key=lambda broker_id: (rendezvous_weight(topic_partition, broker_id), broker_id)
    )
