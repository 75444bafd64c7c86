"""The batch coordinator's contract: the operations, and the values crossing it.

Every batch-in operation is batch-out: `responses[i]` answers `requests[i]`, and a response list
always has exactly the length of its request list. Protocol outcomes are values: an `ErrorCode`
per topic, partition or request as Kafka answers it (a topic that exists, an unknown one, a
stale broker epoch), or a refusal of a whole object (`CommitFileResult.refused`). Exceptions
(`diskless.errors.CoordinatorError`) mean the backing store failed; a `ValueError` is an argument
that no state of the coordinator would accept (an illegal topic name, a TTL out of range).
"""

from __future__ import annotations

import abc
from collections.abc import Callable, Mapping, Sequence

from diskless._availability import Availability
from diskless._limits import CommitBounds
from diskless._scram import ScramCredential, ScramMechanism
from diskless._types import (
    ErrorCode,
    GroupOwnership,
    TopicPartition,
)
from diskless.coordinator._api_groups import GroupContract
from diskless.coordinator._api_mirror import MirrorContract
from diskless.coordinator._api_share import ShareStateContract
from diskless.coordinator._rules.acls import (
    AclBinding,
    AclBindingFilter,
    AclDeletion,
    AclOutcome,
    AclSnapshot,
)
from diskless.coordinator._rules.scram import ScramSnapshot
from diskless.coordinator._values import (
    BrokerRegistration,
    CleanedSwap,
    CleaningRange,
    CommitBatch,
    CommitFileResult,
    ConfigResourceType,
    ConsolidationCandidate,
    DeleteRecordsRequest,
    DeleteRecordsResponse,
    ExtentSwap,
    ExtentSwapResult,
    FileCommit,
    FileInfo,
    FileStats,
    FindBatchesRequest,
    FindBatchesResponse,
    LeaseRequest,
    LeaseResult,
    ListOffsetsRequest,
    ListOffsetsResponse,
    Membership,
    MetadataStats,
    PartitionChanges,
    PartitionOffsets,
    ProducerSnapshot,
    RegisteredTxn,
    RetentionResult,
    ScramDeletion,
    ScramDescription,
    ScramResult,
    ScramUpsertion,
    TopicConfig,
    TopicDescription,
)
from diskless.metrics import Metrics
from diskless.txn import PendingOffset, TxnRecord, TxnStep

ChangeListener = Callable[[PartitionChanges], None]
"""Called on the event loop with what committed steps changed; it must not block or raise."""


