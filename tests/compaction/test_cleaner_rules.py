"""Unit: single rules of the cleaner, each on a small log, read back by kafka-python.

KIP-534's delete horizon as Kafka writes it (bit 6, the horizon in baseTimestamp, every record
keeping its timestamp, maxTimestamp the greatest kept); a LogAppendTime batch keeping its append
time; a record without a key dropped; a producer's last batch kept empty as Kafka's
`writeEmptyHeader` writes it; a map that cannot hold one whole batch making no progress; a batch
that does not decode stopping the pass.
"""

from __future__ import annotations

import struct

import pytest

from diskless.compaction import (
    MAP_BYTES_MIN,
    LastRecord,
    OffsetMap,
    UncleanableBatch,
    build_offset_map,
    clean,
)
from diskless.records import DELETE_HORIZON_BIT, set_log_append_time
from testkit.compaction import headers_of
from testkit.oracle import build_batch, oracle

NOW = 1_700_000_100_000
RETENTION = 5_000
T = 1_700_000_000_000


def _at(batch: bytes, base_offset: int) -> bytes:
    data = bytearray(batch)
    struct.pack_into(">q", data, 0, base_offset)
    return bytes(data)


def _clean(
    batches: list[bytes],
    *,
    last: dict[int, LastRecord] | None = None,
    now: int = NOW,
    map_bytes: int = 1 << 16,
) -> list[bytes]:
    end = headers_of(batches)[-1].last_offset + 1
    offset_map = OffsetMap(map_bytes)
    outcome = build_offset_map(batches, start=0, end=end, offset_map=offset_map, aborted=())
    assert outcome.mapped_end == end and not outcome.full
    return list(
        clean(
            batches,
            offset_map=offset_map,
            now_ms=now,
            delete_retention_ms=RETENTION,
            aborted=(),
            last_records=last or {},
            upper_bound=end + 1,
        )
    )


def test_a_kept_tombstone_gets_kip_534s_delete_horizon_and_every_record_its_timestamp() -> None:
    first = _at(
        build_batch(
            [
                (T + 5, b"a", b"1" * 300, []),
                (T + 9, b"b", None, []),
                (T + 7, b"c", b"3" * 300, [("h", b"x")]),
            ],
            compression=4,
        ),
        0,
    )
    later = _at(build_batch([(T + 20, b"a", b"2", [])]), 3)
    cleaned = _clean([first, later])
    assert len(cleaned) == 2 and cleaned[1] == later
    batch = oracle(cleaned[0])
    assert batch.validate_crc()
    assert batch.attributes & DELETE_HORIZON_BIT
    assert batch.first_timestamp == NOW + RETENTION
    assert oracle(first).compression_type == batch.compression_type == 4
    assert (batch.base_offset, batch.last_offset_delta) == (0, 2)
    assert batch.max_timestamp == T + 9
    assert [(r.offset, r.timestamp, r.key, r.value, r.headers) for r in batch] == [
        (1, T + 9, b"b", None, []),
        (2, T + 7, b"c", b"3" * 300, [("h", b"x")]),
    ]
    # Cleaned again before the horizon, the batch is kept as it is; at the horizon the
    # tombstone goes and the horizon stays (Kafka keeps a batch's horizon once set).
    assert _clean(cleaned, now=NOW + RETENTION - 1)[0] == cleaned[0]
    again = oracle(_clean(cleaned, now=NOW + RETENTION)[0])
    assert again.validate_crc() and again.first_timestamp == NOW + RETENTION
    assert [(r.offset, r.timestamp, r.value) for r in again] == [(2, T + 7, b"3" * 300)]


def test_a_log_append_time_batch_keeps_its_append_time() -> None:
    data = bytearray(build_batch([(T, b"a", b"1", []), (T + 1, b"b", b"2", [])]))
    set_log_append_time(data, T + 500)
    later = _at(build_batch([(T + 20, b"a", b"2", [])]), 2)
    cleaned = _clean([bytes(data), later])
    batch = oracle(cleaned[0])
    assert batch.validate_crc() and batch.timestamp_type == 1
    assert batch.max_timestamp == T + 500
    assert [(r.offset, r.key) for r in batch] == [(1, b"b")]


def test_a_record_without_a_key_is_dropped_as_kafka_drops_it() -> None:
    data = _at(build_batch([(T, None, b"x", []), (T, b"k", b"y", [])]), 0)
    batch = oracle(_clean([data])[0])
    assert [(r.offset, r.key) for r in batch] == [(1, b"k")]


def test_a_producers_last_batch_stays_as_kafkas_empty_header() -> None:
    mine = _at(
        build_batch(
            [(T, b"a", b"1", []), (T + 3, b"b", b"2", [])],
            compression=3,
            producer_id=77,
            producer_epoch=4,
            base_sequence=100,
        ),
        10,
    )
    later = _at(build_batch([(T + 9, b"a", b"3", []), (T + 9, b"b", b"4", [])]), 12)
    last = {77: LastRecord(last_data_offset=11, producer_epoch=4)}
    cleaned = _clean([mine, later], last=last)
    assert len(cleaned) == 2
    empty = oracle(cleaned[0])
    assert empty.validate_crc()
    assert list(empty) == []
    assert (empty.base_offset, empty.last_offset_delta, empty.records_count) == (10, 1, 0)
    assert (empty.producer_id, empty.producer_epoch, empty.base_sequence) == (77, 4, 100)
    assert (empty.compression_type, empty.first_timestamp, empty.max_timestamp) == (
        0,
        -1,
        T + 3,
    )
    assert not empty.attributes & DELETE_HORIZON_BIT
    # Without the producer's state, the emptied batch goes.
    assert len(_clean([mine, later])) == 1


def test_a_map_that_cannot_hold_one_batch_makes_no_progress() -> None:
    offset_map = OffsetMap(MAP_BYTES_MIN)
    keys = offset_map.entries_max + 1
    big = _at(build_batch([(T, b"k%d" % i, b"v", []) for i in range(keys)]), 5)
    outcome = build_offset_map([big], start=5, end=5 + keys, offset_map=offset_map, aborted=())
    assert outcome.full and outcome.mapped_end == 5


def test_a_batch_that_does_not_decode_stops_the_pass() -> None:
    data = bytearray(_at(build_batch([(T, b"a", b"1", []), (T, b"b", b"2", [])]), 0))
    struct.pack_into(">i", data, 57, 3)  # one record more than the batch holds
    with pytest.raises(UncleanableBatch):
        build_offset_map([bytes(data)], start=0, end=2, offset_map=OffsetMap(4096), aborted=())
    with pytest.raises(UncleanableBatch):
        list(
            clean(
                [bytes(data[:40])],
                offset_map=OffsetMap(4096),
                now_ms=NOW,
                delete_retention_ms=RETENTION,
                aborted=(),
                last_records={},
                upper_bound=2,
            )
        )
