"""The transactional-id state machine (Kafka's TransactionMetadata), as pure transitions.

A record per transactional id lives in the batch coordinator, and each transition below is
applied there in one atomic step together with its effect on the partitions (registrations,
markers). So any number of `TransactionCoordinator` instances, in any processes, can serve the
same id: each step re-reads the record it decides on, and the loser of a race sees the winner's
record and answers as Kafka would (PRODUCER_FENCED, CONCURRENT_TRANSACTIONS, ...).

Transaction version 2: every end bumps the epoch; the markers carry the bumped epoch. For
producers that speak version 1 (they keep one epoch and count sequences on across transactions)
the record also keeps what any broker process needs to translate their requests and batches:
the epoch the producer holds, the coordinator epoch it stands for now, and per partition the
producer's sequence at which the current coordinator epoch began (see
`kafka_server._coordination.txn_front`).
"""

from __future__ import annotations

import enum
from collections.abc import Sequence
from typing import Final, NamedTuple

import msgspec

from diskless._types import CommittedOffset, ErrorCode, TopicPartition
from diskless.records import SEQUENCE_MAX

PRODUCER_EPOCH_MAX: Final = 32767
"""Kafka's epochs are int16; an id whose epoch would pass this gets a fresh producer id."""
TRANSACTION_TIMEOUT_MS_MAX: Final = 15 * 60 * 1000
"""Kafka's `transaction.max.timeout.ms` default."""
PREPARED_RETRY_MS: Final = 5_000
"""How long a prepared transaction is left to the instance that prepared it before any other
instance's sweeper completes it (it was left behind by a failure)."""


class TxnState(enum.Enum):
    EMPTY = "Empty"
    ONGOING = "Ongoing"
    PREPARE_COMMIT = "PrepareCommit"
    PREPARE_ABORT = "PrepareAbort"
    COMPLETE_COMMIT = "CompleteCommit"
    COMPLETE_ABORT = "CompleteAbort"


PREPARED_STATES: Final = frozenset({TxnState.PREPARE_COMMIT, TxnState.PREPARE_ABORT})


class PendingOffset(NamedTuple):
    group_id: str
    topic_partition: TopicPartition
    offset: int
    metadata: str | None
    leader_epoch: int = -1
    """The committed leader epoch (`CommittedOffset.leader_epoch`); records stored before it
    was kept read back as -1."""

    @property
    def committed(self) -> CommittedOffset:
        """What the offset becomes when its transaction commits."""
        return CommittedOffset(self.offset, self.metadata, self.leader_epoch)


class TxnRecord(msgspec.Struct, frozen=True):
    """The durable state of one transactional id."""

    transactional_id: str
    producer_id: int
    producer_epoch: int
    state: TxnState
    timeout_ms: int
    updated_ms: int
    partitions: tuple[TopicPartition, ...] = ()
    """The partitions of the ongoing (or prepared) transaction."""
    started_ms: int | None = None
    """When the transaction became ONGOING."""
    groups: tuple[str, ...] = ()
    """Consumer groups whose offsets the transaction commits (AddOffsetsToTxn)."""
    pending_offsets: tuple[PendingOffset, ...] = ()
    """Offsets committed in the transaction (TxnOffsetCommit): stored for their groups when it
    commits, dropped when it aborts."""
    client_epoch: int = -1
    """The epoch InitProducerId gave: a transaction version 1 producer keeps it for good."""
    bridged_epoch: int = -1
    """The epoch `client_epoch` stands for now. It follows the producer's own ends only: a
    transaction the coordinator ended behind its back (a timeout) leaves it behind, so that the
    producer is fenced, as Kafka fences a version 1 producer whose transaction timed out."""
    client_end: bool = False
    """The prepared decision is the producer's own EndTxn (not a timeout or a re-init)."""
    sequence_bases: tuple[tuple[TopicPartition, int], ...] = ()
    """Per partition the producer wrote to since InitProducerId, its sequence at which
    `bridged_epoch` began there (the current epoch's batches start at 0; 0 if absent)."""

    def sequence_base(self, tp: TopicPartition) -> int:
        for partition, base in self.sequence_bases:
            if partition == tp:
                return base
        return 0

    @property
    def commit(self) -> bool:
        """The decision of a prepared transaction."""
        return self.state is TxnState.PREPARE_COMMIT

    @property
    def due_ms(self) -> int | None:
        """When a sweeper must act on the record, None if never: an ongoing transaction at its
        timeout (abort), a prepared one once it has been left unfinished (complete)."""
        if self.state is TxnState.ONGOING:
            assert self.started_ms is not None
            return self.started_ms + self.timeout_ms
        if self.state in PREPARED_STATES:
            return self.updated_ms + PREPARED_RETRY_MS
        return None


