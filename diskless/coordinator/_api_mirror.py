"""The batch coordinator's contract for mirrored topics (KIP-1279), part of `BatchCoordinator`.

A mirror process (`diskless.mirror`) copies a source cluster's partitions into diskless topics
at the source's offsets. The coordinator keeps what every process must agree on: which mirror
holds a topic, at which epoch and in which state (`_rules.mirror.MirrorMark`), and the mirrored
batches themselves, appended by one atomic step that checks they continue the partition.
"""

from __future__ import annotations

import abc
from collections.abc import Sequence

from diskless.coordinator._rules.mirror import (
    MirrorAppendResult,
    MirrorBatch,
    MirrorClaim,
    MirrorMark,
    MirrorState,
)


class MirrorContract(abc.ABC):
    """The mirrored-topic operations of every `BatchCoordinator`."""

    @abc.abstractmethod
    async def mirror_claim(self, topic: str, name: str) -> MirrorClaim:
        """Mirror `name` takes the topic: PREPARING at the next epoch, which fences any process
        of the mirror holding an older one. Refused for an unknown topic, one with records of
        its own (never mirrored, and not empty), one of another mirror, and a stopped one."""

    @abc.abstractmethod
    async def mirror_set_state(
        self, topic: str, name: str, epoch: int, state: MirrorState
    ) -> MirrorClaim:
        """The holder of the topic (`name` at `epoch`) moves it to MIRRORING or PAUSED;
        refused when it no longer holds it."""

    @abc.abstractmethod
    async def mirror_status(self, topic: str) -> MirrorMark | None:
        """The topic's mark (None: unknown topic, or never mirrored). A read."""

    @abc.abstractmethod
    async def mirror_append(
        self,
        name: str,
        epoch: int,
        object_key: str,
        object_size: int,
        batches: Sequence[MirrorBatch],
    ) -> list[MirrorAppendResult]:
        """Append source batches, uploaded in the object `object_key`, at their offsets
        (`_rules.mirror.plan_mirror_append`); `responses[i]` answers `batches[i]`. A retry of
        an append that landed answers DUPLICATE. A failure to learn whether the step landed
        raises `CommitOutcomeUnknownError`: retry it as it was."""

    @abc.abstractmethod
    async def mirror_stop(self, topic: str, name: str) -> MirrorClaim:
        """Failover: every process of the mirror is fenced, the transactions mirrored producers
        left open are aborted, and the topic becomes writable (STOPPED), for good."""
