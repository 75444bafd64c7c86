"""The engine's SCRAM credentials (KIP-554): what every broker process authenticates against.

Kafka keeps them in its metadata log; here the batch coordinator keeps them, so a user created
through one broker process authenticates on every other one. Only the credential is stored
(salt, iterations, StoredKey, ServerKey), never a password. Every change increments the same
counter as an ACL change (`ACL_VERSION_COUNTER`), in the same step: a broker keeps a copy of the
credentials (`scram_snapshot`) and polls that counter to refresh it, as it does its ACLs.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence

from diskless._scram import ScramCredential, ScramMechanism
from diskless._types import ErrorCode
from diskless.coordinator._engine.base import EngineBase
from diskless.coordinator._rules.acls import ACL_VERSION_COUNTER
from diskless.coordinator._rules.scram import ScramSnapshot, describe, plan_alterations
from diskless.coordinator._store import Changes, Needs, Operation, ReadView, StoreStep
from diskless.coordinator._values import (
    ScramDeletion,
    ScramDescription,
    ScramResult,
    ScramUpsertion,
)

_log = logging.getLogger(__name__)


class ScramOperations(EngineBase):
    async def alter_scram_credentials(
        self, deletions: Sequence[ScramDeletion], upsertions: Sequence[ScramUpsertion]
    ) -> list[ScramResult]:
        users = {d.user for d in deletions} | {u.user for u in upsertions}
        needs = Needs(scram_users=users, counters=(ACL_VERSION_COUNTER,))

        async def alter(db: StoreStep) -> list[ScramResult]:
            snapshot = await db.load(needs)
            results, changes = plan_alterations(deletions, upsertions, snapshot.scram)
            if changes:
                version = snapshot.counters.get(ACL_VERSION_COUNTER, 0) + 1
                await db.apply(Changes(scram=changes, counters={ACL_VERSION_COUNTER: version}))
            return results

        results = await self._write(Operation.ALTER_SCRAM_CREDENTIALS, alter)
        for result in results:
            if result.error is ErrorCode.NONE:
                _log.info("SCRAM credentials of user %r altered", result.user)
        return results

    async def describe_scram_credentials(
        self, users: Sequence[str] | None
    ) -> list[ScramDescription]:
        named = list(users) if users else None
        stored = await self._read(lambda view: view.scram_credentials(named))
        return describe(named, stored)

    async def scram_credential(
        self, user: str, mechanism: ScramMechanism
    ) -> ScramCredential | None:
        stored = await self._read(lambda view: view.scram_credentials([user]))
        return stored.get((user, mechanism))

    async def scram_snapshot(self) -> ScramSnapshot:
        async def snapshot(view: ReadView) -> ScramSnapshot:
            return ScramSnapshot(await view.acl_version(), await view.scram_credentials(None))

        return await self._read(snapshot)
