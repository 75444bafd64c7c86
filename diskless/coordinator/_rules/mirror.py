"""Mirrored topics (KIP-1279): the mark a topic carries, and the mirrored append, as pure rules.

A mirror copies a source cluster's partitions into diskless topics at the source's offsets, so
that consumers need no offset translation. Here that is one more kind of append: the batches
come with their offsets, and the coordinator checks that they continue the partition.

**The mark.** A mirrored topic carries, among its kept configs (`TopicConfig.kept_config`), the
mirror's name, an epoch and a state; every change of it raises the config version, so that each
broker's cache of topic descriptions learns it, and its produce path refuses a client's batch to
a topic that is not writable (`read_only_refusal`: INVALID_TOPIC_EXCEPTION, Kafka's answer to a
produce to a topic clients may not write, as to an internal topic; KIP-1279's new
ReadOnlyTopicException code is unknown to today's clients). A topic is claimed only while it
is empty, and a mirrored append below the end is refused unless it is the batch stored there,
so a client batch let through by a cache not yet refreshed ends the mirror with a CONFLICT,
never a silent mix. A mirror process claims the topic by raising the epoch; an append carrying
an older epoch is fenced, so two mirror processes never interleave.

**The append** (`plan_mirror_append`). A batch continues its partition when its base offset is
at or after the high watermark. A base offset after it leaves a gap: offsets the source no
longer has (compacted away, or below the source's log start). Those offsets are simply absent,
as in a compacted Kafka log: a fetch there reads from the next batch. When the partition holds
nothing yet (its log start is its end), the log start moves to the first batch, as a Kafka
follower starts at its leader's log start. A batch below the high watermark is a retry: a
success when the stored batch there is the same one (same offsets, size, producer and
timestamp), a conflict otherwise; below the log start nothing is left to compare, and the batch
counts as mirrored already. After a refused batch the partition's later batches are refused too,
so a partition never gains a batch past a hole it did not mean.

**Transactions.** Mirrored batches keep their producer ids (no rewriting). The ongoing and
aborted transaction indexes are rebuilt as the batches land: a transactional batch of a producer
with no open transaction opens one, a control batch closes it, an ABORT records it in the
aborted index. Control batches are stored as the source sent them (bytes in the object, a data
row here), so a consumer reads the source's markers byte for byte. The producer-id counter is
kept above every mirrored producer id: the destination's own producers never take one of them,
before or after failover (the MIRROR_PID_RESET barrier of KIP-1279, as a counter rather than a
record in the log).
"""

from __future__ import annotations

import enum
from collections.abc import Mapping, Sequence
from typing import Final, NamedTuple, Protocol

import msgspec

from diskless._types import NO_PRODUCER_ID, NO_SEQUENCE, ControlType, TopicPartition
from diskless.coordinator._rules.rows import AbortedTxn, PartitionState, StoredBatch
from diskless.coordinator._values import TopicConfig
from diskless.txn import ProducerEntry, RetainedBatch, last_sequence_of, record_append

MIRROR_NAME: Final = "mirror.name"
MIRROR_EPOCH: Final = "mirror.epoch"
MIRROR_STATE: Final = "mirror.state"
MIRROR_CONFIGS: Final = frozenset({MIRROR_NAME, MIRROR_EPOCH, MIRROR_STATE})
"""The kept configs that make up the mark: set only by the mirror operations."""

MIRROR_BATCHES_MAX: Final = 10_000
"""At most this many batches in one mirrored append."""

_DATA: Final = -1


class _TopicRow(Protocol):
    @property
    def config(self) -> TopicConfig: ...


class HasTopics(Protocol):
    @property
    def topics(self) -> Mapping[str, _TopicRow]: ...


class MirrorState(enum.Enum):
    """A mirrored topic's state, as KIP-1279 names them."""

    PREPARING = "preparing"
    """Claimed by a mirror process that checks where to resume; no append yet."""
    MIRRORING = "mirroring"
    """Appends of the current epoch are accepted."""
    PAUSED = "paused"
    """No append is accepted, and the topic stays read-only."""
    STOPPED = "stopped"
    """Mirroring ended (failover): the topic is writable, and can never be mirrored again."""


