"""Property: the first record of a batch reaching an offset and a timestamp, against kafka-python's
decoder as the oracle (seed printed), over every codec, record counts from 1 to 300, CreateTime
timestamps in no order, LogAppendTime batches and control batches; and a batch whose records
do not frame is an InvalidBatch, never an exception."""

from __future__ import annotations

import random

import pytest
from kafka.record import MemoryRecords

from diskless._types import ControlType, ErrorCode
from diskless.records import (
    BatchHeader,
    InvalidBatch,
    build_control_batch,
    first_record_reaching,
    parse_batch,
    set_base_offset,
    set_log_append_time,
)
from testkit.oracle import CODECS, build_batch, recompute_crc


def _header(data: bytes | bytearray) -> BatchHeader:
    header = parse_batch(data)
    assert isinstance(header, BatchHeader), header
    return header


def _oracle(data: bytes, offset: int, timestamp: int) -> tuple[int, int] | None:
    """kafka-python's records, searched as Kafka's FileRecords.searchForTimestamp does."""
    batch = MemoryRecords(data).next_batch()
    assert batch is not None
    for record in batch:
        if record.offset >= offset and record.timestamp >= timestamp:
            return record.offset, record.timestamp
    return None


def _random_batch(rng: random.Random) -> bytes:
    names = [name for name, (_, available) in CODECS.items() if available()]
    compression = CODECS[rng.choice(names)][0]
    count = rng.choice([1, 2, 3, 7, 40, 300])
    start = 1_700_000_000_000 + rng.randrange(10_000)
    stamps = [start + rng.randrange(-500, 500) for _ in range(count)]
    if rng.random() < 0.3:
        stamps.sort()
    records = [(ts, None, rng.randbytes(rng.randrange(0, 300)), []) for ts in stamps]
    batch = bytearray(build_batch(records, compression=compression))
    set_base_offset(batch, rng.randrange(1 << 40))
    if rng.random() < 0.2:
        set_log_append_time(batch, start + rng.randrange(-1000, 1000))
    return bytes(batch)


@pytest.mark.seeds(6)
def test_the_first_record_reaching_an_offset_and_a_timestamp_is_kafkas(seed: int) -> None:
    print(f"seed={seed}")
    rng = random.Random(seed)
    checked = 0
    for _ in range(60):
        data = _random_batch(rng)
        header = _header(data)
        oracle = MemoryRecords(data).next_batch()
        assert oracle is not None
        stamps = sorted({r.timestamp for r in oracle})
        targets = [
            0,
            stamps[0],
            stamps[-1],
            stamps[-1] + 1,
            *rng.sample(stamps, min(5, len(stamps))),
        ]
        targets += [ts + 1 for ts in rng.sample(stamps, min(3, len(stamps)))]
        for target in targets:
            for offset in (
                0,
                header.base_offset,
                rng.randint(header.base_offset, header.last_offset),
            ):
                found = first_record_reaching(header, offset=offset, timestamp=target)
                assert found == _oracle(data, offset, target), (seed, header, offset, target)
                checked += 1
    assert checked > 1000


@pytest.mark.parametrize("control_type", [ControlType.ABORT, ControlType.COMMIT])
def test_a_marker_answers_with_its_one_record(control_type: ControlType) -> None:
    marker = build_control_batch(
        base_offset=41,
        producer_id=3,
        producer_epoch=1,
        control_type=control_type,
        coordinator_epoch=0,
        timestamp=5_000,
    )
    header = _header(marker)
    assert first_record_reaching(header, offset=0, timestamp=5_000) == (41, 5_000)
    assert first_record_reaching(header, offset=41, timestamp=4_000) == (41, 5_000)
    assert first_record_reaching(header, offset=42, timestamp=0) is None
    assert first_record_reaching(header, offset=0, timestamp=5_001) is None
    assert _oracle(marker, 0, 5_000) == (41, 5_000)


def test_records_that_do_not_frame_are_an_invalid_batch() -> None:
    records = [(1_000 + i, None, b"v" * 20, []) for i in range(2)]
    good = build_batch(records)
    assert len(good) - 61 < 63
    header = _header(good)
    assert first_record_reaching(header, offset=1, timestamp=0) == (1, 1_001)
    # The first record claims more bytes than the records hold (CRC made valid again).
    bad = bytearray(good)
    bad[61] = 0x7E  # zigzag 63: a record of 63 bytes
    bad = recompute_crc(bad)
    found = first_record_reaching(_header(bad), offset=1, timestamp=0)
    assert isinstance(found, InvalidBatch) and found.error == ErrorCode.CORRUPT_MESSAGE, found
    # A varint that never ends: every byte of the records has its high bit set.
    endless = bytearray(good)
    endless[61:] = b"\xff" * (len(good) - 61)
    endless = recompute_crc(endless)
    found = first_record_reaching(_header(endless), offset=0, timestamp=0)
    assert isinstance(found, InvalidBatch), found
