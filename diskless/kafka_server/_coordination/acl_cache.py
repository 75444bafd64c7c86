"""A broker process's copy of the cluster's ACLs, and the authorizer's decisions over it.

Kafka's brokers learn ACL changes from the metadata log; here every process polls the batch
coordinator's ACL version (`BatchCoordinator.acl_version`, one small read) every
`acl_refresh_ms`, and loads the bindings again only when it grew. A change made through this
process is loaded at once, before its CreateAcls or DeleteAcls is answered. So an ACL change
takes effect on every broker process within `acl_refresh_ms` (plus one coordinator read) of
being answered, and at once on the process that made it.

The copy only moves forward. The version is a counter every change increments (every SCRAM
credential change too), and a snapshot carries the version it was read at: one that is not newer
than the copy held (a poll or a read answered from an older state than the one loaded) never
replaces it, so nothing once allowed or refused here is decided by an older set of ACLs again.

While the coordinator does not answer, the last snapshot keeps deciding, and a failed refresh is
retried promptly (`refresher`): a revoke answered before or during an outage takes effect
within `acl_refresh_ms` plus one read of a coordinator that is back. Before the first snapshot
is loaded only super users are allowed anything (Kafka answers AuthorizerNotReady then).
"""

from __future__ import annotations

import logging
from collections.abc import Sequence

from diskless.clock import Clock
from diskless.coordinator import (
    AclBinding,
    AclBindingFilter,
    AclDeletion,
    AclOperation,
    AclOutcome,
    AclSnapshot,
    BatchCoordinator,
    ResourceType,
)
from diskless.errors import DisklessError
from diskless.kafka_server._coordination.authorizer import (
    EMPTY_INDEX,
    AclIndex,
    AuthorizerSettings,
    authorize,
    authorize_any,
)
from diskless.kafka_server._coordination.refresher import ForwardCopy

_log = logging.getLogger(__name__)


class AclCache(ForwardCopy[AclSnapshot]):
    """`start` (loads the first snapshot), `authorize`..., `close`."""

    def __init__(
        self,
        coordinator: BatchCoordinator,
        settings: AuthorizerSettings,
        refresh_ms: int,
        clock: Clock | None = None,
    ) -> None:
        super().__init__("ACLs", coordinator, refresh_ms, clock)
        self.settings = settings
        self._index = EMPTY_INDEX
        self._started = False

    async def start(self) -> None:
        if not self._started:
            await self.refresh()
            self._started = True
            self._refresher.start()

    async def _read(self) -> AclSnapshot:
        return await self._coordinator.acl_snapshot()

    def _take(self, snapshot: AclSnapshot) -> None:
        changed = tuple(snapshot.bindings) != self._index.bindings or self._version is None
        self._index = AclIndex(snapshot.bindings)
        if changed:  # (the version also grows with SCRAM credential changes)
            _log.info("ACLs: version %d, %d bindings", snapshot.version, len(snapshot.bindings))

    async def create(self, bindings: Sequence[AclBinding]) -> list[AclOutcome]:
        """CreateAcls through the coordinator, then loaded here before the answer."""
        outcomes = await self._coordinator.create_acls(bindings)
        await self._refresh_after_change()
        return outcomes

    async def delete(self, filters: Sequence[AclBindingFilter]) -> list[AclDeletion]:
        """DeleteAcls through the coordinator, then loaded here before the answer."""
        deletions = await self._coordinator.delete_acls(filters)
        await self._refresh_after_change()
        return deletions

    async def describe(self, acl_filter: AclBindingFilter) -> list[AclBinding]:
        """DescribeAcls: from the coordinator, which has every process's changes."""
        return await self._coordinator.describe_acls(acl_filter)

    async def _refresh_after_change(self) -> None:
        try:
            await self.refresh()
        except DisklessError as error:  # stored all the same: the next refresh loads it
            _log.debug("ACLs: refreshing after a change failed: %r", error)

    def authorize(
        self,
        principal: str,
        host: str,
        operation: AclOperation,
        resource_type: ResourceType,
        name: str,
    ) -> bool:
        if self._version is None and principal not in self.settings.super_users:
            return False
        return authorize(
            self._index, self.settings, principal, host, operation, resource_type, name
        )

    def authorize_any(
        self, principal: str, host: str, operation: AclOperation, resource_type: ResourceType
    ) -> bool:
        if self._version is None and principal not in self.settings.super_users:
            return False
        return authorize_any(self._index, self.settings, principal, host, operation, resource_type)
