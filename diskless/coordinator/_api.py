"""The batch coordinator's contract: the operations, and the values crossing it.

Every batch-in operation is batch-out: `responses[i]` answers `requests[i]`, and a response list
always has exactly the length of its request list. Protocol outcomes are `ErrorCode` values in the
responses; exceptions (`diskless.errors.CoordinatorError`) mean the backing store failed.
"""

from __future__ import annotations

import abc
import enum
from collections.abc import Mapping, Sequence
from typing import NamedTuple

import msgspec

from diskless._limits import CommitBounds
from diskless._types import ControlType, ErrorCode, IsolationLevel, TimestampType, TopicPartition
from diskless.records import TIMESTAMP_AFTER_MAX_MS_DEFAULT, TIMESTAMP_BEFORE_MAX_MS_DEFAULT
from diskless.txn import PendingOffset, TxnRecord, TxnStep

DEFAULT_MAX_MESSAGE_BYTES = 1_048_588


class TopicConfig(msgspec.Struct, frozen=True):
    """Per-topic settings the coordinator and the broker enforce. -1 means unlimited."""

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


class BrokerRegistration(msgspec.Struct, frozen=True):
    """Where a live broker incarnation listens: what Metadata lists for the whole cluster."""

    broker_id: int
    broker_epoch: int
    host: str
    port: int
    rack: str | None
    expires_ms: int
    """The coordinator's clock: the broker counts as gone from then on unless it renews."""


class TopicDescription(msgspec.Struct, frozen=True):
    name: str
    partitions: int
    config: TopicConfig


