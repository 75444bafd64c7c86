"""The values crossing the batch coordinator's contract (`_api.BatchCoordinator`).

Plain data, shared by every backend, the engine and the callers.
"""

from __future__ import annotations

import enum
import uuid
from collections.abc import Sequence
from typing import Final, NamedTuple

import msgspec

from diskless._types import (
    CompressionType,
    ControlType,
    ErrorCode,
    IsolationLevel,
    TimestampType,
    TopicPartition,
)
from diskless.records import (
    GZIP_LEVEL_DEFAULT,
    LZ4_LEVEL_DEFAULT,
    TIMESTAMP_AFTER_MAX_MS_DEFAULT,
    TIMESTAMP_BEFORE_MAX_MS_DEFAULT,
    ZSTD_LEVEL_DEFAULT,
)

DEFAULT_MAX_MESSAGE_BYTES = 1_048_588


class TopicConfig(msgspec.Struct, frozen=True, gc=False):
    """Per-topic settings the coordinator and the broker enforce. -1 means unlimited.

    Given when the topic is created, replaced whole by `alter_topic_config` (Kafka's dynamic
    topic configs: AlterConfigs, IncrementalAlterConfigs). The defaults are the library's: a
    topic is kept forever unless its creator says otherwise. The Kafka server creates topics
    with Kafka's defaults instead (`retention_ms` 7 days, or what its `log.retention.*`
    properties say: `ServerConfig.topic_defaults`), as does its `KafkaCluster.create_topic`
    without a config.
    """

    timestamp_type: TimestampType = TimestampType.CREATE_TIME
    retention_ms: int = -1
    retention_bytes: int = -1
    max_message_bytes: int = DEFAULT_MAX_MESSAGE_BYTES
    message_timestamp_before_max_ms: int = TIMESTAMP_BEFORE_MAX_MS_DEFAULT
    """Kafka's message.timestamp.before.max.ms: how far before the broker's clock a CreateTime
    record's timestamp may lie (default Long.MAX_VALUE: no bound)."""
    message_timestamp_after_max_ms: int = TIMESTAMP_AFTER_MAX_MS_DEFAULT
    """Kafka's message.timestamp.after.max.ms: how far after the broker's clock a CreateTime
    record's timestamp may lie (default one hour since Kafka 4.0, KIP-1030)."""
    compression_type: CompressionType = CompressionType.PRODUCER
    """Kafka's compression.type: the codec every batch is stored in, a batch in another codec
    recompressed on produce; PRODUCER stores each batch in the codec it came in."""
    compression_gzip_level: int = GZIP_LEVEL_DEFAULT
    compression_lz4_level: int = LZ4_LEVEL_DEFAULT
    compression_zstd_level: int = ZSTD_LEVEL_DEFAULT
    """Kafka 4's compression.{gzip,lz4,zstd}.level (KIP-390): the level a batch is recompressed
    at in that codec (`diskless.records.compression_level_error` says which are levels)."""

    @property
    def compression_level(self) -> int:
        """The level of the topic's codec (0 for those without levels)."""
        if self.compression_type == CompressionType.GZIP:
            return self.compression_gzip_level
        if self.compression_type == CompressionType.LZ4:
            return self.compression_lz4_level
        if self.compression_type == CompressionType.ZSTD:
            return self.compression_zstd_level
        return 0

    inapplicable_configs: tuple[tuple[str, str], ...] = ()
    """Kafka topic configs given at creation that mean nothing to a diskless topic
    (`min.insync.replicas`, `segment.bytes`, ...), as (name, value) sorted by name: kept, never
    applied, so that the topic is described as it was asked for."""


class ConfigResourceType(enum.IntEnum):
    """Kafka's `ConfigResource.Type` codes of the resources whose dynamic configs the
    coordinator keeps as names and values (`alter_resource_configs`); a topic's are its
    `TopicConfig`."""

    BROKER = 4
    """Named by a broker id, or "" for the cluster-wide default of every broker."""
    GROUP = 32


CONFIG_VERSION_COUNTER: Final = "config_version"
"""The coordinator counter every change of a topic's, broker's or group's configs increments,
in the same step: a broker's copy compares it to refresh."""


class BrokerRegistration(msgspec.Struct, frozen=True):
    """Where a live broker incarnation listens: what Metadata lists for the whole cluster."""

    broker_id: int
    broker_epoch: int
    host: str
    port: int
    rack: str | None
    expires_ms: int
    """The coordinator's clock: the broker counts as gone from then on unless it renews."""


class Membership(msgspec.Struct, frozen=True):
    """The live brokers and the version of that set, read together (`membership`)."""

    version: int
    """Goes up whenever the set of live registrations changes; never goes back. Every broker
    process advertises it as every partition's leader epoch."""
    brokers: list[BrokerRegistration]
    """Every broker whose registration has not expired, by id."""


