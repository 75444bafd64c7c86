"""A broker process's copy of the cluster's ACLs, and the authorizer's decisions over it.

Kafka's brokers learn ACL changes from the metadata log; here every process polls the batch
coordinator's ACL version (`BatchCoordinator.acl_version`, one small read) every
`acl_refresh_ms`, and loads the bindings again only when it changed. A change made through this
process is loaded at once, before its CreateAcls or DeleteAcls is answered. So an ACL change
takes effect on every broker process within `acl_refresh_ms` (plus one coordinator read) of
being answered, and at once on the process that made it.

While the coordinator does not answer, the last snapshot keeps deciding (one WARNING when
refreshing starts failing, one when it works again). Before the first snapshot is loaded only
super users are allowed anything (Kafka answers AuthorizerNotReady then).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Sequence

from diskless.coordinator import (
    AclBinding,
    AclBindingFilter,
    AclDeletion,
    AclOperation,
    AclOutcome,
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

_log = logging.getLogger(__name__)


class AclCache:
    """`start` (loads the first snapshot), `authorize`..., `close`."""

    def __init__(
        self, coordinator: BatchCoordinator, settings: AuthorizerSettings, refresh_ms: int
    ) -> None:
        if refresh_ms < 1:
            raise ValueError("refresh_ms must be >= 1")
        self._coordinator = coordinator
        self.settings = settings
        self._refresh_ms = refresh_ms
        self._index = EMPTY_INDEX
        self._version: int | None = None
        self._task: asyncio.Task[None] | None = None
        self._failing = False
        self._lock = asyncio.Lock()

    @property
    def version(self) -> int | None:
        """The ACL version the snapshot is (None before the first load)."""
        return self._version

    async def start(self) -> None:
        if self._task is None:
            await self.refresh()
            self._task = asyncio.create_task(self._refresh_forever())

    async def close(self) -> None:
        task, self._task = self._task, None
        if task is not None:
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)

    async def refresh(self) -> None:
        """Load the bindings if the coordinator's version differs from the snapshot's. Raises
        the coordinator's errors."""
        async with self._lock:
            version = await self._coordinator.acl_version()
            if version == self._version:
                return
            snapshot = await self._coordinator.acl_snapshot()
            self._index = AclIndex(snapshot.bindings)
            self._version = snapshot.version
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

    async def _refresh_forever(self) -> None:
        while True:
            await asyncio.sleep(self._refresh_ms / 1000)
            try:
                await self.refresh()
            except DisklessError as error:
                if not self._failing:
                    _log.warning("ACLs: refreshing from the coordinator failed: %r", error)
                self._failing = True
                continue
            if self._failing:
                _log.warning("ACLs: refreshing from the coordinator works again")
            self._failing = False

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
