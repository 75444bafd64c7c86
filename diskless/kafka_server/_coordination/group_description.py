"""What the admin APIs read of a group, whatever its protocol: one description, and the rules
that decide on it.

DescribeGroups, ListGroups, DeleteGroups and OffsetDelete never look inside a group's state
machine: each kind of group (the classic protocol's `group_state.GroupState`, and any other
kind the coordinator keeps) answers `describe()` with a `GroupDescription` (its type, its state
under Kafka's name, its protocol type and protocol, its members, the topics they are subscribed
to), and these rules decide on that, as Kafka's `Group` interface lets its coordinator decide
for classic and consumer groups alike:
- DescribeGroups describes classic groups only, any other as Dead (`describe_groups_answer`);
- a group that does not exist is Dead: it has no members, no generation and no committed
  offsets (`exists`); DescribeGroups answers it as Dead with no members, DeleteGroups and
  OffsetDelete with GROUP_ID_NOT_FOUND, and ListGroups leaves it out. (Kafka forgets an empty
  group without offsets at its next cleanup, every `offsets.retention.check.interval.ms`;
  here it is gone at once);
- DeleteGroups deletes only an empty group, else NON_EMPTY_GROUP;
- OffsetDelete refuses a classic group with members whose protocol type is not `consumer`
  (NON_EMPTY_GROUP: its subscriptions cannot be read), and each partition of a topic a member
  is subscribed to (GROUP_SUBSCRIBED_TO_TOPIC).
A classic group's subscriptions are read from its members' metadata for the group's protocol
(`consumer_subscription`, Kafka's `ConsumerProtocolSubscription`).
"""

from __future__ import annotations

import enum
import struct
from collections.abc import Iterable
from typing import Final, NamedTuple, Protocol

import kio.schema.consumer_protocol_subscription.v0 as subscription_v0
import kio.schema.consumer_protocol_subscription.v1 as subscription_v1
import kio.schema.consumer_protocol_subscription.v2 as subscription_v2
import kio.schema.consumer_protocol_subscription.v3 as subscription_v3
from kio.schema.errors import ErrorCode as WireError
from kio.serial import entity_reader
from kio.serial.errors import SerialError

CONSUMER_PROTOCOL_TYPE: Final = "consumer"
"""The protocol type of Kafka's consumers (`ConsumerProtocol.PROTOCOL_TYPE`)."""

DEAD: Final = "Dead"
"""The state of a group that does not exist, in every protocol."""

_READ_SUBSCRIPTION: Final = tuple(
    entity_reader(version.ConsumerProtocolSubscription)
    for version in (subscription_v0, subscription_v1, subscription_v2, subscription_v3)
)
"""By version; a later one is read as the latest (its fields come after those known)."""
_VERSION: Final = struct.Struct(">h")


class GroupType(enum.Enum):
    """Kafka's group types (KIP-848, KIP-932), as ListGroups names and filters them."""

    CLASSIC = "classic"
    CONSUMER = "consumer"
    SHARE = "share"

    @classmethod
    def parse(cls, name: str) -> GroupType | None:
        """The type a ListGroups filter names, in any case; None for a name Kafka does not
        know (it matches no group)."""
        try:
            return cls(name.lower())
        except ValueError:
            return None


class DescribedMember(NamedTuple):
    member_id: str
    instance_id: str | None
    """The static member's `group.instance.id` (KIP-345)."""
    client_id: str
    client_host: str
    """As Kafka shows it: the client's address after a slash."""
    metadata: bytes
    """Its subscription in the group's protocol (empty unless the group is stable)."""
    assignment: bytes
    """Its assignment (empty unless the group is stable)."""


class GroupDescription(NamedTuple):
    group_id: str
    group_type: GroupType
    state: str
    """Kafka's name of the group's state (Empty, PreparingRebalance, CompletingRebalance,
    Stable for a classic group; Assigning, Reconciling... for a consumer group; Dead)."""
    protocol_type: str
    """Empty when unknown (a group known only from its committed offsets)."""
    protocol: str
    """The selected protocol (the assignor), empty unless the group is stable."""
    members: tuple[DescribedMember, ...]
    subscribed_topics: frozenset[str] | None
    """The topics some member is subscribed to; None when they cannot be known."""


class Describable(Protocol):
    """A group's state machine, as the admin APIs read it."""

    def describe(self) -> GroupDescription: ...


def dead(group_id: str) -> GroupDescription:
    """The description of a group that does not exist."""
    return GroupDescription(group_id, GroupType.CLASSIC, DEAD, "", "", (), frozenset())


def at_rest(group_id: str) -> GroupDescription:
    """An existing group that no state machine holds here (its owner is gone, or has not
    served it since it took it): empty, of the classic type, its protocol type unknown."""
    return GroupDescription(group_id, GroupType.CLASSIC, "Empty", "", "", (), frozenset())


def exists(description: GroupDescription, generation: int, has_offsets: bool) -> bool:
    """Whether the group exists as Kafka's coordinator would know it: it has members, or has
    completed a rebalance, or has committed offsets (a standalone consumer's group)."""
    return bool(description.members) or generation > 0 or has_offsets


def describe_groups_answer(description: GroupDescription) -> GroupDescription:
    """What DescribeGroups shows of the group: it describes classic groups only, and any other
    as one that does not exist (Kafka's `GroupMetadataManager.describeGroups`: a consumer group
    is ConsumerGroupDescribe's)."""
    if description.group_type is GroupType.CLASSIC:
        return description
    return dead(description.group_id)


def delete_group_refusal(description: GroupDescription) -> WireError:
    """DeleteGroups' answer, as decided by the group's state (NONE: it may be deleted)."""
    if description.state == DEAD:
        return WireError.group_id_not_found
    if description.members:
        return WireError.non_empty_group
    return WireError.none


def offset_delete_refusal(description: GroupDescription) -> WireError:
    """OffsetDelete's answer for the whole group (NONE: each partition is decided alone)."""
    if description.state == DEAD:
        return WireError.group_id_not_found
    if (
        description.group_type is GroupType.CLASSIC
        and description.members
        and description.protocol_type != CONSUMER_PROTOCOL_TYPE
    ):
        return WireError.non_empty_group
    return WireError.none


def subscribed(description: GroupDescription, topic: str) -> bool:
    """Whether a member of the group is subscribed to the topic (unknown: not, as Kafka)."""
    topics = description.subscribed_topics
    return topics is not None and topic in topics


def consumer_subscription(metadata: bytes) -> frozenset[str] | None:
    """The topics of a consumer's `ConsumerProtocolSubscription` (a version, then its fields);
    None when it is not one."""
    try:
        (version,) = _VERSION.unpack_from(metadata, 0)
        if version < 0:
            return None
        read = _READ_SUBSCRIPTION[min(version, len(_READ_SUBSCRIPTION) - 1)]
        subscription, _ = read(memoryview(metadata), _VERSION.size)
    except (struct.error, SerialError, ValueError):
        return None
    return frozenset(subscription.topics or ())  # a null array subscribes to nothing


def subscriptions(metadata: Iterable[bytes]) -> frozenset[str] | None:
    """The union of the consumers' subscriptions; None if one of them cannot be read."""
    topics: set[str] = set()
    for one in metadata:
        subscription = consumer_subscription(one)
        if subscription is None:
            return None
        topics |= subscription
    return frozenset(topics)
