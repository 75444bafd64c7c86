"""Kafka's ACL model: bindings, the filters that find them, and what a valid binding is.

The codes of every enum are Kafka's wire codes (`org.apache.kafka.common.acl` and
`.resource`), so a binding travels from a CreateAcls request to the store and back unchanged.
A binding grants or denies one principal, from one host (or `*`), one operation on the
resources one pattern names: a LITERAL name (`*` meaning every name) or a PREFIXED one.
Filters (DescribeAcls, DeleteAcls) add ANY to every field and the MATCH pattern type: the
bindings that would apply to a given resource name.
"""

from __future__ import annotations

import enum
from collections.abc import Iterable
from typing import Final, NamedTuple

from diskless._types import ErrorCode

WILDCARD: Final = "*"
"""A LITERAL resource name or a host meaning every one."""
WILDCARD_PRINCIPAL: Final = "User:*"
CLUSTER_NAME: Final = "kafka-cluster"
"""The one name of the CLUSTER resource."""
ACL_VERSION_COUNTER: Final = "acl_version"
"""The coordinator counter every ACL change increments: a broker's refresh compares it."""


class ResourceType(enum.IntEnum):
    UNKNOWN = 0
    ANY = 1
    TOPIC = 2
    GROUP = 3
    CLUSTER = 4
    TRANSACTIONAL_ID = 5
    DELEGATION_TOKEN = 6
    USER = 7


class PatternType(enum.IntEnum):
    UNKNOWN = 0
    ANY = 1
    MATCH = 2
    LITERAL = 3
    PREFIXED = 4


class AclOperation(enum.IntEnum):
    UNKNOWN = 0
    ANY = 1
    ALL = 2
    READ = 3
    WRITE = 4
    CREATE = 5
    DELETE = 6
    ALTER = 7
    DESCRIBE = 8
    CLUSTER_ACTION = 9
    DESCRIBE_CONFIGS = 10
    ALTER_CONFIGS = 11
    IDEMPOTENT_WRITE = 12
    CREATE_TOKENS = 13
    DESCRIBE_TOKENS = 14


class AclPermissionType(enum.IntEnum):
    UNKNOWN = 0
    ANY = 1
    DENY = 2
    ALLOW = 3


class AclBinding(NamedTuple):
    """One ACL, as stored: every field definite (no ANY, no MATCH)."""

    resource_type: ResourceType
    resource_name: str
    pattern_type: PatternType
    principal: str
    host: str
    operation: AclOperation
    permission: AclPermissionType


class AclBindingFilter(NamedTuple):
    """Which bindings a DescribeAcls or DeleteAcls names; None matches any string."""

    resource_type: ResourceType
    resource_name: str | None
    pattern_type: PatternType
    principal: str | None
    host: str | None
    operation: AclOperation
    permission: AclPermissionType


class AclOutcome(NamedTuple):
    """The answer to one binding of `create_acls`."""

    error: ErrorCode
    message: str | None = None


class AclDeletion(NamedTuple):
    """The answer to one filter of `delete_acls`: the bindings it deleted."""

    error: ErrorCode
    message: str | None
    deleted: list[AclBinding]


class AclSnapshot(NamedTuple):
    """Every binding, and the version of the ACLs they are."""

    version: int
    bindings: list[AclBinding]


MATCH_ALL: Final = AclBindingFilter(
    ResourceType.ANY,
    None,
    PatternType.ANY,
    None,
    None,
    AclOperation.ANY,
    AclPermissionType.ANY,
)


def _enum(kind: type[enum.IntEnum], code: int) -> enum.IntEnum:
    """Kafka's `fromCode`: a code it does not know is UNKNOWN."""
    try:
        return kind(code)
    except ValueError:
        return kind(0)


def binding_from_codes(
    resource_type: int,
    resource_name: str,
    pattern_type: int,
    principal: str,
    host: str,
    operation: int,
    permission: int,
) -> AclBinding:
    """A binding from wire codes; unknown codes become UNKNOWN (then `invalid_binding` says so)."""
    return AclBinding(
        ResourceType(_enum(ResourceType, resource_type)),
        resource_name,
        PatternType(_enum(PatternType, pattern_type)),
        principal,
        host,
        AclOperation(_enum(AclOperation, operation)),
        AclPermissionType(_enum(AclPermissionType, permission)),
    )