class MirrorMark(NamedTuple):
    name: str
    epoch: int
    state: MirrorState

    @property
    def read_only(self) -> bool:
        return self.state is not MirrorState.STOPPED


def mirror_mark(config: TopicConfig) -> MirrorMark | None:
    """The topic's mark, None when it was never mirrored."""
    if not config.inapplicable_configs:
        return None
    name = config.kept_config(MIRROR_NAME)
    if name is None:
        return None
    epoch = config.kept_config(MIRROR_EPOCH)
    state = config.kept_config(MIRROR_STATE)
    assert epoch is not None and state is not None, config
    return MirrorMark(name, int(epoch), MirrorState(state))


def marked(config: TopicConfig, mark: MirrorMark) -> TopicConfig:
    """`config` carrying `mark` in place of any mark it had."""
    kept = {k: v for k, v in config.inapplicable_configs if k not in MIRROR_CONFIGS}
    kept.update({MIRROR_NAME: mark.name, MIRROR_EPOCH: str(mark.epoch)})
    kept[MIRROR_STATE] = mark.state.value
    return msgspec.structs.replace(config, inapplicable_configs=tuple(sorted(kept.items())))


def keep_mark(old: TopicConfig, new: TopicConfig) -> TopicConfig:
    """`new` (a config change asked for by a client) with `old`'s mark, whatever `new` says
    of it: only the mirror operations change a mark."""
    mark = mirror_mark(old)
    kept = tuple((k, v) for k, v in new.inapplicable_configs if k not in MIRROR_CONFIGS)
    cleared = msgspec.structs.replace(new, inapplicable_configs=kept)
    return cleared if mark is None else marked(cleared, mark)


def read_only_refusal(config: TopicConfig) -> str | None:
    """Why a client may not write the topic (it is mirrored), or None."""
    mark = mirror_mark(config)
    if mark is None or not mark.read_only:
        return None
    return f"the topic is mirrored by {mark.name!r} ({mark.state.value}): read-only"


def read_only(snapshot: HasTopics, tp: TopicPartition) -> bool:
    """Whether clients may not write `tp` (its topic, loaded in `snapshot`, is mirrored): no
    produce, and no transaction registers it, so no marker of theirs lands among its offsets."""
    row = snapshot.topics.get(tp.topic)
    return row is not None and read_only_refusal(row.config) is not None


class MirrorBatch(msgspec.Struct, frozen=True, gc=False):
    """A source batch placed at [byte_offset, byte_offset + size) of an uploaded object, with
    the header fields the coordinator needs (it never reads object bytes)."""

    topic_partition: TopicPartition
    base_offset: int
    last_offset: int
    byte_offset: int
    size: int
    record_count: int
    max_timestamp: int
    producer_id: int = NO_PRODUCER_ID
    producer_epoch: int = -1
    base_sequence: int = NO_SEQUENCE
    is_transactional: bool = False
    control: ControlType | None = None
    """The marker's type, for a control batch (then `is_transactional` holds)."""
    coordinator_epoch: int = 0


class MirrorOutcome(enum.Enum):
    APPENDED = "appended"
    DUPLICATE = "duplicate"
    """Mirrored already, by an earlier try: a success."""
    CONFLICT = "conflict"
    """A different batch is stored there, or the batch overlaps the partition's end."""
    FENCED = "fenced"
    """The topic is not in the MIRRORING state of this mirror at this epoch."""
    UNKNOWN_PARTITION = "unknown partition"
    AFTER_REFUSAL = "after a refused batch"
    OBJECT_REFUSED = "object refused"
    """The object's key is taken or too old (`commit_too_late`): nothing was appended."""


class MirrorAppendResult(msgspec.Struct, frozen=True, gc=False):
    outcome: MirrorOutcome
    high_watermark: int = -1
    """The partition's end after the append (-1 when unknown)."""
    message: str = ""

    @property
    def ok(self) -> bool:
        return self.outcome in (MirrorOutcome.APPENDED, MirrorOutcome.DUPLICATE)


