"""Unit: the producer-state rewrite of the transaction-version bridge, read back by kafka-python."""

from __future__ import annotations

import pytest

from diskless.records import BatchHeader, parse_batch, rewrite_producer_state
from testkit.oracle import build_batch, oracle, simple_records


def _header(data: bytes) -> BatchHeader:
    header = parse_batch(data)
    assert isinstance(header, BatchHeader), header
    return header


@pytest.mark.parametrize("compression", [0, 1])
def test_the_copy_carries_the_new_epoch_and_sequence_and_a_valid_crc(compression: int) -> None:
    original = build_batch(
        simple_records(5),
        compression=compression,
        transactional=True,
        producer_id=7,
        producer_epoch=3,
        base_sequence=40,
    )
    rewritten = rewrite_producer_state(_header(original), producer_epoch=9, base_sequence=0)
    before, after = oracle(original), oracle(rewritten)
    assert after.validate_crc()
    assert (after.producer_id, after.producer_epoch, after.base_sequence) == (7, 9, 0)
    assert after.is_transactional
    assert [(r.key, r.value, r.timestamp) for r in after] == [
        (r.key, r.value, r.timestamp) for r in before
    ]
    assert len(rewritten) == len(original)


def test_the_original_bytes_are_left_alone() -> None:
    original = bytearray(
        build_batch(simple_records(2), producer_id=1, producer_epoch=0, base_sequence=5)
    )
    snapshot = bytes(original)
    rewrite_producer_state(_header(original), producer_epoch=1, base_sequence=0)
    assert bytes(original) == snapshot


def test_only_the_batch_itself_is_copied_from_a_larger_buffer() -> None:
    first = build_batch(simple_records(2), producer_id=1, producer_epoch=0, base_sequence=0)
    second = build_batch(simple_records(3), producer_id=1, producer_epoch=0, base_sequence=2)
    header = parse_batch(first + second, len(first))
    assert isinstance(header, BatchHeader)
    rewritten = rewrite_producer_state(header, producer_epoch=4, base_sequence=0)
    assert len(rewritten) == len(second)
    assert oracle(rewritten).validate_crc()
    assert oracle(rewritten).producer_epoch == 4


@pytest.mark.parametrize(
    ("epoch", "sequence"), [(2**15, 0), (-(2**15) - 1, 0), (0, 2**31), (0, -2)]
)
def test_values_outside_the_fields_are_refused(epoch: int, sequence: int) -> None:
    data = build_batch(simple_records(1), producer_id=1, producer_epoch=0, base_sequence=0)
    with pytest.raises(ValueError):
        rewrite_producer_state(_header(data), producer_epoch=epoch, base_sequence=sequence)
