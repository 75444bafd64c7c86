"""The SCRAM credentials every broker of the cluster authenticates against, kept in the batch
coordinator (Kafka keeps them in its metadata log): a user created through one broker process
authenticates on every other one, from its next lookup.

Each authentication looks its credential up afresh (one read of the coordinator per SCRAM
exchange), so a deleted or changed credential takes effect at once everywhere, with nothing to
invalidate.
"""

from __future__ import annotations

from collections.abc import Sequence

from diskless.coordinator import (
    BatchCoordinator,
    ScramCredential,
    ScramDeletion,
    ScramDescription,
    ScramMechanism,
    ScramResult,
    ScramUpsertion,
)


class Credentials:
    """The cluster's SCRAM credentials: looked up by the SASL exchange, managed by the admin
    APIs (AlterUserScramCredentials, DescribeUserScramCredentials)."""

    def __init__(self, coordinator: BatchCoordinator) -> None:
        self._coordinator = coordinator

    async def scram(self, user: str, mechanism: ScramMechanism) -> ScramCredential | None:
        """The credential a client's proof is checked against; raises when the coordinator
        cannot answer (the exchange then ends without a verdict)."""
        return await self._coordinator.scram_credential(user, mechanism)

    async def alter(
        self, deletions: Sequence[ScramDeletion], upsertions: Sequence[ScramUpsertion]
    ) -> list[ScramResult]:
        return await self._coordinator.alter_scram_credentials(deletions, upsertions)

    async def describe(self, users: Sequence[str] | None) -> list[ScramDescription]:
        return await self._coordinator.describe_scram_credentials(users)