class MirrorPlan(msgspec.Struct):
    results: list[MirrorAppendResult]
    batches: list[StoredBatch]
    partitions: dict[TopicPartition, PartitionState]
    producers: dict[tuple[int, int], ProducerEntry]
    opened: list[tuple[int, int, int]]
    closed: list[tuple[int, int]]
    aborted: list[tuple[int, AbortedTxn]]
    producer_id_max: int


def fenced_refusal(config: TopicConfig, name: str, epoch: int) -> str | None:
    """Why `name` at `epoch` may not append to the topic, or None."""
    mark = mirror_mark(config)
    if mark is None:
        return "the topic is not mirrored"
    if mark.name != name or mark.epoch != epoch:
        return f"the topic is mirrored by {mark.name!r} at epoch {mark.epoch}"
    if mark.state is not MirrorState.MIRRORING:
        return f"the mirror is {mark.state.value}"
    return None


def same_batch(batch: MirrorBatch, stored: StoredBatch) -> bool:
    return (
        stored.base_offset == batch.base_offset
        and stored.last_offset == batch.last_offset
        and stored.size == batch.size
        and stored.producer_id == batch.producer_id
        and stored.producer_epoch == batch.producer_epoch
        and stored.max_timestamp == batch.max_timestamp
    )


def plan_mirror_append(
    object_key: str,
    object_size: int,
    name: str,
    epoch: int,
    batches: Sequence[MirrorBatch],
    partitions: Mapping[TopicPartition, PartitionState],
    configs: Mapping[str, TopicConfig],
    stored: Mapping[int, Sequence[StoredBatch]],
    producers: Mapping[tuple[int, int], ProducerEntry],
    other_ongoing: Mapping[tuple[int, int], int],
    now_ms: int,
) -> MirrorPlan:
    """The mirrored append of `batches`, in order, over a snapshot: `partitions` of every
    partition named, `configs` of their topics, `stored` the rows from each one's lowest base
    offset named, `producers` the entries of every (partition key, producer id) named,
    `other_ongoing` the earliest ongoing transaction of other producers there. Only read."""
    plan = MirrorPlan([], [], {}, {}, [], [], [], -1)
    refused: dict[TopicPartition, str] = {}
    entries: dict[tuple[int, int], ProducerEntry | None] = {}
    for batch in batches:
        tp = batch.topic_partition
        state = plan.partitions.get(tp) or partitions.get(tp)
        result: MirrorAppendResult
        if state is None:
            result = MirrorAppendResult(MirrorOutcome.UNKNOWN_PARTITION, message=f"{tp}")
        elif tp in refused:
            result = MirrorAppendResult(MirrorOutcome.AFTER_REFUSAL, message=refused[tp])
        else:
            config = configs.get(tp.topic)
            fenced = "unknown topic" if config is None else fenced_refusal(config, name, epoch)
            if fenced is not None:
                result = MirrorAppendResult(MirrorOutcome.FENCED, message=fenced)
            elif batch.base_offset < state.high_watermark:
                result = _retried(batch, state, stored.get(state.key, ()))
            else:
                result = _append(plan, object_key, object_size, batch, state)
                _transactions(plan, entries, batch, state, producers, other_ongoing, now_ms)
        if not result.ok:
            refused[tp] = f"{result.outcome.value}: {result.message}"
        plan.results.append(result)
    for key, entry in entries.items():
        if entry is not None:
            plan.producers[key] = entry
    assert len(plan.results) == len(batches)
    return plan


def _retried(
    batch: MirrorBatch, state: PartitionState, rows: Sequence[StoredBatch]
) -> MirrorAppendResult:
    end = state.high_watermark
    if batch.last_offset < state.log_start_offset:
        return MirrorAppendResult(MirrorOutcome.DUPLICATE, end, "below the log start")
    for row in rows:
        if row.base_offset == batch.base_offset and same_batch(batch, row):
            return MirrorAppendResult(MirrorOutcome.DUPLICATE, end)
    return MirrorAppendResult(
        MirrorOutcome.CONFLICT,
        end,
        f"offsets {batch.base_offset}..{batch.last_offset} differ from those stored (end {end})",
    )


