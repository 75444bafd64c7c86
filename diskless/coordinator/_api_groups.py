"""The batch coordinator's contract for consumer groups, part of `BatchCoordinator`.

Kafka keeps a group's coordinator and its committed offsets in `__consumer_offsets`; here the
batch coordinator keeps who owns each group (`_rules.ownership`), its generation or, for a
consumer-protocol group (KIP-848), its whole state, and its offsets, every write fenced by the
owner's incarnation so that a process that lost a group changes nothing of it.
"""

from __future__ import annotations

import abc
from collections.abc import Mapping, Sequence

from diskless._types import CommittedOffset, ErrorCode, GroupOwnership, GroupRecord, TopicPartition


class GroupContract(abc.ABC):
    """The consumer-group operations of every `BatchCoordinator`."""

    @abc.abstractmethod
    async def claim_group(
        self, group_id: str, broker_id: int, broker_epoch: int
    ) -> GroupOwnership | None:
        """FindCoordinator: the group's owner. The current one while its registration is
        live; otherwise (no owner yet, or its registration expired or was replaced) the broker
        `broker_id` at `broker_epoch` takes the group over, keeping its generation, if that
        incarnation's own registration is live; None when neither is."""

    @abc.abstractmethod
    async def group_ownership(self, group_id: str) -> GroupOwnership | None:
        """The group's owner as stored, live or not (None: never claimed). A read."""

    @abc.abstractmethod
    async def store_group_generation(self, group_id: str, owner: GroupOwnership) -> ErrorCode:
        """A rebalance completed: store `owner.generation` as the group's. NOT_COORDINATOR
        when that incarnation no longer owns the group; ILLEGAL_GENERATION unless the
        generation grows."""

    @abc.abstractmethod
    async def store_group_state(
        self, group_id: str, owner: GroupOwnership, state: bytes
    ) -> ErrorCode:
        """A consumer-protocol group (KIP-848) changed: store its whole state, encoded by its
        owner, in place of the one before. NOT_COORDINATOR when that incarnation (`owner`'s
        broker id and epoch) no longer owns the group; MESSAGE_TOO_LARGE beyond
        `GROUP_STATE_BYTES_MAX`."""

    @abc.abstractmethod
    async def group_state(self, group_id: str) -> bytes | None:
        """A consumer-protocol group's state as stored last (None: never stored). A read."""

    @abc.abstractmethod
    async def commit_offsets(
        self,
        group_id: str,
        offsets: Mapping[TopicPartition, CommittedOffset],
        fence: GroupOwnership | None = None,
    ) -> dict[TopicPartition, ErrorCode]:
        """Store committed offsets (offset, metadata and leader epoch) per partition; an unknown
        partition's answer is UNKNOWN_TOPIC_OR_PARTITION. Offsets of a deleted topic are dropped
        with it.

        With a `fence` (the owner committing, and the generation its member claims: see
        `_rules.ownership.check_group_fence`), nothing is stored and every partition answers
        NOT_COORDINATOR or ILLEGAL_GENERATION unless that owner and generation are current."""

    @abc.abstractmethod
    async def fetch_offsets(self, group_id: str) -> dict[TopicPartition, CommittedOffset]:
        """The group's committed offsets (those of committed transactions included)."""

    @abc.abstractmethod
    async def group_records(self, group_ids: Sequence[str] | None = None) -> dict[str, GroupRecord]:
        """What is stored of each group that has an ownership or committed offsets, among
        `group_ids` (every such group when None), by group id: ListGroups and DescribeGroups
        read it. A read."""

    @abc.abstractmethod
    async def delete_offsets(
        self, group_id: str, partitions: Sequence[TopicPartition], fence: GroupOwnership
    ) -> ErrorCode:
        """OffsetDelete at the group's owner: the committed offsets of `partitions` go (those
        without one are no error), in one step fenced by the owner as `commit_offsets` is
        (NOT_COORDINATOR, and nothing deleted, once `fence`'s incarnation lost the group)."""

    @abc.abstractmethod
    async def delete_group(self, group_id: str, fence: GroupOwnership) -> ErrorCode:
        """DeleteGroups at the group's owner: the group's committed offsets and its stored
        consumer-protocol state (`store_group_state`) go and its generation starts again from 0,
        in one step fenced by the owner (NOT_COORDINATOR, and
        nothing deleted, once `fence`'s incarnation lost the group). The owner keeps the
        group (a client that found the coordinator before is answered there, as in Kafka,
        where a group's coordinator follows from its id). Whether the group may be deleted
        (empty, existing) is its owner's to decide."""
