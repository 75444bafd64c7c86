"""Unit tests of the pure producer rules in `diskless.txn` (the backends share them)."""

from __future__ import annotations

import hypothesis
import hypothesis.strategies as st

from diskless._types import ErrorCode
from diskless.txn import (
    SEQUENCE_MAX,
    Duplicate,
    ProducerEntry,
    Rejected,
    RetainedBatch,
    check_append,
    in_sequence,
    is_expired,
    last_sequence_of,
    record_append,
)

sequences = st.one_of(
    st.integers(0, SEQUENCE_MAX), st.sampled_from([0, 1, SEQUENCE_MAX - 1, SEQUENCE_MAX])
)


def test_sequence_arithmetic_wraps() -> None:
    assert last_sequence_of(SEQUENCE_MAX, 1) == SEQUENCE_MAX
    assert last_sequence_of(SEQUENCE_MAX, 2) == 0
    assert last_sequence_of(SEQUENCE_MAX - 1, 5) == 2
    assert in_sequence(SEQUENCE_MAX, 0)
    assert in_sequence(-1, 0)
    assert not in_sequence(SEQUENCE_MAX, 1)
    assert not in_sequence(5, 5)


@hypothesis.given(last=sequences, first=sequences)
def test_check_append_follows_in_sequence(last: int, first: int) -> None:
    entry = ProducerEntry(1, 0, (RetainedBatch(last, last, 0, 0, 0),), last_update_ms=0)
    verdict = check_append(entry, 0, first, first, is_transactional=False)
    if first == last:
        assert isinstance(verdict, Duplicate)
    elif in_sequence(last, first):
        assert verdict is None
    else:
        assert verdict == Rejected(ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER, verdict.message)  # type: ignore[union-attr]


def test_record_append_keeps_five_and_clears_on_epoch_change() -> None:
    entry = None
    for i in range(7):
        entry = record_append(entry, 1, 0, RetainedBatch(i, i, i, i, 0), 10, False)
    assert entry is not None
    assert [b.first_seq for b in entry.batches] == [2, 3, 4, 5, 6]
    bumped = record_append(entry, 1, 1, RetainedBatch(0, 0, 7, 7, 0), 20, False)
    assert bumped.batches == (RetainedBatch(0, 0, 7, 7, 0),)
    assert (bumped.producer_epoch, bumped.last_update_ms) == (1, 20)


def test_transactions_open_once_and_pin_expiry() -> None:
    entry = record_append(None, 1, 0, RetainedBatch(0, 0, 40, 40, 0), 0, True)
    entry = record_append(entry, 1, 0, RetainedBatch(1, 1, 41, 41, 0), 0, True)
    assert entry.current_txn_first_offset == 40
    assert not is_expired(entry, 10**12, 1)
    verdict = check_append(entry, 0, 2, 2, is_transactional=False)
    assert isinstance(verdict, Rejected) and verdict.error == ErrorCode.INVALID_TXN_STATE