class BatchCoordinator(GroupContract, ShareStateContract, MirrorContract, abc.ABC):
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

    metrics: Metrics
    """Where each write step's latency and outcome are reported; the process that owns the
    coordinator sets it (the engine starts with `NULL_METRICS`, which drops them)."""

    @property
    @abc.abstractmethod
    def commit_bounds(self) -> CommitBounds:
        """The object prefix and commit-age bound it enforces, which writers and the file
        manager check their own budgets against (`diskless._limits`)."""

    @property
    @abc.abstractmethod
    def availability(self) -> Availability:
        """Whether its backing store answers, as this process sees it: every operation reports
        its outcome there, which logs when the store stops answering and when it is back
        (`diskless._availability`)."""

    @property
    @abc.abstractmethod
    def step_retries(self) -> int:
        """Write steps run again after losing a race for the backing store, since it opened."""

    async def connect(self) -> None:
        """Reach the backing store now (opening it, a schema migrated), without reporting to
        the availability: a start-up check that waits for it says what it waits for itself.
        Raises what the first operation would (`CoordinatorError`, its kinds)."""

    # --- topics -------------------------------------------------------------------------------
    @abc.abstractmethod
    async def create_topic(
        self, name: str, partitions: int, config: TopicConfig | None = None
    ) -> ErrorCode:
        """Create a topic: NONE, or TOPIC_ALREADY_EXISTS (and no change). ValueError for an
        illegal name or fewer than one partition (`check_topic_name`)."""

    @abc.abstractmethod
    async def create_partitions(self, name: str, total_partitions: int) -> ErrorCode:
        """Grow a topic to `total_partitions` (Kafka's CreatePartitions): UNKNOWN_TOPIC_OR_PARTITION
        for an unknown topic, INVALID_PARTITIONS unless the count grows."""

    @abc.abstractmethod
    async def alter_topic_config(
        self, name: str, config: TopicConfig, expected: TopicConfig | None = None
    ) -> TopicConfig | None:
        """Replace a topic's config with `config` (Kafka's dynamic topic configs), in one step
        that increments `config_version` and whose change every process's feed names
        (`watch_changes`): retention, produce checks and reads follow it. With `expected`, only
        if the topic's config is still that one (a change read, decided, then written without
        losing a concurrent one).

        Returns the topic's config after the step: `config` when it is in force, another one
        when `expected` no longer held (nothing changed), None when there is no such topic."""

    @abc.abstractmethod
    async def describe_topics(self, names: Sequence[str] | None = None) -> list[TopicDescription]:
        """Describe the named topics (all topics when None); unknown names are omitted."""

    @abc.abstractmethod
    async def delete_topics(self, names: Sequence[str]) -> list[ErrorCode]:
        """Delete topics and all their batches, in one step; their files may become
        unreferenced. `result[i]` answers `names[i]`: NONE, or UNKNOWN_TOPIC_OR_PARTITION for a
        topic that does not exist."""

    # --- dynamic configs of brokers and groups -----------------------------------------------
    @abc.abstractmethod
    async def alter_resource_configs(
        self,
        resource_type: ConfigResourceType,
        name: str,
        configs: Mapping[str, str],
        expected: Mapping[str, str] | None = None,
    ) -> dict[str, str]:
        """Replace the dynamic configs of a BROKER (a broker id, or "" for the cluster-wide
        default) or GROUP resource with `configs` (empty: none), in one step that increments
        `config_version`. With `expected`, only if the stored ones are still those (a change
        read, decided, then written without losing a concurrent one).

        Returns the resource's dynamic configs after the step: `configs` when in force, others
        when `expected` no longer held (nothing changed)."""

    @abc.abstractmethod
    async def describe_resource_configs(
        self, resource_type: ConfigResourceType, names: Sequence[str] | None = None
    ) -> dict[str, dict[str, str]]:
        """The dynamic configs of the named resources of `resource_type` that have some (of
        every one when None), by resource name."""

    @abc.abstractmethod
    async def config_version(self) -> int:
        """Grows with every change of a topic's config (`alter_topic_config`) or a broker's or
        group's dynamic configs: one cheap read, which a broker's copies compare to refresh."""

    # --- brokers ------------------------------------------------------------------------------
    @abc.abstractmethod
    async def register_broker(self, broker_id: int, *, exclusive: bool = False) -> int:
        """Hand out the next broker epoch for `broker_id`, fencing every older incarnation;
        the leases the older incarnations hold die in the same step.

        `exclusive` refuses (`BrokerIdInUseError`, no change) while another incarnation's
        registration (`announce_broker`) of the id is live: a broker process must not fence
        one that is still serving. Once that registration expires, the call succeeds.
        """

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
        it); False, and no change, when the epoch is not the broker's current one (fenced).

        What the incarnation holds lives as long as this registration: once it expires, a
        transaction's end no longer waits for its leases, and its groups may move."""

    @abc.abstractmethod
    async def live_brokers(self) -> list[BrokerRegistration]:
        """Every broker whose registration has not expired, by id: the cluster's members."""

    @abc.abstractmethod
    async def membership(self) -> Membership:
        """The live brokers (as `live_brokers`) and the membership version, from one read. The
        version goes up in the step that changes the set of live registrations (an
        announcement, a withdrawal, a new incarnation), or in the next announcement of any
        broker when a registration expired; it never goes back."""

    @abc.abstractmethod
    async def raise_membership_version(self, at_least: int) -> int:
        """Raise the membership version (every partition's leader epoch) to at least `at_least`
        (0 to 2**31 - 1), never lowering it; the version afterwards. A mirror keeps the
        destination's leader epoch at or above its source's (KIP-1279) with it; brokers
        advertise it from their next read of the membership."""

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

    @abc.abstractmethod
    async def commit_files(
        self, broker_id: int, broker_epoch: int, files: Sequence[FileCommit]
    ) -> list[CommitFileResult]:
        """Commit several uploaded objects of one broker, in order, in one atomic step: one
        load, one apply, one durable write for all. `results[i]` answers `files[i]` exactly as
        `commit_file` would have, had they been committed one after another (a key twice is a
        conflict the second time). A `CoordinatorError` means none was applied, or, for
        `CommitOutcomeUnknownError`, that it is unknown whether all were.
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
        its leases is released by a commit or has expired. A stale broker epoch is fenced, as
        for `commit_file`: every request answers STALE_BROKER_EPOCH and none is granted.
        `result[i]` answers `requests[i]`.
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
    async def describe_txn_registrations(
        self, keys: Sequence[tuple[TopicPartition, int]]
    ) -> list[RegisteredTxn | None]:
        """The registration of each (partition, producer id), None where there is none.
        A read: it never waits behind writes."""

    @abc.abstractmethod
    async def list_txns(self, after: str = "") -> list[TxnRecord]:
        """The records of the transactional ids that sort after `after`, in id order, a page at a
        time (ListTransactions): an empty page ends the listing. A read."""

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
        fence: GroupOwnership | None = None,
    ) -> ErrorCode:
        """TxnOffsetCommit: the offsets take effect if and when the transaction commits.
        A `fence` is checked first, as for `commit_offsets`."""

    # --- SCRAM credentials (KIP-554; Kafka keeps them in its metadata log) ---------------------
    @abc.abstractmethod
    async def alter_scram_credentials(
        self, deletions: Sequence[ScramDeletion], upsertions: Sequence[ScramUpsertion]
    ) -> list[ScramResult]:
        """AlterUserScramCredentials: one result per user named, with Kafka's code and message
        (`_rules.scram`); the users without an error are altered together, in one step. An
        upsertion stores the credential derived from its salted password, never the password."""

    @abc.abstractmethod
    async def describe_scram_credentials(
        self, users: Sequence[str] | None
    ) -> list[ScramDescription]:
        """DescribeUserScramCredentials: each named user's mechanisms and iterations (every user
        holding a credential, by name, when `users` is None or empty). A read."""

    @abc.abstractmethod
    async def scram_credential(
        self, user: str, mechanism: ScramMechanism
    ) -> ScramCredential | None:
        """The credential a SCRAM exchange checks a client's proof against; None when the user
        has none for `mechanism`. A read."""

    @abc.abstractmethod
    async def scram_snapshot(self) -> ScramSnapshot:
        """Every stored credential with the security version they are (`acl_version`, which
        every credential change increments too), from one consistent read: a broker's copy."""

    # --- ACLs (Kafka's authorizer bindings) ----------------------------------------------------
    @abc.abstractmethod
    async def create_acls(self, bindings: Sequence[AclBinding]) -> list[AclOutcome]:
        """CreateAcls: each valid binding is stored (one that exists already is a success);
        an invalid one gets INVALID_REQUEST with Kafka's reason. One atomic step."""

    @abc.abstractmethod
    async def delete_acls(self, filters: Sequence[AclBindingFilter]) -> list[AclDeletion]:
        """DeleteAcls: every binding each filter matches goes, in one atomic step; each answer
        lists what its filter matched (an invalid filter: INVALID_REQUEST, nothing)."""

    @abc.abstractmethod
    async def describe_acls(self, acl_filter: AclBindingFilter) -> list[AclBinding]:
        """DescribeAcls: the stored bindings the filter matches, sorted. A read."""

    @abc.abstractmethod
    async def acl_version(self) -> int:
        """A number that grows with every ACL change and every SCRAM credential change (0 before
        any). A read, and a cheap one: brokers poll it."""

    @abc.abstractmethod
    async def acl_snapshot(self) -> AclSnapshot:
        """Every binding with the version they are, from one consistent read."""

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
        """Kafka ListOffsets: EARLIEST, LATEST, MAX_TIMESTAMP or the first offset at a time.
        The last two lie in records: the response names the batches holding them
        (`ListOffsetsResponse.lookup`) and the read path answers from their records."""

    @abc.abstractmethod
    async def partition_offsets(
        self, partitions: Sequence[TopicPartition]
    ) -> list[PartitionOffsets | None]:
        """Each partition's offsets as a fetch sees them, from one snapshot (None: it does not
        exist). What a broker's local view of partition state re-reads when the feed says a
        partition changed."""

    @abc.abstractmethod
    def watch_changes(self, listener: ChangeListener) -> Callable[[], None]:
        """The change feed: `listener` is called on the event loop with what committed steps
        changed (`PartitionChanges`), this process's at once and other processes' as the store
        learns them. A hint only (it may come late, twice, or be lost; re-read what it names);
        returns the call that stops it."""

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

    # --- compaction -----------------------------------------------------------------------------
    @abc.abstractmethod
    async def cleaning_range(self, tp: TopicPartition, bytes_max: int) -> CleaningRange | None:
        """A compacted partition's rows from its first up to the HWM, cut at `bytes_max`."""

    @abc.abstractmethod
    async def commit_cleaned(self, swap: CleanedSwap) -> ExtentSwapResult:
        """Replace the leading `swap.rows` rows by one extent over their offsets, and their
        aborted-index entries by `swap.aborted_kept`, atomically; offsets, HWM, LSO and log
        start stay. Refused, with no change, as `commit_extent` is, and when the log start moved."""

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

    async def close(self) -> None:
        """Release resources; the coordinator is unusable afterwards."""