class TxnStep(NamedTuple):
    """A transition's answer: the error, the record now stored, and whether the caller must
    complete the prepared transaction (place its markers) before the request is done."""

    error: ErrorCode
    record: TxnRecord | None = None
    must_complete: bool = False


def new_record(transactional_id: str, producer_id: int, timeout_ms: int, now_ms: int) -> TxnRecord:
    return TxnRecord(
        transactional_id,
        producer_id,
        0,
        TxnState.EMPTY,
        timeout_ms,
        now_ms,
        client_epoch=0,
        bridged_epoch=0,
    )


def advanced_sequence_bases(
    record: TxnRecord, last_sequences: dict[TopicPartition, int]
) -> tuple[tuple[TopicPartition, int], ...]:
    """The bases of the next epoch: on each partition the transaction wrote to (its last
    sequence of this epoch in `last_sequences`), the producer's sequence continues after it."""
    bases = dict(record.sequence_bases)
    for tp, last in last_sequences.items():
        bases[tp] = (record.sequence_base(tp) + last + 1) % (SEQUENCE_MAX + 1)
    return tuple(bases.items())


def _bumped(record: TxnRecord, next_producer_id: int) -> tuple[int, int]:
    """(producer id, epoch) after a bump; an exhausted epoch takes `next_producer_id` at 0."""
    if record.producer_epoch + 1 >= PRODUCER_EPOCH_MAX:
        return next_producer_id, 0
    return record.producer_id, record.producer_epoch + 1


def needs_new_producer_id(record: TxnRecord) -> bool:
    """Whether bumping the record's epoch exhausts it (the step must allocate an id)."""
    return record.producer_epoch + 1 >= PRODUCER_EPOCH_MAX


def _check(record: TxnRecord | None, producer_id: int, producer_epoch: int) -> ErrorCode | None:
    if record is None or record.producer_id != producer_id:
        return ErrorCode.INVALID_PRODUCER_ID_MAPPING
    if producer_epoch < record.producer_epoch:
        return ErrorCode.PRODUCER_FENCED
    if producer_epoch > record.producer_epoch:
        return ErrorCode.INVALID_PRODUCER_EPOCH
    return None


def _prepared(record: TxnRecord, commit: bool, now_ms: int, client_end: bool = False) -> TxnRecord:
    state = TxnState.PREPARE_COMMIT if commit else TxnState.PREPARE_ABORT
    return msgspec.structs.replace(record, state=state, updated_ms=now_ms, client_end=client_end)


def init_record(record: TxnRecord, timeout_ms: int, now_ms: int, next_producer_id: int) -> TxnStep:
    """InitProducerId for a known id: bump the epoch, fencing the previous incarnation.

    What is open is finished first: an ongoing transaction is aborted and a prepared one keeps
    its decision (`must_complete`); the caller completes it and asks again.
    """
    if record.state is TxnState.ONGOING:
        return TxnStep(ErrorCode.CONCURRENT_TRANSACTIONS, _prepared(record, False, now_ms), True)
    if record.state in PREPARED_STATES:
        return TxnStep(ErrorCode.CONCURRENT_TRANSACTIONS, record, True)
    producer_id, epoch = _bumped(record, next_producer_id)
    bumped = TxnRecord(
        record.transactional_id,
        producer_id,
        epoch,
        TxnState.EMPTY,
        timeout_ms,
        now_ms,
        client_epoch=epoch,
        bridged_epoch=epoch,
    )
    return TxnStep(ErrorCode.NONE, bumped)


def add_to_record(
    record: TxnRecord | None,
    producer_id: int,
    producer_epoch: int,
    partitions: Sequence[TopicPartition],
    now_ms: int,
) -> TxnStep:
    """AddPartitionsToTxn: the transaction (opened now if needed) spans `partitions` too."""
    error = _check(record, producer_id, producer_epoch)
    if error is not None:
        return TxnStep(error, record)
    assert record is not None
    if record.state in PREPARED_STATES:
        return TxnStep(ErrorCode.CONCURRENT_TRANSACTIONS, record)
    ongoing = record.state is TxnState.ONGOING
    known = set(record.partitions) if ongoing else set()
    added = tuple(tp for tp in dict.fromkeys(partitions) if tp not in known)
    if ongoing and not added:
        return TxnStep(ErrorCode.NONE, record)
    return TxnStep(
        ErrorCode.NONE,
        msgspec.structs.replace(
            record,
            state=TxnState.ONGOING,
            partitions=(record.partitions if ongoing else ()) + added,
            started_ms=record.started_ms if ongoing else now_ms,
            updated_ms=now_ms,
        ),
    )


