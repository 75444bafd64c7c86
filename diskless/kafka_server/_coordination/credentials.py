"""The SCRAM credentials every broker of the cluster authenticates against, kept in the batch
coordinator (Kafka keeps them in its metadata log), and each broker process's copy of them.

Kafka's brokers authenticate from their own copy of the metadata, so a broker cut off from its
controller still lets known users log in. Here each process keeps a copy of every credential
(`BatchCoordinator.scram_snapshot`), refreshed the way its ACLs are: it polls the coordinator's
security version (`acl_version`, which every credential change increments too) every
`refresh_ms`, loads the credentials again only when it grew, retries a failed refresh promptly
(`refresher`), and never replaces its copy with an older one. A change made through this
process is loaded at once, before AlterUserScramCredentials is answered.

A login is checked against the copy, so known users log in while the coordinator is away, and a
deleted or changed credential stops working on every process within `refresh_ms` (plus one
coordinator read) of being answered, as an ACL change does. A user the copy does not hold is
looked up in the coordinator (one read): a user created through another process since the last
refresh logs in at once, and a deleted one is refused as soon as the copy has dropped it. Until
the first copy is loaded every login is looked up.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from types import MappingProxyType

from diskless.clock import Clock
from diskless.coordinator import (
    BatchCoordinator,
    ScramCredential,
    ScramDeletion,
    ScramDescription,
    ScramMechanism,
    ScramResult,
    ScramSnapshot,
    ScramUpsertion,
)
from diskless.errors import DisklessError
from diskless.kafka_server._coordination.refresher import ForwardCopy

_log = logging.getLogger(__name__)

REFRESH_MS_DEFAULT = 1_000
"""As the ACLs' (`acl_refresh_ms`), which the server passes."""

_NONE: Mapping[tuple[str, ScramMechanism], ScramCredential] = MappingProxyType({})


class Credentials(ForwardCopy[ScramSnapshot]):
    """The cluster's SCRAM credentials: looked up by the SASL exchange, managed by the admin
    APIs (AlterUserScramCredentials, DescribeUserScramCredentials). `start` loads the first
    copy (or leaves it to the refreshes while the coordinator does not answer), `close`."""

    def __init__(
        self,
        coordinator: BatchCoordinator,
        refresh_ms: int = REFRESH_MS_DEFAULT,
        clock: Clock | None = None,
    ) -> None:
        super().__init__("SCRAM credentials", coordinator, refresh_ms, clock)
        self._credentials = _NONE

    async def start(self) -> None:
        try:
            await self.refresh()
        except DisklessError as error:  # logins are looked up until a refresh loads the copy
            _log.debug("SCRAM credentials: the first load failed: %r", error)
        self._refresher.start()

    async def _read(self) -> ScramSnapshot:
        return await self._coordinator.scram_snapshot()

    def _take(self, snapshot: ScramSnapshot) -> None:
        credentials = dict(snapshot.credentials)
        if credentials != self._credentials:  # (the version also grows with ACL changes)
            users = len({user for user, _ in credentials})
            _log.info("SCRAM credentials: version %d, %d users", snapshot.version, users)
        self._credentials = MappingProxyType(credentials)

    async def scram(self, user: str, mechanism: ScramMechanism) -> ScramCredential | None:
        """The credential a client's proof is checked against: the copy's, else the
        coordinator's; raises when the copy has none and the coordinator cannot answer (the
        exchange then ends without a verdict)."""
        found = self._credentials.get((user, mechanism))
        if found is not None:
            return found
        return await self._coordinator.scram_credential(user, mechanism)

    async def alter(
        self, deletions: Sequence[ScramDeletion], upsertions: Sequence[ScramUpsertion]
    ) -> list[ScramResult]:
        """AlterUserScramCredentials through the coordinator, then loaded here before the
        answer."""
        results = await self._coordinator.alter_scram_credentials(deletions, upsertions)
        try:
            await self.refresh()
        except DisklessError as error:  # stored all the same: the next refresh loads it
            _log.debug("SCRAM credentials: refreshing after a change failed: %r", error)
        return results

    async def describe(self, users: Sequence[str] | None) -> list[ScramDescription]:
        return await self._coordinator.describe_scram_credentials(users)
