"""What a request handler may use of the broker serving it: a typed view, so that handlers
depend on this protocol and the server on the handlers, never the other way round."""

from __future__ import annotations

import asyncio
from typing import Protocol

from diskless import DisklessBroker
from diskless._types import GroupOwnership
from diskless.kafka_server._coordination.cluster_view import BrokerAddress, ClusterView
from diskless.kafka_server._coordination.group_coordinator import GroupCoordinator
from diskless.kafka_server._coordination.txn_front import TransactionFront
from diskless.kafka_server._server.config import ServerConfig


class Connection:
    """What the server learns about one client connection."""

    __slots__ = ("client_rack", "last_active", "peer", "produce_turn", "unanswered")

    def __init__(self, peer: str, now: float) -> None:
        self.peer = peer
        self.client_rack: str | None = None
        """Set from Fetch's rack_id (the consumer's client.rack); None until then."""
        self.last_active = now
        """Event-loop time of the last frame read or response written (for the idle timeout)."""
        self.unanswered = 0
        """Requests read and not yet answered: while there are some, the connection is busy."""
        self.produce_turn: asyncio.Future[None] | None = None
        """Resolved once the connection's latest produce request has taken its place in the
        broker's write order: a later one that must await first waits for it."""


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
    def config(self) -> ServerConfig: ...

    @property
    def broker_id(self) -> int: ...

    @property
    def rack(self) -> str | None: ...

    @property
    def address(self) -> BrokerAddress: ...


def serving(context: BrokerContext) -> GroupOwnership:
    """The broker incarnation a group request came to: it must own the group (`_groups`)."""
    return GroupOwnership(context.broker_id, context.broker.broker_epoch, -1)
