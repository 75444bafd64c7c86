"""What a coordinator backend is: a store that loads a snapshot and applies changes atomically.

The engine (`_engine`) writes every operation once, as a step: preconditions, then
`StoreStep.load` of what the rules need, then the rules (`_rules`), then `StoreStep.apply` of what
they decided. A backend only stores. It runs each step as one atomic unit (`CoordinatorStore.write`,
told which `Operation` the step is) and serves read-only queries through a `ReadView`
(`CoordinatorStore.read`). Reads take the same shape: a read rule's plan (`_rules.reads`) yields
the lookups it needs, `decide` loads each from the view, and the rule decides.

Steps and reads are coroutines. The in-memory and SQLite stores never suspend inside one: memory
drives it inline on the event loop, SQLite on its writer thread inside `BEGIN IMMEDIATE` (a read
on a reader thread), with `run_inline`. A store over a networked database really awaits its
loads, applies and lookups, on the event loop.
"""

from __future__ import annotations

import asyncio
import enum
import types
import uuid
from collections.abc import (
    AsyncIterator,
    Awaitable,
    Callable,
    Collection,
    Coroutine,
    Mapping,
    Sequence,
)
from typing import Any, NamedTuple, Protocol, TypeAlias, TypeVar

import msgspec

from diskless._scram import ScramCredential, ScramMechanism
from diskless._types import CommittedOffset, GroupOwnership, GroupRecord, TopicPartition
from diskless.coordinator._rules.acls import AclBinding
from diskless.coordinator._rules.commit import ProducerKey
from diskless.coordinator._rules.files import FileRow
from diskless.coordinator._rules.reads import FETCH_HEAD_ROWS, FetchHead, Plan
from diskless.coordinator._rules.rows import (
    AbortedTxn,
    LeaseHolder,
    PartitionState,
    StoredBatch,
    TxnLease,
    TxnRegistration,
)
from diskless.coordinator._values import (
    BrokerRegistration,
    FileState,
    MetadataStats,
    PartitionChanges,
    TopicConfig,
)
from diskless.txn import ProducerEntry, TxnRecord

T = TypeVar("T")

OFFSET_END = (1 << 63) - 1
"""A `Needs.batch_refs` bound that covers every batch of a partition."""


EMPTY: Mapping[Any, Any] = types.MappingProxyType({})
"""The default of every mapping of `Needs` and `Changes`: most steps need few of them."""


class TopicRow(NamedTuple):
    name: str
    partition_count: int
    config: TopicConfig
    topic_id: uuid.UUID


class BatchRefs(NamedTuple):
    """What a range of a partition's batches holds: for moving the log start and file states."""

    files: dict[str, int]
    """Batches per object key (markers, which have no object, are not counted here)."""
    size_bytes: int
    """The size of every batch of the range, markers included."""


class Needs(msgspec.Struct):
    """What a step reads before deciding; a store loads all of it in as few queries as it can.

    (Collections here and in `Changes` default to shared empty immutable ones, so that a step
    pays only for the kinds of state it touches.)"""

    partitions: Collection[TopicPartition] = ()
    producers: Collection[tuple[TopicPartition, int]] = ()
    """(partition, producer id): the stored producer entry, expired or not."""
    registrations: Collection[tuple[TopicPartition, int]] = ()
    leases: Collection[int] = ()
    brokers: Collection[int] = ()
    """Broker ids: their current epochs."""
    broker_registrations: Collection[int] = ()
    """Broker ids: their registrations (where they listen, until when), expired or not."""
    all_broker_registrations: bool = False
    """Every broker's registration, expired or not (a cluster has few: loaded whole)."""
    groups: Collection[str] = ()
    """Consumer group ids: their ownership."""
    files: Collection[str] = ()
    topics: Collection[str] = ()
    counters: Collection[str] = ()
    other_ongoing: Collection[tuple[TopicPartition, int]] = ()
    """(partition, producer id): the first offset of the earliest ongoing transaction of any
    other producer there."""
    batch_refs: Mapping[int, int] = EMPTY
    """Partition key -> offset: the batches lying entirely below the offset."""
    batches: Mapping[int, tuple[int, int]] = EMPTY
    """Partition key -> (offset, limit): up to `limit` batches from the one holding `offset`."""
    retained_partitions: bool = False
    """Every non-empty partition of a topic with time or size retention, by topic and index."""
    txns: Collection[str] = ()
    """Transactional ids: their records."""
    scram_users: Collection[str] = ()
    """User names: every SCRAM credential they hold."""
    resource_configs: Collection[tuple[int, str]] = ()
    """(`ConfigResourceType`, resource name): their stored dynamic configs."""
    share_partitions: Collection[tuple[str, TopicPartition]] = ()
    """(share group, partition): the share-partition's stored state (`_rules.share`)."""
    acls: bool = False
    """Every ACL binding (a cluster has few: they are loaded whole). A step that changes them
    also loads the `ACL_VERSION_COUNTER` counter, which serializes such steps."""