def filter_from_codes(
    resource_type: int,
    resource_name: str | None,
    pattern_type: int,
    principal: str | None,
    host: str | None,
    operation: int,
    permission: int,
) -> AclBindingFilter:
    return AclBindingFilter(
        ResourceType(_enum(ResourceType, resource_type)),
        resource_name,
        PatternType(_enum(PatternType, pattern_type)),
        principal,
        host,
        AclOperation(_enum(AclOperation, operation)),
        AclPermissionType(_enum(AclPermissionType, permission)),
    )


def valid_principal(principal: str) -> bool:
    """Kafka's KafkaPrincipal form, `type:name`: Kafka's controller checks only the colon."""
    return ":" in principal


def invalid_binding(binding: AclBinding) -> str | None:
    """Why Kafka refuses to create `binding` with INVALID_REQUEST, or None when it is valid
    (the checks of its broker's CreateAcls and of its controller's `validateNewAcl`)."""
    if binding.resource_type in (ResourceType.UNKNOWN, ResourceType.ANY):
        return f"Invalid resourceType {binding.resource_type.name}"
    if binding.pattern_type not in (PatternType.LITERAL, PatternType.PREFIXED):
        return f"Invalid patternType {binding.pattern_type.name}"
    if binding.operation in (AclOperation.UNKNOWN, AclOperation.ANY):
        return f"Invalid operation {binding.operation.name}"
    if binding.permission not in (AclPermissionType.ALLOW, AclPermissionType.DENY):
        return f"Invalid permissionType {binding.permission.name}"
    if not binding.resource_name:
        return "Invalid empty resource name"
    if binding.resource_type is ResourceType.CLUSTER and binding.resource_name != CLUSTER_NAME:
        return f"The only valid name for the CLUSTER resource is {CLUSTER_NAME}"
    if not valid_principal(binding.principal):
        return (
            f"Could not parse principal from `{binding.principal}` (no colon is present"
            " separating the principal type from the principal name)"
        )
    if not binding.host:
        return "Invalid empty host"
    return None


def invalid_filter(acl_filter: AclBindingFilter) -> str | None:
    """Why Kafka refuses a filter (any UNKNOWN field), or None."""
    if acl_filter.resource_type is ResourceType.UNKNOWN:
        return "Unknown resourceType"
    if acl_filter.pattern_type is PatternType.UNKNOWN:
        return "Unknown patternType"
    if acl_filter.operation is AclOperation.UNKNOWN:
        return "Unknown operation"
    if acl_filter.permission is AclPermissionType.UNKNOWN:
        return "Unknown permissionType"
    return None


def _pattern_matches(acl_filter: AclBindingFilter, binding: AclBinding) -> bool:
    if acl_filter.resource_type not in (ResourceType.ANY, binding.resource_type):
        return False
    pattern = acl_filter.pattern_type
    if pattern not in (PatternType.ANY, PatternType.MATCH, binding.pattern_type):
        return False
    name = acl_filter.resource_name
    if name is None:
        return True
    if pattern in (PatternType.ANY, binding.pattern_type):
        return name == binding.resource_name
    # MATCH: the bindings that would apply to a resource called `name`.
    if binding.pattern_type is PatternType.LITERAL:
        return binding.resource_name in (name, WILDCARD)
    return name.startswith(binding.resource_name)


def matches(acl_filter: AclBindingFilter, binding: AclBinding) -> bool:
    """Kafka's `AclBindingFilter.matches`."""
    return (
        _pattern_matches(acl_filter, binding)
        and acl_filter.principal in (None, binding.principal)
        and acl_filter.host in (None, binding.host)
        and acl_filter.operation in (AclOperation.ANY, binding.operation)
        and acl_filter.permission in (AclPermissionType.ANY, binding.permission)
    )


def matching(acl_filter: AclBindingFilter, bindings: Iterable[AclBinding]) -> list[AclBinding]:
    """The bindings `acl_filter` matches, in a stable order (type, name, pattern, entry)."""
    return sorted(b for b in bindings if matches(acl_filter, b))
