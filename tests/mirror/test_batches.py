"""Unit: fetched source bytes become mirrored batches: whole batches only, from the mirrored end,
CRC checked, the leader epoch cleared (outside the CRC) and kept beside the batch, transaction
markers recognized."""

from __future__ import annotations

import struct

import pytest

from diskless._types import ControlType, TopicPartition
from diskless.mirror import SourceBatchError, mirrored_batches
from diskless.records import build_control_batch, set_base_offset
from testkit.batches import build_batch

TP = TopicPartition("t", 0)


def at(offset: int, batch: bytes, leader_epoch: int = 7) -> bytes:
    data = bytearray(batch)
    set_base_offset(data, offset)
    data[12:16] = struct.pack(">i", leader_epoch)
    return bytes(data)


def test_whole_batches_from_the_end_with_their_fields() -> None:
    data = build_batch([b"a", b"b", b"c"], producer_id=9, producer_epoch=2, base_sequence=0)
    marker = build_control_batch(
        base_offset=0,
        producer_id=9,
        producer_epoch=3,
        control_type=ControlType.ABORT,
        coordinator_epoch=5,
        timestamp=1234,
    )
    records = at(0, data) + at(3, data) + at(6, marker, 9) + at(7, data)[:40]  # the last cut
    found = mirrored_batches(TP, records, 3)
    assert [(m.batch.base_offset, m.batch.last_offset) for m in found] == [(3, 5), (6, 6)]
    assert [m.leader_epoch for m in found] == [7, 9]  # the source's, kept beside each batch
    first, control = (m.batch for m in found)
    assert (first.producer_id, first.producer_epoch, first.base_sequence) == (9, 2, 0)
    assert first.control is None and first.record_count == 3
    assert (control.control, control.coordinator_epoch, control.max_timestamp) == (
        ControlType.ABORT,
        5,
        1234,
    )
    assert control.is_transactional
    for m in found:
        view = m.entry.header.bytes_view()
        assert struct.unpack_from(">i", view, 12) == (-1,)  # no source leader epoch
        assert m.entry.header.crc_valid()  # the CRC does not cover it
        assert (
            bytes(view[17:])
            == at(m.batch.base_offset, data if m.batch.control is None else marker)[17:]
        )


def test_a_batch_holding_the_source_log_start_is_mirrored_whole() -> None:
    data = build_batch([b"x"] * 10)
    (found,) = mirrored_batches(TP, at(0, data), 0, position=3)
    assert (found.batch.base_offset, found.batch.last_offset) == (0, 9)
    assert mirrored_batches(TP, at(0, data), 0, position=10) == []


def test_a_corrupt_batch_is_refused() -> None:
    data = bytearray(at(0, build_batch([b"v"])))
    data[-1] ^= 0xFF
    with pytest.raises(SourceBatchError):
        mirrored_batches(TP, bytes(data), 0)