class Snapshot(msgspec.Struct):
    """The answer to `Needs`: what exists (absent keys do not exist). Read-only."""

    partitions: Mapping[TopicPartition, PartitionState] = EMPTY
    producers: Mapping[ProducerKey, ProducerEntry] = EMPTY
    registrations: Mapping[ProducerKey, TxnRegistration] = EMPTY
    leases: Mapping[int, TxnLease] = EMPTY
    broker_epochs: Mapping[int, int] = EMPTY
    broker_registrations: Mapping[int, BrokerRegistration] = EMPTY
    groups: Mapping[str, GroupOwnership] = EMPTY
    files: Mapping[str, FileRow] = EMPTY
    topics: Mapping[str, TopicRow] = EMPTY
    counters: Mapping[str, int] = EMPTY
    other_ongoing: Mapping[ProducerKey, int] = EMPTY
    batch_refs: Mapping[int, BatchRefs] = EMPTY
    batches: Mapping[int, list[StoredBatch]] = EMPTY
    retained_partitions: Sequence[PartitionState] = ()
    txns: Mapping[str, TxnRecord] = EMPTY
    scram: Mapping[tuple[str, ScramMechanism], ScramCredential] = EMPTY
    resource_configs: Mapping[tuple[int, str], Mapping[str, str]] = EMPTY
    acls: Sequence[AclBinding] = ()
    share_states: Mapping[tuple[str, TopicPartition], bytes] = EMPTY


class LoadingSnapshot(msgspec.Struct):
    """A `Snapshot` being filled in by a store's `load`, field by field."""

    partitions: dict[TopicPartition, PartitionState] = {}
    producers: dict[ProducerKey, ProducerEntry] = {}
    registrations: dict[ProducerKey, TxnRegistration] = {}
    leases: dict[int, TxnLease] = {}
    broker_epochs: dict[int, int] = {}
    broker_registrations: dict[int, BrokerRegistration] = {}
    groups: dict[str, GroupOwnership] = {}
    files: dict[str, FileRow] = {}
    topics: dict[str, TopicRow] = {}
    counters: dict[str, int] = {}
    other_ongoing: dict[ProducerKey, int] = {}
    batch_refs: dict[int, BatchRefs] = {}
    batches: dict[int, list[StoredBatch]] = {}
    retained_partitions: list[PartitionState] = []
    txns: dict[str, TxnRecord] = {}
    scram: dict[tuple[str, ScramMechanism], ScramCredential] = {}
    resource_configs: dict[tuple[int, str], Mapping[str, str]] = {}
    acls: list[AclBinding] = []
    share_states: dict[tuple[str, TopicPartition], bytes] = {}

    def freeze(self) -> Snapshot:
        return Snapshot(**msgspec.structs.asdict(self))


