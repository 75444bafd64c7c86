"""Kafka's one produce-time header fix: a CreateTime batch's maxTimestamp set to its largest
record timestamp, CRC recomputed, on a copy; a batch that needs no fix is never copied.

Batches are built by kafka-python and patched with kafka-python's CRC-32C; the fixed batch is
read back by kafka-python, whose builder writes the right maxTimestamp itself, so fixing a
patched batch must give back exactly the bytes kafka-python built.
"""

from __future__ import annotations

import struct

import pytest

from diskless._types import ErrorCode, TimestampType
from diskless.records import (
    BatchHeader,
    InvalidBatch,
    RecordRules,
    parse_batch,
    parse_produce_payload,
    with_max_timestamp,
)
from testkit.oracle import (
    ATTRIBUTES_AT,
    CODECS,
    CRC_AT,
    MAX_TIMESTAMP_AT,
    PRODUCER_ID_AT,
    build_batch,
    oracle,
    patch,
)

NOW = 1_700_000_000_000
MAX_MESSAGE_BYTES = 1_048_588
TIMESTAMPS = (NOW - 30, NOW - 5, NOW - 40, NOW - 12)
"""Out of order: the largest is neither the first nor the last record's."""
LARGEST = NOW - 5


def _batch(compression: int) -> bytes:
    records = [
        (ts, f"k{i}".encode(), f"value {i}".encode() * 8, [("h", b"x")])
        for i, ts in enumerate(TIMESTAMPS)
    ]
    batch = build_batch(
        records, compression=compression, producer_id=9, producer_epoch=2, base_sequence=40
    )
    assert oracle(batch).max_timestamp == LARGEST
    return batch


def _codec(name: str) -> int:
    value, available = CODECS[name]
    if not available():
        pytest.skip(f"kafka-python has no {name} library installed here")
    return int(value)


def _produce(data: bytes, rules: RecordRules | None = None) -> BatchHeader:
    result = parse_produce_payload(data, MAX_MESSAGE_BYTES, rules or RecordRules(NOW))
    assert isinstance(result, BatchHeader), result
    return result


@pytest.mark.parametrize("claimed", [-1, LARGEST + 1, LARGEST + 3_600_000, NOW - 40, -7])
@pytest.mark.parametrize("codec", ["none", "gzip", "snappy", "lz4", "zstd"])
def test_a_wrong_max_timestamp_is_set_to_the_largest_record_timestamp(
    codec: str, claimed: int
) -> None:
    built = _batch(_codec(codec))
    sent = patch(built, ">q", MAX_TIMESTAMP_AT, claimed)  # CRC recomputed by kafka-python
    assert oracle(sent).validate_crc() and oracle(sent).max_timestamp == claimed
    header = _produce(sent)
    stored = bytes(header.bytes_view())
    assert stored == built  # what kafka-python wrote: every other byte is the client's
    assert header.max_timestamp == LARGEST and header.crc_valid()
    assert oracle(stored).validate_crc()
    assert [record.timestamp for record in oracle(stored)] == list(TIMESTAMPS)
    # the header view describes the stored bytes, not the client's
    assert (header.position, header.size) == (0, len(sent))
    assert header.buffer.obj is not sent


def test_the_fix_changes_only_max_timestamp_and_the_crc() -> None:
    """`with_max_timestamp` on a batch in the middle of a buffer, read in place."""
    sent = patch(_batch(0), ">q", MAX_TIMESTAMP_AT, -1)
    buffer = b"\xaa" * 13 + sent + b"\xbb" * 7
    header = parse_batch(buffer, 13)
    assert isinstance(header, BatchHeader) and header.crc_valid()
    fixed = with_max_timestamp(header, 123_456)
    stored = bytes(fixed.bytes_view())
    assert len(stored) == len(sent)
    assert stored[:CRC_AT] == sent[:CRC_AT]
    assert stored[ATTRIBUTES_AT:MAX_TIMESTAMP_AT] == sent[ATTRIBUTES_AT:MAX_TIMESTAMP_AT]
    assert stored[PRODUCER_ID_AT:] == sent[PRODUCER_ID_AT:]
    assert struct.unpack_from(">q", stored, MAX_TIMESTAMP_AT) == (123_456,)
    assert stored[CRC_AT:ATTRIBUTES_AT] != sent[CRC_AT:ATTRIBUTES_AT]
    assert fixed.crc_valid() and oracle(stored).validate_crc()
    assert header.max_timestamp == -1 and bytes(header.bytes_view()) == sent  # untouched


@pytest.mark.parametrize("codec", ["none", "gzip"])
def test_a_batch_that_needs_no_fix_is_not_copied(codec: str) -> None:
    sent = _batch(_codec(codec))
    header = _produce(sent)
    assert header.buffer.obj is sent  # a view of the request's bytes, not a copy
    view = memoryview(sent)
    assert _produce(view).buffer.obj is sent


def test_log_append_time_topics_keep_the_clients_max_timestamp() -> None:
    """The append time replaces it (stamped on read), so it is neither checked nor copied."""
    sent = patch(_batch(0), ">q", MAX_TIMESTAMP_AT, -1)
    header = _produce(sent, RecordRules(NOW, TimestampType.LOG_APPEND_TIME))
    assert header.buffer.obj is sent and header.max_timestamp == -1


def test_records_all_before_the_epoch_get_max_timestamp_minus_one() -> None:
    """LogValidator starts its maximum at NO_TIMESTAMP (-1), so it never goes below."""
    sent = build_batch([(-9, None, b"a", []), (-5, None, b"b", [])])
    assert oracle(sent).max_timestamp == -5  # kafka-python writes the largest as it is
    header = _produce(sent)
    assert header.max_timestamp == -1 and header.crc_valid()
    assert [record.timestamp for record in oracle(bytes(header.bytes_view()))] == [-9, -5]


def test_a_corrupt_batch_is_refused_before_any_fix() -> None:
    """A new CRC must never cover a corruption: the old CRC is checked first."""
    sent = bytearray(patch(_batch(0), ">q", MAX_TIMESTAMP_AT, -1))
    sent[-1] ^= 0x01
    result = parse_produce_payload(bytes(sent), MAX_MESSAGE_BYTES, RecordRules(NOW))
    assert isinstance(result, InvalidBatch) and result.error == ErrorCode.CORRUPT_MESSAGE, result


def test_without_record_rules_nothing_is_fixed() -> None:
    """Re-reading batches the broker already accepted checks framing and CRC only."""
    sent = patch(_batch(0), ">q", MAX_TIMESTAMP_AT, -1)
    result = parse_produce_payload(sent, MAX_MESSAGE_BYTES)
    assert isinstance(result, BatchHeader) and result.buffer.obj is sent
