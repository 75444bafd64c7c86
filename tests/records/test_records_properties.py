"""Property tests of `diskless.records`: random kafka-python batches, rewrites, hostile bytes.

Hypothesis prints the failing example and a `@reproduce_failure` blob (`print_blob=True`); the
default example counts keep this file well under 30 s, `--run-slow` runs the deeper fuzz.
"""

from __future__ import annotations

import struct
from typing import Any

import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from diskless._types import ErrorCode
from diskless.records import (
    BatchHeader,
    InvalidBatch,
    parse_batch,
    parse_produce_payload,
    set_base_offset,
    set_log_append_time,
    split_batches,
)
from testkit.oracle import (
    ATTRIBUTES_AT,
    BASE_OFFSET_AT,
    BASE_SEQUENCE_AT,
    CRC_AT,
    LAST_OFFSET_DELTA_AT,
    LENGTH_AT,
    PRODUCER_ID_AT,
    RECORDS_COUNT_AT,
    Record,
    assert_header_matches,
    build_batch,
    oracle,
    recompute_crc,
)

FAST = settings(
    max_examples=150,
    deadline=None,
    print_blob=True,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
FUZZ_FAST = settings(FAST, max_examples=300)
FUZZ_DEEP = settings(FAST, max_examples=10_000)

INT16 = st.integers(-(2**15), 2**15 - 1)
INT32 = st.integers(-(2**31), 2**31 - 1)
TIMESTAMPS = st.integers(-1, 2**50)

small_bytes = st.binary(max_size=40)
records_strategy = st.lists(
    st.tuples(
        st.integers(-(10**6), 10**6),  # offset from the first timestamp
        st.none() | small_bytes,
        st.none() | st.binary(max_size=300),
        st.lists(st.tuples(st.text(max_size=8), st.none() | small_bytes), max_size=3),
    ),
    min_size=1,
    max_size=40,
)


@st.composite
def batches(draw: st.DrawFn) -> tuple[bytes, list[Record]]:
    """A batch kafka-python builds, with random records and producer fields."""
    base_timestamp = draw(TIMESTAMPS)
    raw = draw(records_strategy)
    records: list[Record] = [
        (max(0, base_timestamp + delta), key, value, headers) for delta, key, value, headers in raw
    ]
    producer = draw(st.sampled_from(["plain", "idempotent", "transactional", "garbage"]))
    fields: dict[str, Any]
    if producer == "plain":
        fields = {"producer_id": -1, "producer_epoch": -1, "base_sequence": -1}
    elif producer == "garbage":  # anything a (broken) client could put there
        fields = {
            "producer_id": draw(st.integers(-(2**63), 2**63 - 1)),
            "producer_epoch": draw(INT16),
            "base_sequence": draw(INT32),
            "transactional": draw(st.booleans()),
        }
    else:
        fields = {
            "producer_id": draw(st.integers(0, 2**63 - 1)),
            "producer_epoch": draw(st.integers(0, 2**15 - 1)),
            "base_sequence": draw(st.integers(0, 2**31 - 1) | st.integers(2**31 - 50, 2**31 - 1)),
            "transactional": producer == "transactional",
        }
    data = build_batch(records, compression=draw(st.sampled_from([0, 1])), **fields)
    return data, records


@FAST
@given(batches())
def test_parse_equals_oracle(batch: tuple[bytes, list[Record]]) -> None:
    data, records = batch
    header = parse_batch(data)
    assert isinstance(header, BatchHeader)
    assert_header_matches(header, data)
    assert header.records_count == len(records)
    assert header.crc_valid()
    headers = split_batches(data)
    assert isinstance(headers, list) and len(headers) == 1


@FAST
@given(
    batches(),
    st.integers(0, 2**63 - 2**31),
    st.none() | st.integers(0, 2**50),
    st.integers(0, 64),
)
def test_rewrites_round_trip(
    batch: tuple[bytes, list[Record]], base_offset: int, append_time: int | None, pad: int
) -> None:
    data, records = batch
    buffer = bytearray(b"\xa5" * pad + data + b"\x5a" * pad)
    set_base_offset(buffer, base_offset, position=pad)
    if append_time is not None:
        set_log_append_time(buffer, append_time, position=pad)
    assert buffer[:pad] == b"\xa5" * pad
    assert buffer[len(buffer) - pad :] == b"\x5a" * pad
    rewritten = bytes(buffer[pad : pad + len(data)])
    if append_time is None:
        assert rewritten[CRC_AT:] == data[CRC_AT:]

    kb = oracle(rewritten)
    assert kb.validate_crc()
    decoded = list(kb)
    assert [r.offset for r in decoded] == [base_offset + i for i in range(len(records))]
    assert [(r.key, r.value) for r in decoded] == [(k, v) for _, k, v, _ in records]
    if append_time is None:
        assert [r.timestamp for r in decoded] == [ts for ts, _, _, _ in records]
    else:
        assert kb.timestamp_type == 1
        assert all(r.timestamp == append_time for r in decoded)

    header = parse_batch(buffer, pad)
    assert isinstance(header, BatchHeader)
    assert_header_matches(header, rewritten)
    assert header.crc_valid()


# --- fuzz: hostile bytes never raise ------------------------------------------------------------


@st.composite
def header_mutation(draw: st.DrawFn, data: bytes) -> bytes:
    """Header fields the client rules look at, set to edge values; usually with a good CRC."""
    buffer = bytearray(data)
    (count,) = struct.unpack_from(">i", buffer, RECORDS_COUNT_AT)
    if draw(st.booleans()):
        attributes = (
            draw(st.integers(0, 7))  # compression, 5 to 7 invalid
            | draw(st.sampled_from([0, 0x08]))  # LogAppendTime
            | draw(st.sampled_from([0, 0x10]))  # transactional
            | draw(st.sampled_from([0, 0, 0, 0x20]))  # control
            | draw(st.sampled_from([0, 0, 0x40, 0x100]))  # delete horizon, unused bit
        )
        struct.pack_into(">h", buffer, ATTRIBUTES_AT, attributes)
    if draw(st.booleans()):
        struct.pack_into(">q", buffer, PRODUCER_ID_AT, draw(st.sampled_from([-2, -1, 0, 7])))
    if draw(st.booleans()):
        sequence = draw(st.sampled_from([-(2**31), -2, -1, 0, 2**31 - 1]))
        struct.pack_into(">i", buffer, BASE_SEQUENCE_AT, sequence)
    if draw(st.integers(0, 4)) == 0:
        struct.pack_into(">q", buffer, BASE_OFFSET_AT, draw(st.sampled_from([-1, 1, 2**40])))
    if draw(st.integers(0, 4)) == 0:
        new_count = draw(st.sampled_from([-1, 0, count - 1, count + 1]))
        struct.pack_into(">i", buffer, RECORDS_COUNT_AT, new_count)
        if draw(st.booleans()):
            struct.pack_into(">i", buffer, LAST_OFFSET_DELTA_AT, new_count - 1)
    if draw(st.integers(0, 4)) > 0:
        recompute_crc(buffer)
    return bytes(buffer)


@st.composite
def hostile(draw: st.DrawFn) -> bytes:
    """Random bytes, or valid batches bit-flipped, truncated, spliced or given a random length."""
    kind = draw(
        st.sampled_from(["random", "flip", "truncate", "splice", "length", "field", "header"])
    )
    if kind == "random":
        return draw(st.binary(max_size=400))
    data, _ = draw(batches())
    if kind == "flip":
        buffer = bytearray(data)
        for at in draw(st.lists(st.integers(0, len(data) - 1), min_size=1, max_size=4)):
            buffer[at] ^= 1 << draw(st.integers(0, 7))
        return bytes(buffer)
    if kind == "truncate":
        return data[: draw(st.integers(0, len(data)))]
    if kind == "splice":
        other, _ = draw(batches())
        cut = draw(st.integers(0, len(data)))
        start = draw(st.integers(0, len(other)))
        return data[:cut] + other[start:]
    if kind == "length":
        buffer = bytearray(data)
        struct.pack_into(">i", buffer, LENGTH_AT, draw(INT32 | st.integers(0, len(data) + 20)))
        return bytes(buffer) + draw(st.binary(max_size=30))
    if kind == "header":
        return draw(header_mutation(data))
    # kind == "field": overwrite any 1 to 8 header bytes after the CRC, with a matching CRC
    buffer = bytearray(data)
    at = draw(st.integers(21, 60))
    width = draw(st.integers(1, 8))
    buffer[at : at + width] = draw(st.binary(min_size=width, max_size=width))
    del buffer[len(data) :]
    return bytes(recompute_crc(buffer))


def kafka_rules(data: bytes, max_message_bytes: int) -> ErrorCode:
    """The spec's client checks in Kafka's order, read from kafka-python's decoding of one batch."""
    kb = oracle(data)
    if kb.size_in_bytes > max_message_bytes:
        return ErrorCode.MESSAGE_TOO_LARGE
    if not kb.validate_crc():
        return ErrorCode.CORRUPT_MESSAGE
    if kb.base_offset != 0 or kb.records_count <= 0:
        return ErrorCode.INVALID_RECORD
    if kb.last_offset_delta + 1 != kb.records_count or kb.is_control_batch:
        return ErrorCode.INVALID_RECORD
    if kb.compression_type > 4:
        return ErrorCode.UNSUPPORTED_COMPRESSION_TYPE
    if kb.timestamp_type == 1:
        return ErrorCode.INVALID_TIMESTAMP
    if kb.has_producer_id() and kb.base_sequence < 0:
        return ErrorCode.INVALID_RECORD
    if kb.is_transactional and not kb.has_producer_id():
        return ErrorCode.INVALID_RECORD
    return ErrorCode.NONE


def check_hostile(data: bytes, max_message_bytes: int) -> None:
    split = split_batches(data)
    if isinstance(split, InvalidBatch):
        assert isinstance(split.error, ErrorCode)
    else:
        assert sum(h.size for h in split) == len(data)
        for header in split:
            header.crc_valid()
            assert -(2**31) <= header.last_sequence < 2**31
            assert (
                bytes(header.bytes_view()) == data[header.position : header.position + header.size]
            )

    result = parse_produce_payload(data, max_message_bytes)
    error = result.error if isinstance(result, InvalidBatch) else ErrorCode.NONE
    event(error.name)
    if isinstance(split, list) and len(split) == 1:
        assert error == kafka_rules(data, max_message_bytes)
    if isinstance(result, InvalidBatch):
        assert isinstance(result.error, ErrorCode)
        assert result.error != ErrorCode.NONE
        return
    # Accepted: kafka-python must agree that this is one sound v2 batch a client may send.
    assert isinstance(result, BatchHeader)
    assert result.size == len(data) <= max_message_bytes
    kb = oracle(data)
    assert kb.validate_crc()
    assert_header_matches(result, data)
    assert kb.base_offset == 0
    assert kb.records_count == kb.last_offset_delta + 1 > 0
    assert not kb.is_control_batch and kb.timestamp_type == 0
    assert kb.compression_type <= 4
    assert not kb.has_producer_id() or kb.base_sequence >= 0


@FUZZ_FAST
@given(hostile(), st.integers(0, 2_000_000) | st.integers(0, 20_000))
def test_fuzz_never_raises(data: bytes, max_message_bytes: int) -> None:
    check_hostile(data, max_message_bytes)


@pytest.mark.slow
@FUZZ_DEEP
@given(hostile(), st.integers(0, 2_000_000) | st.integers(0, 20_000))
def test_fuzz_never_raises_deep(data: bytes, max_message_bytes: int) -> None:
    check_hostile(data, max_message_bytes)


VIOLATIONS = (
    "size",
    "crc",
    "base_offset",
    "count",
    "delta",
    "control",
    "compression",
    "log_append_time",
    "no_sequence",
    "transactional_without_producer",
)


def test_every_combination_of_violations_reports_the_first_in_kafkas_order() -> None:
    """All 2^10 combinations of the client rules' violations, judged against `kafka_rules`."""
    base = build_batch(
        [(1_000 + i, b"k", b"v" * 20, []) for i in range(3)],
        producer_id=1,
        producer_epoch=0,
        base_sequence=0,
    )
    seen = set()
    for mask in range(2 ** len(VIOLATIONS)):
        chosen = {name for i, name in enumerate(VIOLATIONS) if mask >> i & 1}
        buffer = bytearray(base)
        (attributes,) = struct.unpack_from(">h", buffer, ATTRIBUTES_AT)
        if "base_offset" in chosen:
            struct.pack_into(">q", buffer, BASE_OFFSET_AT, 1)
        if "count" in chosen:
            struct.pack_into(">i", buffer, RECORDS_COUNT_AT, 0)
            struct.pack_into(">i", buffer, LAST_OFFSET_DELTA_AT, -1)
        if "delta" in chosen:
            struct.pack_into(">i", buffer, LAST_OFFSET_DELTA_AT, 7)
        if "control" in chosen:
            attributes |= 0x20
        if "compression" in chosen:
            attributes |= 6
        if "log_append_time" in chosen:
            attributes |= 0x08
        if "no_sequence" in chosen:
            struct.pack_into(">i", buffer, BASE_SEQUENCE_AT, -1)
        if "transactional_without_producer" in chosen:
            attributes |= 0x10
            struct.pack_into(">q", buffer, PRODUCER_ID_AT, -1)
        struct.pack_into(">h", buffer, ATTRIBUTES_AT, attributes)
        recompute_crc(buffer)
        if "crc" in chosen:
            buffer[-1] ^= 0x10
        data = bytes(buffer)
        max_message_bytes = len(data) - 1 if "size" in chosen else len(data)
        result = parse_produce_payload(data, max_message_bytes)
        error = result.error if isinstance(result, InvalidBatch) else ErrorCode.NONE
        expected = kafka_rules(data, max_message_bytes)
        assert error == expected, sorted(chosen)
        assert (expected == ErrorCode.NONE) == (not chosen)
        seen.add(expected)
    assert len(seen) == 6  # NONE and all five error codes were reached