class Changes(msgspec.Struct):
    """What a step decided; a store applies all of it in one atomic unit, in this field order."""

    topics_deleted: Sequence[str] = ()
    """Each topic goes with its partitions and every row keyed by them (batches, producers,
    registrations, leases, ongoing and aborted transactions, committed group offsets). Files
    are changed by `files`."""
    topics_created: Sequence[TopicRow] = ()
    """Created with partitions 0 .. partition_count - 1, each empty."""
    partitions_added: Sequence[tuple[str, int]] = ()
    """(topic, new partition count): the topic grows by empty partitions."""
    topic_configs: Mapping[str, TopicConfig] = EMPTY
    """Topic name -> its config, replaced (the topic exists); its partitions follow it."""
    broker_epochs: Mapping[int, int] = EMPTY
    broker_registrations: Mapping[int, BrokerRegistration] = EMPTY
    """Replaced by broker id."""
    broker_leases_dropped: Mapping[int, int] = EMPTY
    """Broker id -> epoch: every lease that an older incarnation of the broker holds goes."""
    groups: Mapping[str, GroupOwnership] = EMPTY
    """Consumer group ownerships, inserted or replaced by group id."""
    group_states: Mapping[str, bytes] = EMPTY
    """A consumer-protocol group's whole state (KIP-848), inserted or replaced by group id."""
    group_states_deleted: Sequence[str] = ()
    """Each consumer-protocol group's stored state goes, if it has one (applied after
    `group_states`)."""
    counters: Mapping[str, int] = EMPTY
    files: Mapping[str, FileRow | None] = EMPTY
    """Inserted or replaced by key; None forgets the file."""
    trims: Mapping[int, int] = EMPTY
    """Partition key -> offset: the batches lying entirely below it and the aborted
    transactions whose marker is below it are deleted (the new state comes in `partitions`)."""
    extents: Sequence[StoredBatch] = ()
    """Each replaces the stored rows of its partition within [base_offset, last_offset] (a run
    right after the partition's extents); its object key names a file, which exists once
    `files` is applied."""
    batches: Sequence[StoredBatch] = ()
    """Appended, in offset order per partition; a batch with an object key refers to the file
    of that key, which exists once `files` is applied."""
    partitions: Sequence[PartitionState] = ()
    """Their high watermark, log start offset, size and running max timestamp are stored."""
    producers: Mapping[ProducerKey, ProducerEntry] = EMPTY
    producers_idle_before: int | None = None
    """Drop every producer entry with no open transaction whose last update is at or before this
    time (`diskless.txn.is_expired`, as one predicate over the store)."""
    registrations: Mapping[ProducerKey, TxnRegistration] = EMPTY
    registrations_dropped: Sequence[tuple[ProducerKey, int]] = ()
    """(key, epoch): the registration goes if its epoch is at most `epoch`."""
    leases_released: Sequence[int] = ()
    leases_dropped: Sequence[tuple[ProducerKey, int | None]] = ()
    """(key, epoch): the producer's leases there with an epoch up to `epoch` (None: all) go."""
    leases_granted: Sequence[TxnLease] = ()
    """New leases; their `lease_id` is ignored and the store assigns one (`apply`'s result)."""
    ongoing_opened: Sequence[tuple[int, int, int]] = ()
    """(partition key, first offset, producer id) enter the ongoing-transaction index."""
    ongoing_closed: Sequence[tuple[int, int]] = ()
    """(partition key, first offset) leave it."""
    aborted: Sequence[tuple[int, AbortedTxn]] = ()
    txns: Mapping[str, TxnRecord] = EMPTY
    """Transaction records, inserted or replaced by transactional id."""
    group_offsets: Mapping[tuple[str, TopicPartition], CommittedOffset] = EMPTY
    """(group, partition) -> its committed offset: committed consumer offsets, replaced."""
    scram: Mapping[tuple[str, ScramMechanism], ScramCredential | None] = EMPTY
    """(user, mechanism) -> the SCRAM credential, inserted or replaced; None deletes it."""
    resource_configs: Mapping[tuple[int, str], Mapping[str, str]] = EMPTY
    """(`ConfigResourceType`, resource name) -> its dynamic configs, replaced whole (empty:
    the resource has none, and its row goes)."""
    acls_deleted: Sequence[AclBinding] = ()
    acls_created: Sequence[AclBinding] = ()
    """New bindings, none of them stored already (deletions are applied first)."""
    group_offsets_deleted: Sequence[tuple[str, TopicPartition]] = ()
    """(group, partition): the committed offset goes, if there is one."""
    group_offsets_cleared: Sequence[str] = ()
    """Each consumer group's committed offsets all go."""
    share_states: Mapping[tuple[str, TopicPartition], bytes] = EMPTY
    """(share group, partition) -> its share-partition's whole state (`_rules.share`), inserted
    or replaced. A deleted topic's go with it."""
    share_groups_deleted: Sequence[str] = ()
    """Each share group's share-partition states all go (applied before `share_states`)."""

    @property
    def has_txn_state(self) -> bool:
        """Whether any transaction state (records, registrations, leases, the indexes) changes."""
        return bool(
            self.registrations
            or self.registrations_dropped
            or self.leases_released
            or self.leases_dropped
            or self.broker_leases_dropped
            or self.leases_granted
            or self.ongoing_opened
            or self.ongoing_closed
            or self.aborted
            or self.txns
            or self.group_offsets
            or self.group_offsets_deleted
            or self.group_offsets_cleared
        )


