"""Unit tests of the read-back audit: a clean read passes, every kind of tampering fails."""

from __future__ import annotations

from benchmarks.harness.audit import (
    ExpectedBatch,
    Marker,
    PartitionVerdict,
    ReadRecord,
    check_partition,
)
from benchmarks.harness.readback import committed_view, decode_records
from benchmarks.harness.records import build_batch, record_value
from benchmarks.harness.verify import summarize
from benchmarks.harness.workload import WorkloadRow
from diskless import TopicPartition

TP = TopicPartition("bench-0", 3)
# Two producers interleaved: 1000 sends 3 records then 2, 1001 sends 2 records.
EXPECTED = [
    ExpectedBatch(base_offset=0, records=3, producer_id=1000, producer_seq=10, value_bytes=50),
    ExpectedBatch(base_offset=3, records=2, producer_id=1001, producer_seq=0, value_bytes=70),
    ExpectedBatch(base_offset=5, records=2, producer_id=1000, producer_seq=40, value_bytes=50),
]


def _clean_read() -> list[ReadRecord]:
    return [
        ReadRecord(
            batch.base_offset + i,
            batch.producer_id,
            batch.producer_id,
            batch.producer_seq + i,
            batch.value_bytes,
            True,
        )
        for batch in EXPECTED
        for i in range(batch.records)
    ]


def _check(records: list[ReadRecord], high_watermark: int = 7) -> PartitionVerdict:
    return check_partition(TP, EXPECTED, records, 0, high_watermark)


def test_a_clean_read_passes() -> None:
    verdict = _check(_clean_read())
    assert verdict.ok, verdict.problems
    assert verdict.expected_records == verdict.read_records == 7
    assert summarize([verdict]).passed


def test_a_dropped_acknowledged_record_fails() -> None:
    records = _clean_read()
    del records[4]
    verdict = _check(records)
    assert not verdict.ok
    assert verdict.missing == 1 and verdict.gaps == 1
    assert not summarize([verdict]).passed


def test_a_dropped_last_record_fails_on_the_high_watermark() -> None:
    verdict = _check(_clean_read()[:-1])
    assert not verdict.ok and verdict.missing == 1 and verdict.gaps == 1


def test_a_duplicated_record_fails() -> None:
    records = _clean_read()
    verdict = _check([*records, records[2]])
    assert not verdict.ok and verdict.duplicate_offsets == 1


def test_the_same_record_at_two_offsets_fails() -> None:
    records = _clean_read()
    copy = records[0]._replace(offset=7)  # appended again after the last acknowledged offset
    verdict = _check([*records, copy], high_watermark=8)
    assert not verdict.ok and verdict.duplicate_records == 1
    assert verdict.unacknowledged_present == 1


def test_records_swapped_between_offsets_fail_on_identity_and_order() -> None:
    records = _clean_read()
    first, second = records[0], records[1]
    records[0] = second._replace(offset=0)
    records[1] = first._replace(offset=1)
    verdict = _check(records)
    assert not verdict.ok and verdict.mismatched == 2 and verdict.order_violations >= 1


def test_a_wrong_value_fails() -> None:
    records = _clean_read()
    records[3] = records[3]._replace(value_ok=False)
    assert _check(records).mismatched == 1
    records = _clean_read()
    records[3] = records[3]._replace(value_bytes=69)
    assert _check(records).mismatched == 1


def test_an_unacknowledged_but_present_record_is_counted_not_failed() -> None:
    records = _clean_read()
    extra = ReadRecord(7, 1002, 1002, 0, 10, True)  # a timed-out request that did commit
    verdict = _check([*records, extra], high_watermark=8)
    assert verdict.ok and verdict.unacknowledged_present == 1


def test_overlapping_acks_fail() -> None:
    overlapping = [*EXPECTED, ExpectedBatch(6, 1, 1001, 2, 70)]
    verdict = check_partition(TP, overlapping, _clean_read(), 0, 7)
    assert not verdict.ok and verdict.overlapping_acks == 1


def test_a_partition_that_could_not_be_read_fails() -> None:
    verdict = check_partition(TP, EXPECTED, [], 0, 0, read_errors=1)
    assert not verdict.ok and verdict.missing == 7