class TopicDescription(msgspec.Struct, frozen=True):
    name: str
    partitions: int
    config: TopicConfig
    topic_id: uuid.UUID
    """KIP-516's topic id: random at creation, so a topic deleted and created again under the
    same name is told apart from its predecessor (clients drop metadata of the old one)."""


class CommitBatch(msgspec.Struct, frozen=True, gc=False):
    """A validated client batch placed at [byte_offset, byte_offset + size) of an uploaded object.

    The header fields are copied from the batch so that the coordinator never reads object bytes.
    (One per produced batch, holding no container: untracked by the cyclic garbage collector,
    whose full collections would otherwise walk every batch waiting in flight.)
    """

    topic_partition: TopicPartition
    byte_offset: int
    size: int
    record_count: int
    base_timestamp: int
    max_timestamp: int
    producer_id: int
    producer_epoch: int
    base_sequence: int
    is_transactional: bool = False
    lease_id: int | None = None
    """The transaction lease the broker took before the batch entered its WAL segment
    (`BatchCoordinator.acquire_txn_leases`); the commit releases it. A transactional batch with a
    lease commits while the lease is live; one without commits only while its transaction's
    registration is ONGOING (no end has begun)."""


class RegisteredTxn(msgspec.Struct, frozen=True):
    """A producer's registered transaction on one partition (AddPartitionsToTxn), as a broker
    needs it to rewrite a transaction version 1 producer's batches before producing them."""

    producer_epoch: int
    """The epoch the transaction runs at in the coordinator."""
    ending: bool
    client_epoch: int
    """The epoch the producer puts on its batches for it (-1: none bridged)."""
    sequence_base: int
    """The producer's sequence on the partition at which `producer_epoch` began."""


class CommitBatchResult(msgspec.Struct, frozen=True, gc=False):
    """The outcome of one CommitBatch. A duplicate is success with the original offsets.

    (`gc=False`: one is made per committed batch and none can be part of a reference cycle.)
    """

    error: ErrorCode
    base_offset: int = -1
    log_append_time: int = -1
    log_start_offset: int = -1
    error_message: str | None = None
    duplicate: bool = False


class CommitRefusal(enum.Enum):
    """Why a whole object was refused: nothing of it was recorded."""

    BROKER_FENCED = "broker fenced"
    """The commit carried a stale broker epoch: a newer incarnation of the broker exists, and
    this one must stop writing."""
    OBJECT_KEY_CONFLICT = "object key conflict"
    """The key was already committed, condemned as an orphan (it may be deleted), or created
    longer ago than the commit-age bound allows."""


class FileCommit(msgspec.Struct, frozen=True):
    """One uploaded object to commit: what `BatchCoordinator.commit_file` takes, as a value."""

    object_key: str
    file_size: int
    batches: Sequence[CommitBatch]


class CommitFileResult(msgspec.Struct, frozen=True):
    """The outcome of committing one object: each batch's result, or why none was considered."""

    batches: list[CommitBatchResult]
    """`batches[i]` answers the i-th CommitBatch; empty when `refused`."""
    refused: CommitRefusal | None = None
    reason: str = ""


class ExtentIndex(msgspec.Struct, frozen=True, gc=False):
    """Where a consolidated object keeps its index (the object's footer): the offset and time
    index of the extent's batches, which the coordinator no longer stores row by row."""

    byte_offset: int
    size: int


class BatchInfo(msgspec.Struct, frozen=True, gc=False):
    """Where a committed batch lives and which offsets it holds.

    A transaction marker exists only as metadata: `control` is set, `object_key` is empty and
    the read path synthesizes the control batch from these fields.

    An extent (`extent` set) is a run of consecutive batches, markers included, that
    consolidation copied into one object exactly as the read path serves them (base offsets
    and log append times already in place): [byte_offset, byte_offset + size) holds all of
    them, [base_offset, last_offset] their offsets, `max_timestamp` the largest of their
    timestamps. The read path finds a batch inside it through the object's index.
    """

    object_key: str
    byte_offset: int
    size: int
    base_offset: int
    last_offset: int
    timestamp_type: TimestampType
    log_append_time: int
    max_timestamp: int
    producer_id: int = -1
    producer_epoch: int = -1
    control: ControlType | None = None
    coordinator_epoch: int = 0
    extent: ExtentIndex | None = None
    object_size: int | None = None
    """The size of the object holding it, when the coordinator knows it: the read path then
    reads whole cache blocks of the object (one GET serves every later read of the block)."""


class FindBatchesRequest(msgspec.Struct, frozen=True):
    topic_partition: TopicPartition
    offset: int
    max_bytes: int
    isolation_level: IsolationLevel = IsolationLevel.READ_UNCOMMITTED
    """READ_COMMITTED returns batches below the last stable offset only, with the aborted
    transactions overlapping them."""