class Operation(enum.Enum):
    """The step a `CoordinatorStore.write` runs, named by the engine. A store may run a named
    step its own way (as PostgreSQL applies a commit in one server-side function), or through
    the generic `StoreStep.load` and `apply`; it never infers which step it runs from the shape
    of what the step loads or applies."""

    CREATE_TOPIC = "create_topic"
    CREATE_PARTITIONS = "create_partitions"
    DELETE_TOPICS = "delete_topics"
    ALTER_TOPIC_CONFIG = "alter_topic_config"
    REGISTER_BROKER = "register_broker"
    ANNOUNCE_BROKER = "announce_broker"
    RAISE_MEMBERSHIP_VERSION = "raise_membership_version"
    COMMIT_FILES = "commit_files"
    """Changes only files (all new), their batches, partitions, producer entries, released
    leases and opened transactions."""
    DELETE_RECORDS = "delete_records"
    ENFORCE_RETENTION = "enforce_retention"
    CONDEMN_OBJECTS = "condemn_objects"
    FORGET_FILES = "forget_files"
    COMMIT_EXTENT = "commit_extent"
    COMMIT_CLEANED = "commit_cleaned"
    CLAIM_GROUP = "claim_group"
    STORE_GROUP_GENERATION = "store_group_generation"
    STORE_GROUP_STATE = "store_group_state"
    COMMIT_OFFSETS = "commit_offsets"
    DELETE_OFFSETS = "delete_offsets"
    DELETE_GROUP = "delete_group"
    ALLOCATE_PRODUCER_IDS = "allocate_producer_ids"
    ADD_PARTITIONS_TO_TXN = "add_partitions_to_txn"
    ACQUIRE_TXN_LEASES = "acquire_txn_leases"
    RELEASE_TXN_LEASES = "release_txn_leases"
    END_TXN_MARKERS_BEGIN = "end_txn_markers_begin"
    """The first step of writing a transaction's markers: its registrations close."""
    WRITE_TXN_MARKERS = "write_txn_markers"
    TXN_INIT = "txn_init"
    TXN_ADD_PARTITIONS = "txn_add_partitions"
    TXN_ADD_OFFSETS = "txn_add_offsets"
    TXN_COMMIT_OFFSETS = "txn_commit_offsets"
    TXN_END = "txn_end"
    TXN_EXPIRE = "txn_expire"
    TXN_COMPLETE = "txn_complete"
    ALTER_SCRAM_CREDENTIALS = "alter_scram_credentials"
    ALTER_RESOURCE_CONFIGS = "alter_resource_configs"
    CREATE_ACLS = "create_acls"
    DELETE_ACLS = "delete_acls"
    SHARE_STEPS = "share_steps"
    """Acquisitions, acknowledgements and releases of share-partitions, in order."""
    SHARE_ALTER_OFFSETS = "share_alter_offsets"
    SHARE_DELETE_OFFSETS = "share_delete_offsets"
    SHARE_DELETE_GROUP = "share_delete_group"
    MIRROR_STATE = "mirror_state"
    """A mirrored topic's mark changes (`_rules.mirror`): a claim, a pause, a resume, a fence."""
    MIRROR_APPEND = "mirror_append"
    MIRROR_STOP = "mirror_stop"


class Durability(enum.Enum):
    DURABLE = "durable"
    """Acknowledged only once on stable storage."""
    VOLATILE = "volatile"
    """Atomic and visible to all at once, but a power loss may forget it: only for transaction
    state whose loss is safe (registrations, leases, the ENDING mark; see `SqliteStore`)."""


