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
from tests.records._oracle import (
    CRC_AT,
    LENGTH_AT,
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
FUZZ_FAST = settings(FAST, max_examples=600)
FUZZ_DEEP = settings(FAST, max_examples=20_000)

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
def hostile(draw: st.DrawFn) -> bytes:
    """Random bytes, or valid batches bit-flipped, truncated, spliced or given a random length."""
    kind = draw(st.sampled_from(["random", "flip", "truncate", "splice", "length", "field"]))
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
    # kind == "field": overwrite any 1 to 8 header bytes after the CRC, with a matching CRC
    buffer = bytearray(data)
    at = draw(st.integers(21, 60))
    width = draw(st.integers(1, 8))
    buffer[at : at + width] = draw(st.binary(min_size=width, max_size=width))
    del buffer[len(data) :]
    return bytes(recompute_crc(buffer))


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
    event(result.error.name if isinstance(result, InvalidBatch) else "accepted")
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
@given(hostile(), st.integers(0, 2_000_000))
def test_fuzz_never_raises(data: bytes, max_message_bytes: int) -> None:
    check_hostile(data, max_message_bytes)


@pytest.mark.slow
@FUZZ_DEEP
@given(hostile(), st.integers(0, 2_000_000))
def test_fuzz_never_raises_deep(data: bytes, max_message_bytes: int) -> None:
    check_hostile(data, max_message_bytes)