def test_decode_reads_kafka_python_batches_at_their_offsets() -> None:
    row = WorkloadRow(
        request_id=0,
        producer_index=0,
        producer_id=1000,
        producer_epoch=0,
        transactional=False,
        rack="az1",
        task=0,
        broker_id=0,
        request_index=0,
        send_offset_ms=-1.0,
        topic=TP.topic,
        partition=TP.partition,
        records=3,
        value_bytes=50,
        base_sequence=0,
        producer_seq=10,
        txn_index=-1,
        txn_commit=True,
    )
    blob = bytearray(build_batch(row, 1_700_000_000_000))
    blob[0:8] = (40).to_bytes(8, "big")  # the read path rewrites the base offset, outside the CRC
    records, next_offset, markers = decode_records(bytes(blob))
    assert next_offset == 43 and markers == []
    assert [(r.offset, r.key_producer_id, r.key_seq, r.value_bytes) for r in records] == [
        (40, 1000, 10, 50),
        (41, 1000, 11, 50),
        (42, 1000, 12, 50),
    ]
    assert all(r.value_ok and r.batch_producer_id == 1000 for r in records)
    assert record_value(50, 10)[:2] == bytes([10, 11])


# --- transactions: producer 2000 (wire id 7) commits offsets 0-1, aborts 3-4; markers at 2 and 5;
# an idempotent producer 1000 writes offset 6.
TXN_EXPECTED = [
    ExpectedBatch(0, 2, 2000, 0, 20, wire_producer_id=7, visible=True, transactional=True),
    ExpectedBatch(3, 2, 2000, 2, 20, wire_producer_id=7, visible=False, transactional=True),
    ExpectedBatch(6, 1, 1000, 0, 20),
]
TXN_MARKERS = [Marker(2, 7, commit=True), Marker(5, 7, commit=False)]


def _txn_read() -> list[ReadRecord]:
    return [
        ReadRecord(0, 7, 2000, 0, 20, True, True),
        ReadRecord(1, 7, 2000, 1, 20, True, True),
        ReadRecord(3, 7, 2000, 2, 20, True, True),
        ReadRecord(4, 7, 2000, 3, 20, True, True),
        ReadRecord(6, 1000, 1000, 0, 20, True, False),
    ]


def test_committed_view_drops_an_aborted_transaction_up_to_its_marker() -> None:
    shown = committed_view(_txn_read(), TXN_MARKERS, aborted=[(7, 3)])
    assert [r.offset for r in shown] == [0, 1, 6]


def test_read_committed_showing_exactly_the_committed_records_passes() -> None:
    records = _txn_read()
    view = committed_view(records, TXN_MARKERS, aborted=[(7, 3)])
    verdict = check_partition(TP, TXN_EXPECTED, records, 0, 7, markers=TXN_MARKERS, committed=view)
    assert verdict.ok, verdict.problems
    assert (verdict.committed_expected, verdict.committed_read, verdict.markers) == (3, 3, 2)


def test_read_committed_showing_an_aborted_record_fails() -> None:
    records = _txn_read()
    view = committed_view(records, TXN_MARKERS, aborted=[])  # the abort went unreported
    verdict = check_partition(TP, TXN_EXPECTED, records, 0, 7, markers=TXN_MARKERS, committed=view)
    assert not verdict.ok and verdict.committed_extra == 2


def test_read_committed_hiding_a_committed_record_fails() -> None:
    records = _txn_read()
    view = committed_view(records, TXN_MARKERS, aborted=[(7, 0)])  # the commit reported aborted
    verdict = check_partition(TP, TXN_EXPECTED, records, 0, 7, markers=TXN_MARKERS, committed=view)
    assert not verdict.ok and verdict.committed_missing == 2


def test_a_missing_marker_leaves_a_gap() -> None:
    verdict = check_partition(TP, TXN_EXPECTED, _txn_read(), 0, 7, markers=TXN_MARKERS[:1])
    assert not verdict.ok and verdict.gaps == 1


def test_a_transaction_whose_end_failed_may_show_or_not() -> None:
    records = _txn_read()
    unknown = [b._replace(outcome_known=False) if b.base_offset == 3 else b for b in TXN_EXPECTED]
    for aborted in ([(7, 3)], []):  # hidden, or shown: both are acceptable
        view = committed_view(records, TXN_MARKERS, aborted=aborted)
        verdict = check_partition(TP, unknown, records, 0, 7, markers=TXN_MARKERS, committed=view)
        assert verdict.ok, verdict.problems
