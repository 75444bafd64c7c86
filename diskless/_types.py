"""Kafka vocabulary shared by every module: partitions, error codes, isolation and time types."""

from __future__ import annotations

import enum
from typing import NamedTuple


class TopicPartition(NamedTuple):
    """A partition of a topic; a tuple so that it hashes and compares cheaply as a dict key."""

    topic: str
    partition: int

    def __str__(self) -> str:
        return f"{self.topic}-{self.partition}"


class GroupOwnership(NamedTuple):
    """Which broker incarnation coordinates a consumer group, and the group's generation.

    A group has one coordinator at a time (Kafka's group coordinator). The ownership is held
    by a broker *epoch*: it moves to another broker only once that epoch's registration is no
    longer live (expired, withdrawn, or replaced by a newer incarnation), and the step that
    moves it is the one that finds so. The generation outlives owners, so that a new owner
    continues the numbering and a commit of an older generation is refused wherever it lands.
    """

    broker_id: int
    broker_epoch: int
    generation: int = 0
    """The group's generation as its owner last stored it (bumped by every rebalance); as a
    fence (`commit_offsets`), the generation the committing member claims, -1 for none."""


class GroupRecord(NamedTuple):
    """What the batch coordinator holds of a consumer group: its owner as stored (None: never
    claimed, as a group whose offsets a standalone consumer committed) and whether it has
    committed offsets."""

    owner: GroupOwnership | None
    has_offsets: bool


class CommittedOffset(NamedTuple):
    """A consumer group's committed position in a partition (Kafka's OffsetAndMetadata)."""

    offset: int
    """The next offset the group reads."""
    metadata: str | None = None
    """What the committing client attached, kept as it came."""
    leader_epoch: int = -1
    """The leader epoch of the last record read (`committed_leader_epoch`, KIP-320), -1 when
    the client gave none: a client resuming from the offset checks it against the log's."""


class ErrorCode(enum.IntEnum):
    """Kafka's numeric error codes, as they appear in protocol responses."""

    UNKNOWN_SERVER_ERROR = -1
    NONE = 0
    OFFSET_OUT_OF_RANGE = 1
    CORRUPT_MESSAGE = 2
    UNKNOWN_TOPIC_OR_PARTITION = 3
    LEADER_NOT_AVAILABLE = 5
    NOT_LEADER_OR_FOLLOWER = 6
    REQUEST_TIMED_OUT = 7
    MESSAGE_TOO_LARGE = 10
    COORDINATOR_NOT_AVAILABLE = 15
    NOT_COORDINATOR = 16
    INVALID_TOPIC_EXCEPTION = 17
    RECORD_LIST_TOO_LARGE = 18
    INVALID_REQUIRED_ACKS = 21
    ILLEGAL_GENERATION = 22
    TOPIC_AUTHORIZATION_FAILED = 29
    GROUP_AUTHORIZATION_FAILED = 30
    CLUSTER_AUTHORIZATION_FAILED = 31
    INVALID_TIMESTAMP = 32
    UNSUPPORTED_SASL_MECHANISM = 33
    ILLEGAL_SASL_STATE = 34
    TOPIC_ALREADY_EXISTS = 36
    INVALID_PARTITIONS = 37
    INVALID_REQUEST = 42
    POLICY_VIOLATION = 44
    OUT_OF_ORDER_SEQUENCE_NUMBER = 45
    DUPLICATE_SEQUENCE_NUMBER = 46
    INVALID_PRODUCER_EPOCH = 47
    INVALID_TXN_STATE = 48
    INVALID_PRODUCER_ID_MAPPING = 49
    INVALID_TRANSACTION_TIMEOUT = 50
    CONCURRENT_TRANSACTIONS = 51
    TRANSACTION_COORDINATOR_FENCED = 52
    TRANSACTIONAL_ID_AUTHORIZATION_FAILED = 53
    KAFKA_STORAGE_ERROR = 56
    FENCED_LEADER_EPOCH = 74
    UNKNOWN_LEADER_EPOCH = 75
    SASL_AUTHENTICATION_FAILED = 58
    UNKNOWN_PRODUCER_ID = 59
    UNSUPPORTED_COMPRESSION_TYPE = 76
    STALE_BROKER_EPOCH = 77
    INVALID_RECORD = 87
    PRODUCER_FENCED = 90
    RESOURCE_NOT_FOUND = 91
    DUPLICATE_RESOURCE = 92
    UNACCEPTABLE_CREDENTIAL = 93
    UNKNOWN_TOPIC_ID = 100
    TRANSACTION_ABORTABLE = 120
    INVALID_RECORD_STATE = 121
    SHARE_SESSION_NOT_FOUND = 122
    INVALID_SHARE_SESSION_EPOCH = 123
    FENCED_STATE_EPOCH = 124
    SHARE_SESSION_LIMIT_REACHED = 133

    @property
    def retriable(self) -> bool:
        """Whether a Kafka client retries a request that failed with this code."""
        return self in _RETRIABLE


_RETRIABLE = frozenset(
    {
        ErrorCode.CORRUPT_MESSAGE,
        ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
        ErrorCode.LEADER_NOT_AVAILABLE,
        ErrorCode.NOT_LEADER_OR_FOLLOWER,
        ErrorCode.REQUEST_TIMED_OUT,
        ErrorCode.COORDINATOR_NOT_AVAILABLE,
        ErrorCode.NOT_COORDINATOR,
        ErrorCode.CONCURRENT_TRANSACTIONS,
        ErrorCode.KAFKA_STORAGE_ERROR,
        ErrorCode.FENCED_LEADER_EPOCH,
        ErrorCode.UNKNOWN_LEADER_EPOCH,
    }
)


class TimestampType(enum.IntEnum):
    """A topic's `message.timestamp.type`: who sets a record's timestamp."""

    CREATE_TIME = 0
    LOG_APPEND_TIME = 1


class CompressionType(enum.IntEnum):
    """A topic's `compression.type`: the codec its batches are stored in. Each codec's value is
    its id in a batch's attributes; PRODUCER keeps whatever codec the producer chose."""

    PRODUCER = -1
    UNCOMPRESSED = 0
    GZIP = 1
    SNAPPY = 2
    LZ4 = 3
    ZSTD = 4


class IsolationLevel(enum.IntEnum):
    """A fetch's isolation: READ_COMMITTED stops at the last stable offset."""

    READ_UNCOMMITTED = 0
    READ_COMMITTED = 1


def check_isolation_level(value: int) -> IsolationLevel:
    """`value` as an IsolationLevel; ValueError when it names none (Kafka: INVALID_REQUEST)."""
    if value.__class__ is IsolationLevel:  # already checked (every fetch passes here thrice)
        return value
    try:
        return IsolationLevel(value)
    except ValueError:
        raise ValueError(
            f"isolation_level must be 0 (read_uncommitted) or 1 (read_committed), not {value!r}"
        ) from None


class OffsetSpec(enum.IntEnum):
    """ListOffsets sentinels; any timestamp >= 0 is a lookup by time instead."""

    MAX_TIMESTAMP = -3
    EARLIEST = -2
    LATEST = -1


class ControlType(enum.IntEnum):
    """The type of a transaction marker, as written in a control record's key."""

    ABORT = 0
    COMMIT = 1


NO_PRODUCER_ID = -1
NO_PRODUCER_EPOCH = -1
NO_SEQUENCE = -1
NO_TIMESTAMP = -1
