"""The engine's ACLs: Kafka's authorizer bindings, kept where every broker process sees them.

Kafka keeps ACLs in its metadata log and every broker applies the records in order; here they
are rows of the batch coordinator, and every change increments one counter
(`ACL_VERSION_COUNTER`) in the same step. A broker's authorizer holds a snapshot and compares
that counter to refresh it, which costs one lookup while nothing changes.
"""

from __future__ import annotations

from collections.abc import Sequence

from diskless._types import ErrorCode
from diskless.coordinator._engine.base import EngineBase
from diskless.coordinator._rules.acls import (
    ACL_VERSION_COUNTER,
    AclBinding,
    AclBindingFilter,
    AclDeletion,
    AclOutcome,
    AclSnapshot,
    invalid_binding,
    invalid_filter,
    matching,
)
from diskless.coordinator._store import Changes, Needs, Operation, ReadView, StoreStep

_CHANGE_NEEDS = Needs(acls=True, counters=(ACL_VERSION_COUNTER,))


class AclOperations(EngineBase):
    async def create_acls(self, bindings: Sequence[AclBinding]) -> list[AclOutcome]:
        refusals = [invalid_binding(b) for b in bindings]
        outcomes = [
            AclOutcome(ErrorCode.NONE)
            if why is None
            else AclOutcome(ErrorCode.INVALID_REQUEST, why)
            for why in refusals
        ]
        valid = [b for b, why in zip(bindings, refusals, strict=True) if why is None]
        if not valid:
            return outcomes

        async def create(db: StoreStep) -> None:
            snapshot = await db.load(_CHANGE_NEEDS)
            stored = set(snapshot.acls)
            # Creating a binding that exists is a success that changes nothing (as in Kafka).
            new = [b for b in dict.fromkeys(valid) if b not in stored]
            if new:
                version = snapshot.counters.get(ACL_VERSION_COUNTER, 0) + 1
                await db.apply(Changes(acls_created=new, counters={ACL_VERSION_COUNTER: version}))

        await self._write(Operation.CREATE_ACLS, create)
        return outcomes

    async def delete_acls(self, filters: Sequence[AclBindingFilter]) -> list[AclDeletion]:
        refusals = [invalid_filter(f) for f in filters]

        async def delete(db: StoreStep) -> list[AclDeletion]:
            snapshot = await db.load(_CHANGE_NEEDS)
            results = []
            gone: dict[AclBinding, None] = {}
            for acl_filter, why in zip(filters, refusals, strict=True):
                if why is not None:
                    results.append(AclDeletion(ErrorCode.INVALID_REQUEST, why, []))
                    continue
                found = matching(acl_filter, snapshot.acls)
                gone.update(dict.fromkeys(found))
                results.append(AclDeletion(ErrorCode.NONE, None, found))
            if gone:
                version = snapshot.counters.get(ACL_VERSION_COUNTER, 0) + 1
                await db.apply(
                    Changes(acls_deleted=list(gone), counters={ACL_VERSION_COUNTER: version})
                )
            return results

        if all(why is not None for why in refusals):
            return [AclDeletion(ErrorCode.INVALID_REQUEST, why, []) for why in refusals]
        return await self._write(Operation.DELETE_ACLS, delete)

    async def describe_acls(self, acl_filter: AclBindingFilter) -> list[AclBinding]:
        """The bindings `acl_filter` matches (a filter `invalid_filter` refuses matches none)."""
        if invalid_filter(acl_filter) is not None:
            return []
        return matching(acl_filter, await self._read(lambda view: view.acls()))

    async def acl_version(self) -> int:
        return await self._read(lambda view: view.acl_version())

    async def acl_snapshot(self) -> AclSnapshot:
        async def snapshot(view: ReadView) -> AclSnapshot:
            return AclSnapshot(await view.acl_version(), await view.acls())

        return await self._read(snapshot)