class FindBatchesResponse(msgspec.Struct, frozen=True):
    """The batches of one partition within the fetch's budgets.

    An extent is returned whole: the coordinator does not know where its batches lie, so it
    counts the extent holding the fetch offset as empty and any later one at its full size, and
    may therefore return more than the budgets allow, never less: the answer holds every batch
    the budgets take, over all the partitions of the fetch (`_rules.fetch.ExtentBudget`). The
    read path expands extents through their index and applies the budgets again
    (`FetchBudget`), with no further call; without extents the answer is already exact.
    """

    error: ErrorCode
    batches: list[BatchInfo]
    log_start_offset: int = -1
    high_watermark: int = -1
    last_stable_offset: int = -1
    aborted_transactions: list[tuple[int, int]] = msgspec.field(default_factory=list)
    """READ_COMMITTED: (producer id, first offset) of every aborted transaction overlapping the
    returned batches (last offset >= the fetch offset, first offset < the end of the batches)."""


class LeaseRequest(NamedTuple):
    """A transactional batch about to enter a broker's WAL segment."""

    topic_partition: TopicPartition
    producer_id: int
    producer_epoch: int


class LeaseResult(msgspec.Struct, frozen=True):
    """A granted lease (error NONE) or why the batch may not be written."""

    error: ErrorCode
    lease_id: int = -1
    expires_ms: int = -1
    """The coordinator's clock: a commit at or after this time is rejected."""


class ListOffsetsRequest(msgspec.Struct, frozen=True):
    topic_partition: TopicPartition
    timestamp: int
    isolation_level: IsolationLevel = IsolationLevel.READ_UNCOMMITTED


class TimeLookup(msgspec.Struct, frozen=True):
    """A ListOffsets answer only records hold. Kafka reads the batch holding the answer and
    answers its first record whose timestamp reaches the target; the coordinator knows batches,
    not records, so it names them and the read path reads them.

    The answer is the first record, walking `batches` in offset order, whose offset is at least
    `start_offset` (the log start) and whose timestamp is at least `target`: its offset and
    timestamp when its offset is below `end_offset` (the high watermark, or the LSO for
    READ_COMMITTED), else none (offset and timestamp -1), as Kafka filters what it found. When
    no record qualifies, the response's own offset and timestamp stand.

    `batches` are rows (batches, markers or extents, whose index finds the batch inside them):
    the first row whose largest timestamp reaches `target`, which holds the answer unless the
    log start cuts it, and then the next such row.
    """

    target: int
    start_offset: int
    end_offset: int
    batches: list[BatchInfo]


class ListOffsetsResponse(msgspec.Struct, frozen=True):
    error: ErrorCode
    offset: int = -1
    timestamp: int = -1
    lookup: TimeLookup | None = None
    """Set when the answer lies in records: `DisklessBroker.list_offsets` resolves it (see
    `TimeLookup`); `offset` and `timestamp` are then the answer should no record qualify."""


class DeleteRecordsRequest(msgspec.Struct, frozen=True):
    topic_partition: TopicPartition
    offset: int


class DeleteRecordsResponse(msgspec.Struct, frozen=True):
    error: ErrorCode
    low_watermark: int = -1


class RetentionResult(msgspec.Struct, frozen=True):
    """What one bounded retention pass removed; `more` means another pass has work left."""

    batches_deleted: int
    bytes_deleted: int
    more: bool


class ConsolidationCandidate(msgspec.Struct, frozen=True):
    """The oldest run of a partition's batches that consolidation may move into one object."""

    topic_partition: TopicPartition
    batches: list[BatchInfo]
    """Consecutive (no offset gap), oldest first, markers included, none an extent, all below
    the last stable offset and committed before the age bound asked for."""
    partition_key: int | None = None
    """The coordinator's id of the partition, new when a topic is re-created (None: unchecked)."""


class ExtentSwap(msgspec.Struct, frozen=True):
    """A consolidated object, uploaded, that is to replace a candidate's batch rows."""

    candidate: ConsolidationCandidate
    object_key: str
    object_size: int
    byte_offset: int
    """Where the candidate's batches start in the object; they lie back to back from there."""
    size: int
    """The bytes of all of them, as served (markers as control batches)."""
    index: ExtentIndex


class ExtentSwapResult(msgspec.Struct, frozen=True):
    swapped: bool
    reason: str = ""
    """Why not: the range changed (retention, DeleteRecords, topic deletion, another
    consolidator), or the object key may not be committed (as for `commit_file`)."""


