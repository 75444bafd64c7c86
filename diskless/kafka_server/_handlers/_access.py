"""Authorization, as each handler asks for it: one `Access` per request, over the session's
principal and host and the process's ACLs (`_coordination.acl_cache`).

Each handler family authorizes in one step, right after decoding, with the table of what each
API needs (Kafka's "Operations and Resources on Protocols"); what it refuses is answered with
Kafka's code for the resource (TOPIC_, GROUP_, CLUSTER_, TRANSACTIONAL_ID_AUTHORIZATION_FAILED)
and never reaches the library. Without an authorizer (`authorizer.class.name` unset) every
check passes, as in Kafka.

KIP-430's authorized operations (Metadata, DescribeCluster, DescribeTopicPartitions) are the
operations Kafka supports on the resource's type (`AclEntry.supportedOperations`) that the same
checks allow, as a bitfield of their codes (bit `code` set).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Final

from diskless._types import TopicPartition
from diskless.coordinator import CLUSTER_NAME, AclOperation, ResourceType
from diskless.kafka_server._handlers.context import BrokerContext, Session

READ = AclOperation.READ
WRITE = AclOperation.WRITE
CREATE = AclOperation.CREATE
DELETE = AclOperation.DELETE
ALTER = AclOperation.ALTER
DESCRIBE = AclOperation.DESCRIBE
DESCRIBE_CONFIGS = AclOperation.DESCRIBE_CONFIGS
IDEMPOTENT_WRITE = AclOperation.IDEMPOTENT_WRITE
ALTER_CONFIGS = AclOperation.ALTER_CONFIGS
CLUSTER_ACTION = AclOperation.CLUSTER_ACTION

SUPPORTED_OPERATIONS: Final[dict[ResourceType, tuple[AclOperation, ...]]] = {
    ResourceType.TOPIC: (
        READ,
        WRITE,
        CREATE,
        DESCRIBE,
        DELETE,
        ALTER,
        DESCRIBE_CONFIGS,
        ALTER_CONFIGS,
    ),
    ResourceType.GROUP: (READ, DESCRIBE, DELETE, DESCRIBE_CONFIGS, ALTER_CONFIGS),
    ResourceType.CLUSTER: (
        CREATE,
        CLUSTER_ACTION,
        DESCRIBE_CONFIGS,
        ALTER_CONFIGS,
        IDEMPOTENT_WRITE,
        ALTER,
        DESCRIBE,
    ),
    ResourceType.TRANSACTIONAL_ID: (DESCRIBE, WRITE),
}
"""The operations each resource type has (Kafka's `AclEntry.supportedOperations`)."""
OPERATIONS_NOT_ASKED: Final = -(2**31)
"""The schemas' default for an authorized-operations bitfield nobody asked for."""


class Access:
    """What the principal of one request may do."""

    __slots__ = ("_acls", "_host", "_principal")

    def __init__(self, context: BrokerContext, session: Session) -> None:
        self._acls = context.acls
        self._principal = session.principal
        self._host = session.client_host

    @property
    def enabled(self) -> bool:
        return self._acls is not None

    def allows(self, operation: AclOperation, resource_type: ResourceType, name: str) -> bool:
        if self._acls is None:
            return True
        return self._acls.authorize(self._principal, self._host, operation, resource_type, name)

    def topic(self, operation: AclOperation, name: str) -> bool:
        return self.allows(operation, ResourceType.TOPIC, name)

    def group(self, operation: AclOperation, group_id: str) -> bool:
        return self.allows(operation, ResourceType.GROUP, group_id)

    def cluster(self, operation: AclOperation) -> bool:
        return self.allows(operation, ResourceType.CLUSTER, CLUSTER_NAME)

    def transactional_id(self, operation: AclOperation, transactional_id: str) -> bool:
        return self.allows(operation, ResourceType.TRANSACTIONAL_ID, transactional_id)

    def any_topic(self, operation: AclOperation) -> bool:
        """Whether some topic allows `operation` (Kafka's `authorizeByResourceType`)."""
        if self._acls is None:
            return True
        return self._acls.authorize_any(self._principal, self._host, operation, ResourceType.TOPIC)

    def operations(self, resource_type: ResourceType, name: str) -> int:
        """KIP-430: the bitfield of the operations on the resource that the principal may do."""
        allowed = (
            op for op in SUPPORTED_OPERATIONS[resource_type] if self.allows(op, resource_type, name)
        )
        return sum(1 << int(op) for op in allowed)

    def cluster_operations(self) -> int:
        """KIP-430's cluster operations, as Kafka answers them: none without DESCRIBE."""
        if not self.cluster(DESCRIBE):
            return 0
        return self.operations(ResourceType.CLUSTER, CLUSTER_NAME)

    def topics(self, operation: AclOperation, names: Iterable[str]) -> set[str]:
        """The names among `names` whose topics allow `operation` (each checked once)."""
        return {name for name in set(names) if self.topic(operation, name)}

    def refused(
        self, operation: AclOperation, partitions: Iterable[TopicPartition]
    ) -> set[TopicPartition]:
        """The partitions whose topic refuses `operation`."""
        if self._acls is None:
            return set()
        allowed: dict[str, bool] = {}
        refused = set()
        for tp in partitions:
            if tp.topic not in allowed:
                allowed[tp.topic] = self.topic(operation, tp.topic)
            if not allowed[tp.topic]:
                refused.add(tp)
        return refused
