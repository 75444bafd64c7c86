"""The consumer's cheap decode (`decode_runs`) answers exactly what kafka-python's full decode
(`decode_records`) answers, for clean fetches and for every kind of damage the audit must see."""

from __future__ import annotations

import struct

import pytest

from benchmarks.harness.audit import Marker, ReadRecord
from benchmarks.harness.consumer import runs_from
from benchmarks.harness.readback import RecordRun, _whole_batch, decode_records, decode_runs
from benchmarks.harness.records import build_batch, kafka_records, record_key, record_value
from benchmarks.harness.workload import WorkloadRow
from diskless import ControlType
from diskless.records import build_control_batch

_CRC_AT = 17
_CRC_FROM = 21


def _row(producer_id: int, seq: int, records: int, value_bytes: int, txn: bool = False) -> bytes:
    row = WorkloadRow(
        request_id=0,
        producer_index=0,
        producer_id=producer_id,
        producer_epoch=0,
        transactional=txn,
        rack="az1",
        task=0,
        broker_id=0,
        request_index=0,
        send_offset_ms=-1.0,
        topic="bench-0",
        partition=0,
        records=records,
        value_bytes=value_bytes,
        base_sequence=seq,
        producer_seq=seq,
        txn_index=0 if txn else -1,
        txn_commit=True,
    )
    return build_batch(row, 1_700_000_000_000)


def _at(batch: bytes, base_offset: int) -> bytearray:
    """The batch as a fetch serves it: at `base_offset` (outside the CRC)."""
    out = bytearray(batch)
    out[0:8] = base_offset.to_bytes(8, "big")
    return out


def _recrc(batch: bytearray) -> bytearray:
    """The batch with a CRC that covers its bytes as they are now (kafka-python's crc32c)."""
    kafka_records()
    from kafka.record.util import calc_crc32c

    struct.pack_into(">I", batch, _CRC_AT, calc_crc32c(memoryview(batch)[_CRC_FROM:]))
    return batch


def _expand(runs: list[RecordRun]) -> list[ReadRecord]:
    return [
        ReadRecord(offset + i, batch_pid, key_pid, seq + i, value_bytes, ok, txn)
        for offset, count, batch_pid, key_pid, seq, value_bytes, ok, txn in runs
        for i in range(count)
    ]


def _same(blob: bytes) -> tuple[list[RecordRun], list[ReadRecord]]:
    """decode_runs and decode_records agree on `blob`; the runs and the records."""
    runs, next_offset, markers = decode_runs(blob)
    records, expected_next, expected_markers = decode_records(blob)
    assert _expand(runs) == records
    assert (next_offset, markers) == (expected_next, expected_markers)
    return runs, records


def _clean_fetch() -> bytes:
    marker = build_control_batch(
        base_offset=0,
        producer_id=1002,
        producer_epoch=0,
        control_type=ControlType.COMMIT,
        coordinator_epoch=0,
        timestamp=1_700_000_000_000,
    )
    return b"".join(
        [
            _at(_row(1000, 10, 3, 50), 40),
            _at(_row(1000, 13, 2, 50), 43),  # follows on: one run with the batch before
            _at(_row(1001, 0, 100, 0), 45),  # offset deltas past one varint byte, empty values
            _at(_row(1002, 0, 2, 3000, txn=True), 145),
            _at(marker, 147),
        ]
    )


def test_a_clean_fetch_is_read_as_whole_batches_joined_into_runs() -> None:
    runs, records = _same(_clean_fetch())
    assert runs == [
        (40, 5, 1000, 1000, 10, 50, True, False),
        (45, 100, 1001, 1001, 0, 0, True, False),
        (145, 2, 1002, 1002, 0, 3000, True, True),
    ]
    assert decode_runs(_clean_fetch())[1:] == (148, [Marker(147, 1002, True)])
    assert len(records) == 107


def test_a_batch_cut_by_the_fetch_size_is_not_read() -> None:
    blob = _clean_fetch()
    first = len(_row(1000, 10, 3, 50))
    runs, _ = _same(blob[: first + 30])
    assert runs == [(40, 3, 1000, 1000, 10, 50, True, False)]
    assert _same(b"")[0] == []


@pytest.mark.parametrize(
    ("where", "at"),
    [
        ("value", -2),  # the last record's value
        ("key", 61 + 2 + 4 + 15),  # the first record's key: its sequence's last byte
        ("timestamp delta", 61 + 2 + 1),  # the first record's
    ],
)
def test_a_changed_byte_under_a_valid_crc_gives_kafka_pythons_verdict(where: str, at: int) -> None:
    batch = _at(_row(1000, 10, 3, 50), 40)
    batch[at] ^= 0x02
    runs, records = _same(bytes(_recrc(batch)))
    assert len(records) == 3
    if where == "value":
        assert [r.value_ok for r in records] == [True, True, False]
    if where == "key":
        assert records[0].key_seq != 10 and runs[0][1] == 1


def test_a_wrong_crc_is_an_error_as_in_kafka_pythons_decode() -> None:
    batch = _at(_row(1000, 10, 3, 50), 40)
    batch[-2] ^= 0x02
    for decode in (decode_runs, decode_records):
        with pytest.raises(ValueError, match="CRC mismatch"):
            decode(bytes(batch))


def test_records_that_are_not_consecutive_sequences_are_decoded_one_by_one() -> None:
    builder_type, _ = kafka_records()
    builder = builder_type(
        magic=2,
        compression_type=0,
        is_transactional=False,
        producer_id=1000,
        producer_epoch=0,
        base_sequence=0,
        batch_size=1 << 20,
    )
    for i, seq in enumerate([5, 6, 8]):  # a gap: the third record is not the run's
        builder.append(
            i, timestamp=0, key=record_key(1000, seq), value=record_value(9, seq), headers=[]
        )
    runs, _ = _same(bytes(builder.build()))
    assert runs == [(0, 2, 1000, 1000, 5, 9, True, False), (2, 1, 1000, 1000, 8, 9, True, False)]


def test_runs_from_drops_the_records_before_the_fetched_offset() -> None:
    runs: list[RecordRun] = [
        (40, 5, 1000, 1000, 10, 50, True, False),
        (45, 2, 1001, 1001, 0, 7, True, False),
    ]
    assert runs_from(runs, 43, 9.0) == [
        (43, 2, 1000, 1000, 13, 50, True, False, 9.0),
        (45, 2, 1001, 1001, 0, 7, True, False, 9.0),
    ]
    assert runs_from(runs, 45, 9.0) == [(45, 2, 1001, 1001, 0, 7, True, False, 9.0)]
    assert runs_from(runs, 0, 9.0)[0][:2] == (40, 5)


def test_a_harness_batch_is_taken_whole_and_a_changed_one_is_not() -> None:
    batch = _at(_row(1000, 10, 100, 50), 40)
    assert _whole_batch(bytes(batch), 0, len(batch)) == (40, 100, 1000, 1000, 10, 50, True, False)
    batch[-2] ^= 0x02
    assert _whole_batch(bytes(_recrc(batch)), 0, len(batch)) is None