class StoreStep(Protocol):
    """One atomic step's access to the store."""

    async def load(self, needs: Needs) -> Snapshot: ...

    async def apply(self, changes: Changes) -> list[int]:
        """Apply `changes`; returns the ids of `changes.leases_granted`, in order."""
        ...


class ReadView(Protocol):
    """Read-only queries over one consistent snapshot: the lookups of the read rules
    (`_rules.reads.ReadSource`, here awaitable) and the others beside them.

    A store over a network awaits its statements on the event loop; the in-memory and SQLite
    views never suspend (SQLite's run on a reader thread, driven by `run_inline`)."""

    async def partition(self, tp: TopicPartition) -> PartitionState | None:
        """The partition's state, None when it does not exist."""
        ...

    async def partitions(self, tps: Sequence[TopicPartition]) -> list[PartitionState | None]:
        """Each partition's state (None: it does not exist), in one lookup."""
        ...

    async def fetch_heads(
        self, wanted: Sequence[tuple[TopicPartition, int]], rows: int = FETCH_HEAD_ROWS
    ) -> list[FetchHead | None]:
        """`ReadSource.fetch_heads`, in one lookup."""
        ...

    async def aborted_within(
        self, ranges: Sequence[tuple[PartitionState, int, int]]
    ) -> list[list[AbortedTxn]]:
        """`ReadSource.aborted_within`, in one lookup."""
        ...

    def batches_from(self, state: PartitionState, offset: int) -> AsyncIterator[StoredBatch]:
        """Stored batches in offset order, from the one holding `offset` (or the next one)."""
        ...

    async def max_timestamp_batch(self, state: PartitionState) -> StoredBatch | None:
        """The first stored batch (by offset) among those with the largest `timestamp`."""
        ...

    async def first_running_max_at_least(
        self, state: PartitionState, ts: int
    ) -> StoredBatch | None:
        """The first stored batch whose `ts_running_max` is >= `ts`."""
        ...

    def aborted_from(self, state: PartitionState, offset: int) -> AsyncIterator[AbortedTxn]:
        """Aborted transactions whose marker (last offset) is at or after `offset`, in order."""
        ...

    async def topics(self, names: Sequence[str] | None) -> list[TopicRow]:
        """The named topics that exist in the order named (all, by name, when None)."""
        ...

    async def producers_of(self, partition_key: int) -> list[ProducerEntry]:
        """The stored producer entries of a partition, expired or not, by producer id."""
        ...

    async def files(self, keys: Sequence[str]) -> dict[str, FileRow]: ...

    async def unconsolidated_heads(self) -> list[tuple[PartitionState, StoredBatch]]:
        """Every partition holding batch rows besides its extents, with its first such row (one
        query however many partitions: consolidation looks at all of them every run)."""
        ...

    def unconsolidated_rows(self, state: PartitionState) -> AsyncIterator[StoredBatch]:
        """The partition's stored rows after its extents, in offset order."""
        ...

    async def metadata_stats(self) -> MetadataStats: ...

    async def dead_files(self, older_than_ms: int, limit: int) -> list[tuple[str, FileRow]]:
        """Files not LIVE whose state is older than `older_than_ms`, oldest first (then by key)."""
        ...

    async def file_totals(self) -> dict[FileState, tuple[int, int]]:
        """(count, bytes) per state present."""
        ...

    async def txns(self, transactional_ids: Sequence[str]) -> dict[str, TxnRecord]: ...

    async def txn_registrations(
        self, keys: Sequence[tuple[TopicPartition, int]]
    ) -> dict[tuple[TopicPartition, int], TxnRegistration]:
        """The registrations of (partition, producer id) that exist."""
        ...

    async def broker_registrations(self) -> list[BrokerRegistration]:
        """Every stored registration, expired or not, by broker id."""
        ...

    async def group_offsets(self, group_id: str) -> dict[TopicPartition, CommittedOffset]:
        """The committed offsets of a consumer group, per partition."""
        ...

    async def group_ownership(self, group_id: str) -> GroupOwnership | None: ...

    async def group_records(self, group_ids: Sequence[str] | None) -> dict[str, GroupRecord]:
        """Every consumer group with an ownership or committed offsets, among the named ones
        (all when None)."""

    async def group_state(self, group_id: str) -> bytes | None:
        """A consumer-protocol group's stored state (None: none stored)."""
        ...

    async def share_states(
        self, group_id: str, partitions: Sequence[TopicPartition] | None
    ) -> dict[TopicPartition, bytes]:
        """The stored share-partition states of a share group, of the named partitions that
        have one (of all when None)."""
        ...

    async def txns_due(self, now_ms: int, limit: int) -> list[TxnRecord]:
        """Records whose `due_ms` is before `now_ms`, earliest first."""
        ...

    async def txns_after(self, after: str, limit: int) -> list[TxnRecord]:
        """Up to `limit` records whose transactional id sorts after `after`, in id order."""
        ...

    async def scram_credentials(
        self, users: Sequence[str] | None
    ) -> dict[tuple[str, ScramMechanism], ScramCredential]:
        """The SCRAM credentials of the named users that hold some (of every user when None)."""
        ...

    async def lease_holders(
        self, partitions: Sequence[TopicPartition], producer_id: int, epoch: int, after_ms: int
    ) -> list[LeaseHolder]:
        """Who holds leases of (producer, epoch) there that expire later than `after_ms`: one
        entry per broker incarnation, with the earliest expiry of its leases."""
        ...

    async def resource_configs(
        self, resource_type: int, names: Sequence[str] | None
    ) -> dict[str, dict[str, str]]:
        """The stored dynamic configs of the named resources of `resource_type` that have some
        (of every such resource when None), by name."""
        ...

    async def counter(self, name: str) -> int:
        """A coordinator counter (0 before it is first set): one cheap lookup."""
        ...

    async def acl_version(self) -> int:
        """The `ACL_VERSION_COUNTER` counter (0 before any ACL change): one cheap lookup."""
        ...

    async def membership_version(self) -> int:
        """The `MEMBERSHIP_VERSION_COUNTER` counter (0 before any broker announced itself)."""
        ...

    async def acls(self) -> list[AclBinding]:
        """Every stored binding, sorted."""
        ...


