"""The batch coordinator's contract for share groups (KIP-932), part of `BatchCoordinator`.

Each share-partition's state (`_rules.share`) is a cluster-wide truth held in the coordinator
and changed in atomic steps, so any broker answers ShareFetch and ShareAcknowledge for any
partition: no leader holds it, and a lock runs out by the coordinator's clock even when the
broker that granted it died. The share group's membership (ShareGroupHeartbeat) is not here.
"""

from __future__ import annotations

import abc
from collections.abc import Mapping, Sequence

from diskless._types import ErrorCode, TopicPartition
from diskless.coordinator._rules.share import (
    AcknowledgeBatch,
    ShareAcquired,
    ShareAnswer,
    ShareFetchPartition,
    ShareLimits,
    ShareOffset,
    SharePartitionState,
    ShareRequest,
)


class ShareStateContract(abc.ABC):
    """The share-partition operations of every `BatchCoordinator`."""

    @abc.abstractmethod
    async def share_steps(self, requests: Sequence[ShareRequest]) -> list[ShareAnswer]:
        """Acquisitions, acknowledgements and member releases of any share groups, in order, in
        one atomic step: one load, one apply, one durable write for all. `answers[i]` answers
        `requests[i]` exactly as the operation of its own would have, had they been run one
        after another (the three below are this with one request): a broker whose share
        requests queue behind the coordinator sends all that wait at once."""

    @abc.abstractmethod
    async def acquire_share_records(
        self,
        group_id: str,
        member_id: str,
        partitions: Sequence[ShareFetchPartition],
        limits: ShareLimits,
    ) -> dict[TopicPartition, ShareAcquired]:
        """ShareFetch's acquisition: in one step, for every partition named, the member acquires
        the records available again and then new ones (`_rules.share.acquire`), the state
        initialized first if it has none and trimmed to the log's start. Locks that ran out by
        the coordinator's clock are released first. Each partition's answer holds the acquired
        ranges (empty: none) and the state epoch they were acquired under."""

    @abc.abstractmethod
    async def acknowledge_share_records(
        self,
        group_id: str,
        member_id: str,
        acknowledgements: Mapping[TopicPartition, Sequence[AcknowledgeBatch]],
        limits: ShareLimits,
        state_epochs: Mapping[TopicPartition, int] | None = None,
    ) -> dict[TopicPartition, ErrorCode]:
        """ShareFetch's and ShareAcknowledge's acknowledgements, in one step: per partition,
        all applied or none (INVALID_RECORD_STATE: a record named is not held by the member;
        INVALID_REQUEST: malformed batches). A partition whose `state_epochs` entry is not its
        current state epoch answers FENCED_STATE_EPOCH (its offsets were altered or deleted
        since the records were acquired)."""

    @abc.abstractmethod
    async def release_share_member(
        self,
        group_id: str,
        member_id: str,
        partitions: Sequence[TopicPartition],
        limits: ShareLimits,
    ) -> None:
        """The member's share session closed (or it left): what it holds in those partitions
        is available again, with one delivery fewer."""

    @abc.abstractmethod
    async def share_offsets(
        self, group_id: str, partitions: Sequence[TopicPartition] | None = None
    ) -> dict[TopicPartition, ShareOffset]:
        """DescribeShareGroupOffsets: each named partition's start offset and state epoch, of
        those with a state (all of the group's when None). A read."""

    @abc.abstractmethod
    async def share_partition_states(
        self, group_id: str, partitions: Sequence[TopicPartition] | None = None
    ) -> dict[TopicPartition, SharePartitionState]:
        """Each share-partition's whole stored state (its locks as stored: see
        `_rules.share.expire` and `counts`), for metrics and describing. A read."""

    @abc.abstractmethod
    async def alter_share_offsets(
        self, group_id: str, offsets: Mapping[TopicPartition, int]
    ) -> dict[TopicPartition, ErrorCode]:
        """AlterShareGroupOffsets: each share-partition starts over at its offset, in a new
        state epoch (whether the group may, having no members, is the caller's to decide).
        UNKNOWN_TOPIC_OR_PARTITION for a partition that does not exist."""

    @abc.abstractmethod
    async def delete_share_offsets(
        self, group_id: str, partitions: Sequence[TopicPartition]
    ) -> dict[TopicPartition, ErrorCode]:
        """DeleteShareGroupOffsets: each share-partition forgets its state, in a new state
        epoch; the next acquisition initializes it from `share.auto.offset.reset`."""

    @abc.abstractmethod
    async def delete_share_group(self, group_id: str) -> None:
        """DeleteGroups of a share group: every share-partition state of the group goes."""
