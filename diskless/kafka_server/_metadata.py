"""Cluster membership and the partition leaders Metadata advertises.

There is no partition leader on the diskless write path: every broker accepts a produce for every
partition. Metadata still has to name one broker per partition, and that name decides where a
client sends its produce requests. This server names the *produce representative*
(`diskless.routing.produce_broker`) of the client's rack:

- The client's rack is the rack it told this connection (Fetch v11+ carries `rack_id`, which
  consumers set from `client.rack`), and otherwise the rack of the broker answering: producers do
  not send their rack, so a producer bootstrapped from brokers of its own rack learns leaders in
  its own rack. Every broker lists every live broker, so a client whose rack has no live broker
  left still finds one elsewhere (`routing` then picks among all brokers).
- Leaders are chosen among the live brokers. When membership changes, the `leader_epoch` of every
  partition goes up (it is the membership generation), so clients that track leader epochs
  (KIP-320) accept the new leaders instead of discarding them as stale.
- Consumers read from the same broker: any broker can serve any partition's reads, and the
  representative of the consumer's rack is in its rack.

Membership lives in this process (`ClusterView`): brokers join when their listener is up and
leave when it closes, cleanly or not. Several processes would share it through the batch
coordinator's broker registry instead; the prototype does not need that.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterable
from typing import Final, NamedTuple

from diskless._types import TopicPartition
from diskless.routing import BrokerNode, produce_assignment

_TOPIC_ID_NAMESPACE: Final = uuid.UUID("6f1d3c0e-8a5b-4d1e-9f3a-2b7c4e5d6a10")


class BrokerAddress(NamedTuple):
    broker_id: int
    host: str
    port: int
    rack: str | None


def topic_id(name: str) -> uuid.UUID:
    """A stable id per topic name, identical on every broker (topics are addressed by name)."""
    return uuid.uuid5(_TOPIC_ID_NAMESPACE, name)


class ClusterView:
    """The live brokers of one cluster and the generation of that set."""

    def __init__(self, cluster_id: str) -> None:
        self.cluster_id = cluster_id
        self._brokers: dict[int, BrokerAddress] = {}
        self._generation = 0

    @property
    def generation(self) -> int:
        """Bumped whenever a broker joins or leaves; advertised as every leader epoch."""
        return self._generation

    def join(self, address: BrokerAddress) -> None:
        self._brokers[address.broker_id] = address
        self._generation += 1

    def leave(self, broker_id: int) -> None:
        if self._brokers.pop(broker_id, None) is not None:
            self._generation += 1

    def brokers(self) -> list[BrokerAddress]:
        return sorted(self._brokers.values())

    def get(self, broker_id: int) -> BrokerAddress | None:
        return self._brokers.get(broker_id)

    def leaders(
        self, partitions: Iterable[TopicPartition], client_rack: str | None
    ) -> dict[TopicPartition, int]:
        """The produce representative of `client_rack` for each partition, among live brokers."""
        nodes = [BrokerNode(b.broker_id, b.rack) for b in self._brokers.values()]
        return produce_assignment(partitions, client_rack, nodes)