class MetadataStats(msgspec.Struct, frozen=True):
    """How much batch metadata the coordinator holds, for the retained bytes it describes."""

    batch_rows: int
    """Batches and markers stored row by row."""
    extent_rows: int
    retained_bytes: int
    """The bytes of the batches and extents the rows describe."""
    stored_bytes: int | None
    """What the rows and their indexes take in the backend's own storage: SQLite the bytes in
    use on their pages, PostgreSQL the size of their relations (which keeps deleted rows until
    VACUUM); None when the backend cannot measure it."""


class FileState(enum.Enum):
    LIVE = "live"
    """Committed and referenced by at least one live batch."""
    UNREFERENCED = "unreferenced"
    """Committed, but every batch in it was deleted (retention, delete-records, topic deletion)."""
    CONDEMNED = "condemned"
    """Never committed; registered as an orphan, so any later commit of it is rejected."""


class FileInfo(msgspec.Struct, frozen=True):
    key: str
    state: FileState
    size: int
    since_ms: int
    """When the file entered its current state (commit, last batch deleted, or condemnation)."""


class FileStats(msgspec.Struct, frozen=True):
    live_objects: int
    live_bytes: int
    unreferenced_objects: int
    unreferenced_bytes: int
    condemned_objects: int
    condemned_bytes: int


class ProducerSnapshot(msgspec.Struct, frozen=True):
    """The producer state of one producer on one partition, for tests and tools."""

    producer_id: int
    producer_epoch: int
    last_sequence: int
    last_timestamp: int
    coordinator_epoch: int
    current_txn_first_offset: int | None
    retained_batches: list[tuple[int, int, int, int]]
    """(first_sequence, last_sequence, first_offset, last_offset), oldest first."""


class ScramUpsertion(msgspec.Struct, frozen=True):
    """AlterUserScramCredentials' upsertion: a credential from the password the client salted
    (KIP-554: the password itself never reaches the broker)."""

    user: str
    mechanism: int
    """Kafka's number (`diskless._scram.ScramMechanism`); an unknown one is refused."""
    iterations: int
    salt: bytes
    salted_password: bytes

    def __repr__(self) -> str:
        return f"ScramUpsertion({self.user!r}, mechanism={self.mechanism}, [hidden])"


class ScramDeletion(NamedTuple):
    user: str
    mechanism: int


class ScramResult(NamedTuple):
    """One user's outcome of AlterUserScramCredentials, with Kafka's code and message."""

    user: str
    error: ErrorCode
    message: str | None = None


class ScramDescription(NamedTuple):
    """One user's answer to DescribeUserScramCredentials: (mechanism, iterations) per
    credential, or the error and message Kafka gives."""

    user: str
    error: ErrorCode
    message: str | None
    credentials: list[tuple[int, int]]


NOTIFY_PAYLOAD_BYTES_MAX: Final = 7_900
"""PostgreSQL refuses a NOTIFY payload of 8,000 bytes or more: a larger change is sent as
"everything" instead (still one notice per step)."""


class PartitionChanges(msgspec.Struct, frozen=True, array_like=True):
    """What one or more committed steps changed, as far as a fetch can tell."""

    partitions: frozenset[TopicPartition] = frozenset()
    """Their high watermark, last stable offset or log start offset may have moved."""
    topics: frozenset[str] = frozenset()
    """Created, grown, reconfigured or deleted: every partition of them may have changed."""
    everything: bool = False
    """Unknown what changed (another SQLite process wrote, a feed reconnected): all of it."""

    def __bool__(self) -> bool:
        return self.everything or bool(self.partitions or self.topics)

    def covers(self, tp: TopicPartition) -> bool:
        return self.everything or tp in self.partitions or tp.topic in self.topics

    def encode(self) -> str:
        """The NOTIFY payload: JSON, or "everything" when that would be too large."""
        text = _ENCODER.encode(self).decode()
        if len(text.encode()) >= NOTIFY_PAYLOAD_BYTES_MAX:
            return _ENCODER.encode(EVERYTHING).decode()
        return text

    @classmethod
    def decode(cls, payload: str) -> PartitionChanges:
        """The value of a NOTIFY payload; "everything" for one that does not parse."""
        try:
            return _DECODER.decode(payload)
        except (msgspec.DecodeError, ValueError, TypeError):
            return EVERYTHING


EVERYTHING: Final = PartitionChanges(everything=True)
_ENCODER = msgspec.json.Encoder()
_DECODER = msgspec.json.Decoder(PartitionChanges)


class PartitionOffsets(msgspec.Struct, frozen=True, array_like=True, gc=False):
    """A partition's offsets as a fetch sees them (`BatchCoordinator.partition_offsets`)."""

    incarnation: int
    """The store's id of the partition: a topic deleted and created again gets a new one."""
    high_watermark: int
    last_stable_offset: int
    log_start_offset: int