Query: TypeAlias = Callable[[ReadView], Awaitable[T]]
"""A read: what it asks of a view, awaited."""


async def decide(plan: Plan[T], view: ReadView) -> T:
    """A read rule's answer (`_rules.reads`): each lookup its plan yields is loaded from `view`
    and sent back, until the plan returns its decision."""
    try:
        lookup = next(plan)
        while True:
            lookup = plan.send(await lookup(view))
    except StopIteration as done:
        return done.value  # type: ignore[no-any-return]


class CoordinatorStore(Protocol):
    """A backend of the coordinator engine."""

    async def write(
        self,
        operation: Operation,
        step: Callable[[StoreStep], Coroutine[Any, Any, T]],
        durability: Durability = Durability.DURABLE,
        outcome_unknown_on_failure: bool = False,
    ) -> T:
        """Run `step`, the engine's `operation`, as one atomic unit against the latest state;
        all of its changes or none.

        With `outcome_unknown_on_failure`, a failure to make the unit durable once it was sent
        raises `CommitOutcomeUnknownError`. Store failures raise `CoordinatorError`s.
        """
        ...

    async def read(self, query: Query[T]) -> T:
        """Run `query` on a consistent snapshot, without waiting behind writes."""
        ...

    def release_signal(self) -> asyncio.Future[None] | None:
        """A future resolved when a lease is released (never cancel it); None when releases can
        come from elsewhere (other processes), and an end must poll."""
        ...

    def watch_changes(self, listener: Callable[[PartitionChanges], None]) -> Callable[[], None]:
        """Calls `listener` (on the event loop) with what each committed step changed, this
        process's at once and others' as the backend learns them (`_feed`); returns the call
        that stops it. Call from the event loop."""
        ...

    async def close(self) -> None: ...


def run_inline(step: Coroutine[Any, Any, T]) -> T:
    """Run a step that never suspends (every await of the in-memory and SQLite stores returns
    at once) to its end, here and now."""
    try:
        step.send(None)
    except StopIteration as done:
        return done.value  # type: ignore[no-any-return]
    step.close()
    raise RuntimeError("a coordinator step suspended inside a store that cannot")