def add_offsets_to_record(
    record: TxnRecord | None, producer_id: int, producer_epoch: int, group_id: str, now_ms: int
) -> TxnStep:
    """AddOffsetsToTxn: the transaction (opened now if needed) commits offsets of `group_id`."""
    step = add_to_record(record, producer_id, producer_epoch, (), now_ms)
    if step.error is not ErrorCode.NONE:
        return step
    assert step.record is not None
    current = step.record
    ongoing = current.state is TxnState.ONGOING
    if ongoing and group_id in current.groups:
        return step
    return TxnStep(
        ErrorCode.NONE,
        msgspec.structs.replace(
            current,
            state=TxnState.ONGOING,
            groups=(current.groups if ongoing else ()) + (group_id,),
            started_ms=current.started_ms if ongoing else now_ms,
            updated_ms=now_ms,
        ),
    )


def commit_offsets_to_record(
    record: TxnRecord | None,
    producer_id: int,
    producer_epoch: int,
    group_id: str,
    offsets: Sequence[PendingOffset],
) -> TxnStep:
    """TxnOffsetCommit: the offsets wait in the record for the transaction's outcome."""
    step = add_to_record(record, producer_id, producer_epoch, (), 0)
    if step.error is not ErrorCode.NONE:
        return step
    assert record is not None
    if record.state is not TxnState.ONGOING or group_id not in record.groups:
        return TxnStep(ErrorCode.INVALID_TXN_STATE, record)
    replaced = {(o.group_id, o.topic_partition) for o in offsets}
    kept = tuple(
        o for o in record.pending_offsets if (o.group_id, o.topic_partition) not in replaced
    )
    return TxnStep(
        ErrorCode.NONE, msgspec.structs.replace(record, pending_offsets=kept + tuple(offsets))
    )


def end_record(
    record: TxnRecord | None, producer_id: int, producer_epoch: int, commit: bool, now_ms: int
) -> TxnStep:
    """EndTxn: prepare the decision (the caller completes it), or answer a retried end again."""
    if record is not None and record.producer_id == producer_id:
        completed = TxnState.COMPLETE_COMMIT if commit else TxnState.COMPLETE_ABORT
        if producer_epoch == record.producer_epoch - 1 and record.state is completed:
            return TxnStep(ErrorCode.NONE, record)  # the end that bumped the epoch, retried
    error = _check(record, producer_id, producer_epoch)
    if error is not None:
        return TxnStep(error, record)
    assert record is not None
    if record.state in PREPARED_STATES:
        if record.commit != commit:
            return TxnStep(ErrorCode.INVALID_TXN_STATE, record)
        return TxnStep(ErrorCode.NONE, record, True)
    if record.state is not TxnState.ONGOING:
        return TxnStep(ErrorCode.INVALID_TXN_STATE, record)
    return TxnStep(ErrorCode.NONE, _prepared(record, commit, now_ms, client_end=True), True)


def expire_record(record: TxnRecord, now_ms: int) -> TxnStep:
    """The sweeper: abort an ongoing transaction past its timeout; finish a stale prepared one."""
    due = record.due_ms
    if due is None or due >= now_ms:
        return TxnStep(ErrorCode.NONE, record)
    if record.state is TxnState.ONGOING:
        return TxnStep(ErrorCode.NONE, _prepared(record, False, now_ms), True)
    return TxnStep(ErrorCode.NONE, record, True)


def complete_record(
    record: TxnRecord,
    now_ms: int,
    next_producer_id: int,
    last_sequences: dict[TopicPartition, int] | None = None,
) -> TxnRecord:
    """The prepared transaction's markers are all placed: bump the epoch (TV2) and complete.

    `last_sequences`: per partition the transaction wrote to, its last sequence (for the
    version 1 bridge, which follows the bump only if the producer asked for the end)."""
    assert record.state in PREPARED_STATES, record
    producer_id, epoch = _bumped(record, next_producer_id)
    state = TxnState.COMPLETE_COMMIT if record.commit else TxnState.COMPLETE_ABORT
    follows = record.client_end and record.bridged_epoch == record.producer_epoch
    follows = follows and producer_id == record.producer_id
    return TxnRecord(
        record.transactional_id,
        producer_id,
        epoch,
        state,
        record.timeout_ms,
        now_ms,
        client_epoch=record.client_epoch,
        bridged_epoch=epoch if follows else record.bridged_epoch,
        sequence_bases=(
            advanced_sequence_bases(record, last_sequences or {})
            if follows
            else record.sequence_bases
        ),
    )
