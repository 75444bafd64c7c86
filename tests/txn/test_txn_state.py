"""Unit: the transactional-id state machine's transitions (pure functions)."""

from __future__ import annotations

import msgspec
import pytest

from diskless import ErrorCode, TopicPartition
from diskless.txn import (
    PRODUCER_EPOCH_MAX,
    TxnState,
    add_to_record,
    complete_record,
    end_record,
    expire_record,
    init_record,
    needs_new_producer_id,
    new_record,
)

TP0 = TopicPartition("t", 0)
TP1 = TopicPartition("t", 1)
NOW = 1_000_000


def ongoing(epoch: int = 3) -> msgspec.Struct:
    record = msgspec.structs.replace(new_record("tx", 7, 60_000, NOW), producer_epoch=epoch)
    step = add_to_record(record, 7, epoch, [TP0], NOW)
    assert step.record is not None
    return step.record


def test_init_bumps_the_epoch_of_the_same_id_and_finishes_what_is_open_first() -> None:
    empty = new_record("tx", 7, 60_000, NOW)
    bumped = init_record(empty, 30_000, NOW + 1, next_producer_id=99)
    assert (bumped.error, bumped.must_complete) == (ErrorCode.NONE, False)
    assert bumped.record is not None
    assert (bumped.record.producer_id, bumped.record.producer_epoch) == (7, 1)
    assert bumped.record.timeout_ms == 30_000
    open_step = init_record(ongoing(), 30_000, NOW, next_producer_id=99)
    assert open_step.must_complete and open_step.record is not None
    assert open_step.record.state is TxnState.PREPARE_ABORT
    assert open_step.error is ErrorCode.CONCURRENT_TRANSACTIONS


def test_an_exhausted_epoch_moves_to_the_next_producer_id_at_epoch_zero() -> None:
    last = msgspec.structs.replace(
        new_record("tx", 7, 60_000, NOW), producer_epoch=PRODUCER_EPOCH_MAX - 1
    )
    assert needs_new_producer_id(last)
    step = init_record(last, 60_000, NOW, next_producer_id=1234)
    assert step.record is not None
    assert (step.record.producer_id, step.record.producer_epoch) == (1234, 0)
    prepared = end_record(
        add_to_record(last, 7, PRODUCER_EPOCH_MAX - 1, [TP0], NOW).record,
        7,
        PRODUCER_EPOCH_MAX - 1,
        True,
        NOW,
    ).record
    assert prepared is not None
    done = complete_record(prepared, NOW, next_producer_id=1234)
    assert (done.producer_id, done.producer_epoch, done.state) == (
        1234,
        0,
        TxnState.COMPLETE_COMMIT,
    )


@pytest.mark.parametrize(
    ("producer_id", "epoch", "error"),
    [
        (8, 3, ErrorCode.INVALID_PRODUCER_ID_MAPPING),
        (7, 2, ErrorCode.PRODUCER_FENCED),
        (7, 4, ErrorCode.INVALID_PRODUCER_EPOCH),
    ],
)
def test_the_coordinator_apis_check_the_producer(
    producer_id: int, epoch: int, error: ErrorCode
) -> None:
    record = ongoing(epoch=3)
    assert add_to_record(record, producer_id, epoch, [TP1], NOW).error is error
    assert end_record(record, producer_id, epoch, True, NOW).error is error


def test_partitions_accumulate_once_and_a_prepared_transaction_takes_no_more() -> None:
    record = ongoing()
    step = add_to_record(record, 7, 3, [TP0, TP1, TP1], NOW + 5)
    assert step.record is not None and step.record.partitions == (TP0, TP1)
    assert step.record.started_ms == NOW  # the transaction began with its first partition
    prepared = end_record(step.record, 7, 3, False, NOW + 6)
    assert prepared.must_complete and prepared.record is not None
    assert add_to_record(prepared.record, 7, 3, [TP0], NOW).error is (
        ErrorCode.CONCURRENT_TRANSACTIONS
    )
    assert end_record(prepared.record, 7, 3, True, NOW).error is ErrorCode.INVALID_TXN_STATE


def test_expiry_aborts_an_ongoing_transaction_only_after_its_timeout() -> None:
    record = ongoing()
    assert record.due_ms == NOW + 60_000
    assert not expire_record(record, NOW + 60_000).must_complete
    step = expire_record(record, NOW + 60_001)
    assert step.must_complete and step.record is not None
    assert step.record.state is TxnState.PREPARE_ABORT
    completed = complete_record(step.record, NOW + 60_002, next_producer_id=-1)
    assert completed.due_ms is None and completed.partitions == ()
    assert completed.producer_epoch == 4