class CommitBatch(msgspec.Struct, frozen=True):
    """A validated client batch placed at [byte_offset, byte_offset + size) of an uploaded object.

    The header fields are copied from the batch so that the coordinator never reads object bytes.
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
    may therefore return more than the budgets allow. The read path expands extents through
    their index and applies the budgets exactly again (`FetchBudget`); without extents the
    answer is already exact.
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


class ListOffsetsResponse(msgspec.Struct, frozen=True):
    error: ErrorCode
    offset: int = -1
    timestamp: int = -1
    extent: BatchInfo | None = None
    """Set when the answer lies inside an extent, which only its object's index can resolve:
    the answer is then the extent's first batch whose last offset is >= `offset` and whose
    timestamp is >= `timestamp`, answered as (max(its base offset, `offset`), its timestamp).
    `DisklessBroker.list_offsets` resolves it."""


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
    """What the rows and their indexes take in the backend's own storage (None when the backend
    cannot measure it)."""


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


class BatchCoordinator(abc.ABC):
    """Sequences batches from all brokers: assigns offsets and enforces producer rules.

    Every backend guarantees:
    - Reads never wait behind writes: `find_batches`, `list_offsets`, `describe_topics`,
      `describe_producers` and the file queries see the last applied write even while another
      write (of this process or another one) waits for, or holds, the store's write lock, so a
      stalled commit cannot stall fetches.
    - Each write decides on the time at which it applies: it reads the injected clock inside its
      atomic step, not when it is called, so a write that waited (behind other work or another
      process's lock) checks commit age, lease and producer expiry, retention and stamps file
      states with the time it actually lands.
    """

    @property
    @abc.abstractmethod
    def commit_bounds(self) -> CommitBounds:
        """The object prefix and commit-age bound it enforces, which writers and the file
        manager check their own budgets against (`diskless._limits`)."""

    # --- topics -------------------------------------------------------------------------------
    @abc.abstractmethod
    async def create_topic(
        self, name: str, partitions: int, config: TopicConfig | None = None
    ) -> bool:
        """Create a topic; False (and no change) if it already exists."""

    @abc.abstractmethod
    async def create_partitions(self, name: str, total_partitions: int) -> ErrorCode:
        """Grow a topic to `total_partitions` (Kafka's CreatePartitions): UNKNOWN_TOPIC_OR_PARTITION
        for an unknown topic, INVALID_PARTITIONS unless the count grows."""

    @abc.abstractmethod
    async def describe_topics(self, names: Sequence[str] | None = None) -> list[TopicDescription]:
        """Describe the named topics (all topics when None); unknown names are omitted."""

    @abc.abstractmethod
    async def delete_topics(self, names: Sequence[str]) -> None:
        """Delete topics and all their batches; their files may become unreferenced."""

    # --- brokers ------------------------------------------------------------------------------
    @abc.abstractmethod
    async def register_broker(self, broker_id: int) -> int:
        """Hand out the next broker epoch for `broker_id`, fencing every older incarnation."""

    @abc.abstractmethod
    async def announce_broker(
        self,
        broker_id: int,
        broker_epoch: int,
        host: str,
        port: int,
        rack: str | None,
        ttl_ms: int,
    ) -> bool:
        """Register or renew where this broker incarnation listens, for `ttl_ms` (0 withdraws
        it); False, and no change, when the epoch is not the broker's current one (fenced)."""

    @abc.abstractmethod
    async def live_brokers(self) -> list[BrokerRegistration]:
        """Every broker whose registration has not expired, by id: the cluster's members."""

    # --- the write path -----------------------------------------------------------------------
    @abc.abstractmethod
    async def commit_file(
        self,
        object_key: str,
        broker_id: int,
        broker_epoch: int,
        file_size: int,
        batches: Sequence[CommitBatch],
    ) -> CommitFileResult:
        """Commit one uploaded object's batches atomically; `result.batches[i]` answers
        `batches[i]`.

        A stale broker epoch and a key already committed or condemned, or one whose encoded
        creation time is older than the backend's `commit_age_max_ms` (the bound the file
        manager's orphan grace relies on), are refusals (`CommitFileResult.refused`): nothing
        is recorded. Transactional batches are checked against their registration and
        lease (`CommitBatch.lease_id`); the commit releases the leases its batches carry.
        """

    # --- transactions (the partitions' side; `diskless.txn.TransactionParticipant`) ------------
    @abc.abstractmethod
    async def allocate_producer_ids(self, count: int) -> int:
        """Reserve `count` consecutive producer ids, durably; returns the first one."""

    @abc.abstractmethod
    async def add_partitions_to_txn(
        self, producer_id: int, producer_epoch: int, partitions: Sequence[TopicPartition]
    ) -> list[ErrorCode]:
        """Register (producer, epoch) as having an ongoing transaction on each partition (KIP-890).

        UNKNOWN_TOPIC_OR_PARTITION for an unknown partition; INVALID_PRODUCER_EPOCH for an epoch
        older than the producer's on that partition. `result[i]` answers `partitions[i]`.
        """

    @abc.abstractmethod
    async def acquire_txn_leases(
        self,
        broker_id: int,
        broker_epoch: int,
        requests: Sequence[LeaseRequest],
        ttl_ms: int,
    ) -> list[LeaseResult]:
        """Leases for transactional batches about to enter a WAL segment: the commit barrier.

        A lease is granted only while the (producer, epoch) registration is ONGOING
        (INVALID_TXN_STATE otherwise, INVALID_PRODUCER_EPOCH for a stale epoch); it expires
        `ttl_ms` later on the coordinator's clock. An end of the transaction waits until each of
        its leases is released by a commit or has expired. Raises BrokerFencedError for a stale
        broker epoch. `result[i]` answers `requests[i]`.
        """

    @abc.abstractmethod
    async def release_txn_leases(self, lease_ids: Sequence[int]) -> None:
        """Give up leases whose batches will not be committed (their segment failed), so that
        an end need not wait for them to expire. Unknown ids are ignored. Always safe: a commit
        naming a released lease is rejected."""

    @abc.abstractmethod
    async def write_txn_markers(
        self,
        producer_id: int,
        producer_epoch: int,
        marker_epoch: int,
        commit: bool,
        coordinator_epoch: int,
        partitions: Sequence[TopicPartition],
    ) -> list[ErrorCode]:
        """Write COMMIT or ABORT markers once no batch of the transaction can still land.

        See `diskless.txn.TransactionParticipant.write_txn_markers`.
        """

    # --- transaction records (the transaction coordinators' side; `diskless.txn`) ------------
    @abc.abstractmethod
    async def txn_init(self, transactional_id: str, timeout_ms: int) -> TxnStep:
        """InitProducerId: a new record at epoch 0, or the epoch bumped (`init_record`)."""

    @abc.abstractmethod
    async def txn_add_partitions(
        self,
        transactional_id: str,
        producer_id: int,
        producer_epoch: int,
        partitions: Sequence[TopicPartition],
    ) -> list[ErrorCode]:
        """AddPartitionsToTxn: check the record, register the partitions (KIP-890) and add them
        to it, atomically; `result[i]` answers `partitions[i]`."""

    @abc.abstractmethod
    async def txn_end(
        self, transactional_id: str, producer_id: int, producer_epoch: int, commit: bool
    ) -> TxnStep:
        """EndTxn: prepare the decision (`end_record`); `must_complete` asks for `txn_complete`."""

    @abc.abstractmethod
    async def txn_expire(self, transactional_id: str) -> TxnStep:
        """Prepare an abort of a transaction past its timeout (`expire_record`)."""

    @abc.abstractmethod
    async def txn_complete(self, prepared: TxnRecord, coordinator_epoch: int) -> TxnStep:
        """Place a prepared transaction's markers once none of its batches can still land, and
        complete its record, in one step; nothing is written if the record moved on."""

    @abc.abstractmethod
    async def describe_txns(self, transactional_ids: Sequence[str]) -> list[TxnRecord | None]:
        """The records of the ids, None for an unknown id."""

    @abc.abstractmethod
    async def txns_due(self) -> list[TxnRecord]:
        """Records a sweeper must act on now (`TxnRecord.due_ms`), earliest first."""

    @abc.abstractmethod
    async def txn_add_offsets(
        self, transactional_id: str, producer_id: int, producer_epoch: int, group_id: str
    ) -> ErrorCode:
        """AddOffsetsToTxn: the transaction commits offsets of `group_id` (opened if needed)."""

    @abc.abstractmethod
    async def txn_commit_offsets(
        self,
        transactional_id: str,
        producer_id: int,
        producer_epoch: int,
        group_id: str,
        offsets: Sequence[PendingOffset],
    ) -> ErrorCode:
        """TxnOffsetCommit: the offsets take effect if and when the transaction commits."""

    # --- consumer groups (Kafka's __consumer_offsets) -----------------------------------------
    @abc.abstractmethod
    async def commit_offsets(
        self, group_id: str, offsets: Mapping[TopicPartition, tuple[int, str | None]]
    ) -> dict[TopicPartition, ErrorCode]:
        """Store committed offsets, (offset, metadata) per partition; an unknown partition's
        answer is UNKNOWN_TOPIC_OR_PARTITION. Offsets of a deleted topic are dropped with it."""

    @abc.abstractmethod
    async def fetch_offsets(self, group_id: str) -> dict[TopicPartition, tuple[int, str | None]]:
        """The group's committed offsets (those of committed transactions included)."""

    # --- the read path ------------------------------------------------------------------------
    @abc.abstractmethod
    async def find_batches(
        self, requests: Sequence[FindBatchesRequest], fetch_max_bytes: int
    ) -> list[FindBatchesResponse]:
        """Batches from each requested offset, within per-partition and total byte budgets."""

    @abc.abstractmethod
    async def list_offsets(
        self, requests: Sequence[ListOffsetsRequest]
    ) -> list[ListOffsetsResponse]:
        """Kafka ListOffsets: EARLIEST, LATEST, MAX_TIMESTAMP or the first offset at a time."""

    # --- deletion -----------------------------------------------------------------------------
    @abc.abstractmethod
    async def delete_records(
        self, requests: Sequence[DeleteRecordsRequest]
    ) -> list[DeleteRecordsResponse]:
        """Advance log start offsets (Kafka DeleteRecords)."""

    @abc.abstractmethod
    async def enforce_retention(self, max_batches: int = 10_000) -> RetentionResult:
        """Apply time and size retention, deleting at most `max_batches` batches in this call."""

    # --- consolidation ------------------------------------------------------------------------
    @abc.abstractmethod
    async def consolidation_candidates(
        self, committed_before_ms: int, bytes_max: int, limit: int
    ) -> list[ConsolidationCandidate]:
        """Up to `limit` partitions' oldest runs of batch rows (after their extents) committed
        before `committed_before_ms` and below the last stable offset, each cut at `bytes_max`
        (a run holds at least one batch, even a larger one)."""

    @abc.abstractmethod
    async def commit_extent(self, swap: ExtentSwap) -> ExtentSwapResult:
        """Replace the candidate's batch rows by one extent row, atomically.

        The object's file becomes LIVE; files whose last batch moved out become UNREFERENCED.
        Refused, with no change, when the rows of the range are no longer exactly the
        candidate's, or when the key could not be committed by `commit_file` (stale, condemned,
        already known): the object is then an orphan for the file manager to reclaim.
        """

    @abc.abstractmethod
    async def metadata_stats(self) -> MetadataStats: ...

    # --- object lifecycle ---------------------------------------------------------------------
    @abc.abstractmethod
    async def condemn_objects(self, keys: Sequence[str]) -> list[str]:
        """Mark never-committed keys as orphans so that their commit can no longer succeed.

        Returns the keys that are (now or already) condemned; committed keys are left alone.
        """

    @abc.abstractmethod
    async def files_to_delete(self, older_than_ms: int, limit: int = 1000) -> list[FileInfo]:
        """Unreferenced or condemned files whose state is older than `older_than_ms` (epoch ms)."""

    @abc.abstractmethod
    async def forget_files(self, keys: Sequence[str]) -> None:
        """Drop deleted files from the coordinator's books (live files are never dropped)."""

    @abc.abstractmethod
    async def file_info(self, keys: Sequence[str]) -> list[FileInfo | None]:
        """What the coordinator knows of each key, None when it has never heard of it."""

    @abc.abstractmethod
    async def file_stats(self) -> FileStats:
        """Counts and bytes of files per state."""

    # --- inspection ---------------------------------------------------------------------------
    @abc.abstractmethod
    async def describe_producers(self, topic_partition: TopicPartition) -> list[ProducerSnapshot]:
        """The retained producer state on a partition, ordered by producer id."""

    async def close(self) -> None:  # noqa: B027 - optional hook
        """Release resources; the coordinator is unusable afterwards."""