def _append(
    plan: MirrorPlan, object_key: str, object_size: int, batch: MirrorBatch, state: PartitionState
) -> MirrorAppendResult:
    assert batch.last_offset >= batch.base_offset >= state.high_watermark, (batch, state)
    running_max = max(state.ts_running_max, batch.max_timestamp)
    log_start = state.log_start_offset
    if log_start == state.high_watermark:
        log_start = batch.base_offset  # nothing stored: begin where the source's log does
    plan.batches.append(
        StoredBatch(
            state.key,
            batch.base_offset,
            batch.last_offset,
            object_key,
            batch.byte_offset,
            batch.size,
            batch.max_timestamp,
            -1,  # log_append_time: the source's timestamps are kept
            batch.max_timestamp,
            running_max,
            batch.producer_id,
            batch.producer_epoch,
            _DATA,  # a control batch too: its bytes are in the object
            batch.coordinator_epoch,
            -1,
            -1,
            object_size,
        )
    )
    plan.partitions[state.topic_partition] = msgspec.structs.replace(
        state,
        high_watermark=batch.last_offset + 1,
        log_start_offset=log_start,
        size_bytes=state.size_bytes + batch.size,
        ts_running_max=running_max,
    )
    plan.producer_id_max = max(plan.producer_id_max, batch.producer_id)
    return MirrorAppendResult(MirrorOutcome.APPENDED, batch.last_offset + 1)


def _transactions(
    plan: MirrorPlan,
    entries: dict[tuple[int, int], ProducerEntry | None],
    batch: MirrorBatch,
    state: PartitionState,
    producers: Mapping[tuple[int, int], ProducerEntry],
    other_ongoing: Mapping[tuple[int, int], int],
    now_ms: int,
) -> None:
    """The producer entry and the transaction indexes after an appended batch."""
    pid = batch.producer_id
    if pid == NO_PRODUCER_ID:
        return
    key = (state.key, pid)
    entry = entries[key] if key in entries else producers.get(key)
    if batch.control is None:
        if entry is not None and entry.producer_epoch > batch.producer_epoch:
            entry = None  # the source accepted it: its state is the truth, not ours
        first_seq = batch.base_sequence if batch.base_sequence >= 0 else 0
        retained = RetainedBatch(
            first_seq,
            last_sequence_of(first_seq, batch.record_count),
            batch.base_offset,
            batch.last_offset,
            batch.max_timestamp,
        )
        opening = batch.is_transactional and (
            entry is None or entry.current_txn_first_offset is None
        )
        entry = record_append(
            entry, pid, batch.producer_epoch, retained, now_ms, batch.is_transactional
        )
        if opening:
            plan.opened.append((state.key, batch.base_offset, pid))
        entries[key] = entry
        return
    first = None if entry is None else entry.current_txn_first_offset
    if first is not None:
        plan.closed.append((state.key, first))
        if batch.control is ControlType.ABORT:
            others = [f for k, f, p in plan.opened if k == state.key and p != pid]
            stored_other = other_ongoing.get(key)
            if stored_other is not None and (state.key, stored_other) not in plan.closed:
                others.append(stored_other)
            lso = min(others) if others else batch.last_offset + 1
            plan.aborted.append((state.key, AbortedTxn(pid, first, batch.last_offset, lso)))
    entries[key] = ProducerEntry(
        pid,
        batch.producer_epoch,
        (),
        batch.max_timestamp,
        now_ms,
        batch.coordinator_epoch,
        None,
    )


class MirrorClaim(msgspec.Struct, frozen=True):
    """A mirror operation's answer: the topic's mark after it, and why it was refused ("":
    it was not)."""

    mark: MirrorMark | None
    refusal: str = ""
