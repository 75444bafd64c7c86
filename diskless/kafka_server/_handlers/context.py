"""What a request handler may use of the broker serving it and of the connection a request came
on: typed views, so that handlers depend on these protocols and the server on the handlers, never
the other way round."""

from __future__ import annotations

from typing import Final, Protocol

from diskless import DisklessBroker
from diskless._types import GroupOwnership
from diskless.kafka_server._coordination.cluster_view import BrokerAddress, ClusterView
from diskless.kafka_server._coordination.group_coordinator import GroupCoordinator
from diskless.kafka_server._coordination.txn_front import TransactionFront

MAX_PARTITIONS_PER_REQUEST: Final = 10_000
"""Kafka's MAX_PARTITIONS_PER_BATCH: one request may add no more partitions than this in total,
so a single CreateTopics or CreatePartitions cannot exhaust the coordinator (KAFKA-15485)."""


class Session:
    """What the handlers know of the client connection a request came on."""

    __slots__ = ("client_rack", "peer")

    def __init__(self, peer: str) -> None:
        self.peer = peer
        self.client_rack: str | None = None
        """Set from Fetch's rack_id (the consumer's client.rack); None until then."""


class Settings(Protocol):
    """The server settings handlers read (`ServerConfig` has them, under the same names)."""

    @property
    def fetch_wait_ms_max(self) -> int: ...

    @property
    def auto_create_topic_partitions(self) -> int: ...


class BrokerContext(Protocol):
    """The serving broker, its cluster view, and the coordinators it fronts."""

    @property
    def broker(self) -> DisklessBroker: ...

    @property
    def cluster(self) -> ClusterView: ...

    @property
    def transactions(self) -> TransactionFront: ...

    @property
    def groups(self) -> GroupCoordinator: ...

    @property
    def config(self) -> Settings: ...

    @property
    def broker_id(self) -> int: ...

    @property
    def rack(self) -> str | None: ...

    @property
    def address(self) -> BrokerAddress: ...


def serving(context: BrokerContext) -> GroupOwnership:
    """The broker incarnation a group request came to: it must own the group
    (`_coordination.group_coordinator`)."""
    return GroupOwnership(context.broker_id, context.broker.broker_epoch, -1)
