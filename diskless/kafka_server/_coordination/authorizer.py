"""Kafka's StandardAuthorizer decision, as a pure function over a snapshot of ACL bindings.

Who may do what, decided the way Kafka decides it (`StandardAuthorizerData.authorize`):
- a super user (`super.users`) may do anything;
- otherwise the bindings that apply are those of the resource's type whose pattern covers its
  name (the LITERAL name, the LITERAL `*`, every PREFIXED pattern the name starts with), for
  the principal or `User:*`, from the client's host or `*`;
- one applicable DENY for the operation (or ALL) denies, whatever allows;
- else one applicable ALLOW allows. An ALLOW of READ, WRITE, DELETE or ALTER also allows
  DESCRIBE, and one of ALTER_CONFIGS allows DESCRIBE_CONFIGS; a DENY implies nothing;
- else, when the resource has any binding at all (for anyone), the answer is no; when it has
  none, `allow.everyone.if.no.acl.found` answers.
Nothing here waits or reads: the snapshot is refreshed elsewhere (`acl_cache`).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable
from typing import Final, NamedTuple

from diskless.coordinator import (
    WILDCARD,
    WILDCARD_PRINCIPAL,
    AclBinding,
    AclOperation,
    AclPermissionType,
    PatternType,
    ResourceType,
)

_IMPLIES_DESCRIBE: Final = frozenset(
    {
        AclOperation.DESCRIBE,
        AclOperation.READ,
        AclOperation.WRITE,
        AclOperation.DELETE,
        AclOperation.ALTER,
    }
)
_IMPLIES_DESCRIBE_CONFIGS: Final = frozenset(
    {AclOperation.DESCRIBE_CONFIGS, AclOperation.ALTER_CONFIGS}
)
HARDCODED_NAME: Final = "hardcode"
"""The name Kafka's `authorizeByResourceType` first tries, as any resource of the type."""


class AuthorizerSettings(NamedTuple):
    super_users: frozenset[str] = frozenset()
    """Kafka's `super.users`: principals (`User:name`) allowed everything."""
    allow_if_no_acl: bool = False
    """Kafka's `allow.everyone.if.no.acl.found`."""


def parse_super_users(value: str) -> frozenset[str]:
    """Kafka's `super.users`: principals separated by semicolons."""
    return frozenset(p.strip() for p in value.split(";") if p.strip())


class AclIndex:
    """The bindings of a snapshot by resource type, LITERAL ones by name: a check looks at the
    bindings that may apply, not at all of them."""

    __slots__ = ("_literal", "_prefixed", "bindings")

    def __init__(self, bindings: Iterable[AclBinding]) -> None:
        self.bindings = tuple(bindings)
        self._literal: dict[tuple[ResourceType, str], list[AclBinding]] = defaultdict(list)
        self._prefixed: dict[ResourceType, list[AclBinding]] = defaultdict(list)
        for binding in self.bindings:
            if binding.pattern_type is PatternType.LITERAL:
                self._literal[(binding.resource_type, binding.resource_name)].append(binding)
            else:
                self._prefixed[binding.resource_type].append(binding)

    def applicable(self, resource_type: ResourceType, name: str) -> list[AclBinding]:
        """The bindings whose pattern covers the resource `name` of `resource_type`."""
        found = list(self._literal.get((resource_type, name), ()))
        if name != WILDCARD:
            found += self._literal.get((resource_type, WILDCARD), ())
        found += [
            b for b in self._prefixed.get(resource_type, ()) if name.startswith(b.resource_name)
        ]
        return found

    def of_type(self, resource_type: ResourceType) -> list[AclBinding]:
        return [b for b in self.bindings if b.resource_type is resource_type]


EMPTY_INDEX: Final = AclIndex(())


def _applies(binding: AclBinding, principal: str, host: str, operation: AclOperation) -> bool:
    """Whether `binding` speaks to this principal, host and operation (the resource matches)."""
    if binding.principal not in (principal, WILDCARD_PRINCIPAL):
        return False
    if binding.host not in (WILDCARD, host):
        return False
    if binding.operation is AclOperation.ALL or binding.operation is operation:
        return True
    if binding.permission is not AclPermissionType.ALLOW:
        return False
    if operation is AclOperation.DESCRIBE:
        return binding.operation in _IMPLIES_DESCRIBE
    if operation is AclOperation.DESCRIBE_CONFIGS:
        return binding.operation in _IMPLIES_DESCRIBE_CONFIGS
    return False


def authorize(
    index: AclIndex,
    settings: AuthorizerSettings,
    principal: str,
    host: str,
    operation: AclOperation,
    resource_type: ResourceType,
    name: str,
) -> bool:
    """Whether `principal` from `host` may do `operation` on the resource."""
    if principal in settings.super_users:
        return True
    bindings = index.applicable(resource_type, name)
    allowed = False
    for binding in bindings:
        if _applies(binding, principal, host, operation):
            if binding.permission is AclPermissionType.DENY:
                return False
            allowed = True
    if allowed:
        return True
    return not bindings and settings.allow_if_no_acl


def authorize_any(
    index: AclIndex,
    settings: AuthorizerSettings,
    principal: str,
    host: str,
    operation: AclOperation,
    resource_type: ResourceType,
) -> bool:
    """Whether `principal` may do `operation` on at least one resource of the type, as Kafka's
    `authorizeByResourceType` answers (KIP-679: an idempotent producer needs WRITE on some
    topic, or IDEMPOTENT_WRITE on the cluster): an ALLOW that no DENY of the same principal
    covers (a DENY of `*`, of the same literal name, or of a prefix of the allowed pattern)."""
    if authorize(index, settings, principal, host, operation, resource_type, HARDCODED_NAME):
        return True
    denied_literal: set[str] = set()
    denied_prefixes: list[str] = []
    allows: list[AclBinding] = []
    for binding in index.of_type(resource_type):
        if not _applies(binding, principal, host, operation):
            continue
        if binding.permission is AclPermissionType.DENY:
            if binding.pattern_type is PatternType.LITERAL:
                denied_literal.add(binding.resource_name)
            else:
                denied_prefixes.append(binding.resource_name)
        else:
            allows.append(binding)
    if WILDCARD in denied_literal:
        return False
    for allow in allows:
        name = allow.resource_name
        if any(name.startswith(prefix) for prefix in denied_prefixes):
            continue
        if allow.pattern_type is PatternType.PREFIXED or name == WILDCARD:
            return True
        if name not in denied_literal:
            return True
    return False
