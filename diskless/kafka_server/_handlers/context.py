"""What a request handler may use of the broker serving it and of the connection a request came
on: typed views, so that handlers depend on these protocols and the server on the handlers, never
the other way round."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Final, NamedTuple, Protocol

from diskless import DisklessBroker
from diskless._types import GroupOwnership
from diskless.coordinator import TopicConfig
from diskless.kafka_server._coordination.acl_cache import AclCache
from diskless.kafka_server._coordination.cluster_view import BrokerAddress, ClusterView
from diskless.kafka_server._coordination.credentials import Credentials
from diskless.kafka_server._coordination.group_configs import GroupConfigs
from diskless.kafka_server._coordination.group_coordinator import GroupCoordinator
from diskless.kafka_server._coordination.share_front import ShareFront
from diskless.kafka_server._coordination.txn_front import TransactionFront
from diskless.kafka_server._protocol.security_protocol import SecurityProtocol
from diskless.metrics import Metrics

ANONYMOUS: Final = "User:ANONYMOUS"
"""Kafka's principal for a connection that has not authenticated (KafkaPrincipal.ANONYMOUS)."""
DEFAULT_LISTENER: Final = "PLAINTEXT"
"""The listener a connection is on when the server names none: Kafka's default `listeners` is
`PLAINTEXT://:9092`, whose listener name is its protocol's."""

MAX_PARTITIONS_PER_REQUEST: Final = 10_000
"""Kafka's MAX_PARTITIONS_PER_BATCH: one request may add no more partitions than this in total,
so a single CreateTopics or CreatePartitions cannot exhaust the coordinator (KAFKA-15485)."""


class Session:
    """What the handlers know of the client connection a request came on: who is asking
    (`principal`, from where: `client_host`) and through which listener, for authentication and
    the authorizer's decisions."""

    __slots__ = (
        "client_host",
        "client_id",
        "client_rack",
        "listener",
        "peer",
        "principal",
        "security_protocol",
    )

    def __init__(
        self,
        peer: str,
        *,
        client_host: str = "",
        listener: str = DEFAULT_LISTENER,
        security_protocol: SecurityProtocol = SecurityProtocol.PLAINTEXT,
        principal: str = ANONYMOUS,
    ) -> None:
        self.peer = peer
        """The peer's address as logged (host and port)."""
        self.client_host = client_host
        """The peer's IP address, as ACLs match hosts (Kafka's `RequestContext.clientAddress`)."""
        self.listener = listener
        """The name of the listener the connection came on (`listeners`)."""
        self.security_protocol = security_protocol
        """That listener's protocol (`listener.security.protocol.map`)."""
        self.principal = principal
        """Kafka's `KafkaPrincipal` string form, `User:<name>`: `User:ANONYMOUS` until the
        connection authenticates (a TLS client certificate's subject, `User:<DN>`, is known from
        the start; SASL sets it once a client has authenticated)."""
        self.client_rack: str | None = None
        """Set from Fetch's rack_id (the consumer's client.rack); None until then."""
        self.client_id = ""
        """The `client.id` of the connection's latest request header (a group's members are
        described with it)."""


class BrokerSetting(NamedTuple):
    """One of the broker's settings under Kafka's property name (DescribeConfigs lists them)."""

    name: str
    value: str | int | bool | None
    """None: not set, or a secret (never shown)."""
    secret: bool
    default: bool
    """Whether it is the default value (else the broker's configuration set it)."""


RETENTION_MS_DEFAULT: Final = 7 * 24 * 3_600_000
"""Kafka's `log.retention.hours=168`: a topic's retention when nothing says otherwise."""


class TopicDefaults(NamedTuple):
    """What a topic created without its own settings gets (`ServerConfig.topic_defaults`)."""

    config: TopicConfig
    static: frozenset[str] = frozenset()
    """The topic configs whose default the broker's properties gave (STATIC_BROKER_CONFIG)."""
    dynamic: tuple[tuple[str, str, int], ...] = ()
    """The dynamic broker configs in force that give topic defaults, as (broker config name,
    value, Kafka's config source code: DYNAMIC_BROKER_CONFIG or DYNAMIC_DEFAULT_BROKER_CONFIG),
    the broker's own before the cluster-wide ones (`_broker_configs.topic_defaults`)."""


class Settings(Protocol):
    """The server settings handlers read (`ServerConfig` has them, under the same names)."""

    @property
    def fetch_wait_ms_max(self) -> int: ...

    @property
    def auto_create_topics_enable(self) -> bool: ...

    @property
    def num_partitions(self) -> int: ...

    @property
    def topic_defaults(self) -> TopicDefaults: ...

    @property
    def group_defaults(self) -> GroupConfigs: ...

    @property
    def group_bounds(self) -> Mapping[str, int]: ...


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
    def shares(self) -> ShareFront:
        """The share fetches, acknowledgements and share sessions (KIP-932)."""
        ...

    @property
    def credentials(self) -> Credentials: ...

    @property
    def config(self) -> Settings: ...

    @property
    def broker_id(self) -> int: ...

    @property
    def broker_settings(self) -> Sequence[BrokerSetting]:
        """The settings of the broker's configuration that it applies."""
        ...

    @property
    def rack(self) -> str | None: ...

    @property
    def address(self) -> BrokerAddress: ...

    @property
    def metrics(self) -> Metrics:
        """Where a handler reports what only it sees (an authentication failure, say)."""
        ...

    @property
    def acls(self) -> AclCache | None:
        """The authorizer's ACLs; None when no authorizer is configured."""
        ...


def serving(context: BrokerContext) -> GroupOwnership:
    """The broker incarnation a group request came to: it must own the group
    (`_coordination.group_coordinator`)."""
    return GroupOwnership(context.broker_id, context.broker.broker_epoch, -1)
