"""The C record walk against its Python reference and against kafka-python's decoder.

Records sections built by kafka-python are mutated below the header (bytes flipped or set,
truncated, extended, varints made overlong or out of range, sizes made negative), then walked
with random header fields and timestamp bounds. The C walk (what production runs) and the
Python reference must give the same answer, message included. Whatever they accept,
kafka-python must read: every record, with the timestamps the walk saw; the only exceptions are
the two places where kafka-python is stricter than Kafka and librdkafka (an attributes byte with
its high bit set, which it reads as a varint, and a header key that is not UTF-8).
Hypothesis prints the failing example and a `@reproduce_failure` blob.
"""

from __future__ import annotations

import struct
import warnings

import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from diskless._types import ErrorCode
from diskless.records._cwalk import walk
from testkit.batches import batch_builder
from testkit.mutate import zigzag_varint
from testkit.reference_walk import reference_walk

with warnings.catch_warnings():
    warnings.simplefilter("ignore", DeprecationWarning)
    from kafka.errors import CorruptRecordError
    from kafka.record.default_records import DefaultRecordBatch
    from kafka.record.util import calc_crc32c

SETTINGS = settings(
    max_examples=400,
    deadline=None,
    print_blob=True,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
HEADER_SIZE = 61
NOW = 1_700_000_000_000

small = st.binary(max_size=30)
records_strategy = st.lists(
    st.tuples(
        st.integers(-(2**40), 2**40),
        st.none() | small,
        st.none() | st.binary(max_size=200),
        st.lists(st.tuples(st.text(max_size=6), st.none() | small), max_size=3),
    ),
    min_size=1,
    max_size=30,
)


def _build(
    records: list[tuple[int, bytes | None, bytes | None, list[tuple[str, bytes | None]]]], base: int
) -> tuple[bytes, bytes]:
    """(batch header, uncompressed records section) as kafka-python writes them."""
    builder = batch_builder()
    for offset, (delta, key, value, headers) in enumerate(records):
        timestamp = max(0, base + delta)
        assert builder.append(offset, timestamp, key, value, headers) is not None
    batch = bytes(builder.build())
    return batch[:HEADER_SIZE], batch[HEADER_SIZE:]


@st.composite
def mutated(draw: st.DrawFn) -> bytes:
    """A records section, usually mutated."""
    base = draw(st.integers(0, 2**45))
    _, section = _build(draw(records_strategy), base)
    data = bytearray(section)
    for _ in range(draw(st.integers(0, 3))):
        kind = draw(
            st.sampled_from(["flip", "set", "truncate", "append", "varint", "size", "none"])
        )
        at = draw(st.integers(0, max(len(data) - 1, 0)))
        if kind == "flip" and data:
            data[at] ^= 1 << draw(st.integers(0, 7))
        elif kind == "set" and data:
            data[at] = draw(st.sampled_from([0x00, 0x01, 0x03, 0x7F, 0x80, 0x81, 0xFF]))
        elif kind == "truncate":
            del data[at:]
        elif kind == "append":
            data.extend(draw(st.binary(min_size=1, max_size=8)))
        elif kind == "varint":  # overlong, out of range, or too long encodings
            data[at:at] = draw(
                st.sampled_from(
                    [
                        b"\x80\x00",
                        b"\x80\x80\x80\x80\x00",
                        b"\x80\x80\x80\x80\x80\x00",
                        b"\xff\xff\xff\xff\x1f",
                        b"\xff\xff\xff\xff\x0f",
                        b"\xff" * 9 + b"\x01",
                        b"\xff" * 9 + b"\x03",
                        b"\xff" * 11,
                    ]
                )
            )
        elif kind == "size":
            data[at:at] = zigzag_varint(draw(st.sampled_from([-3, -2, -1, 0, 1, 2**31 - 1])))
    return bytes(data)


def _kafka_python_reads(header: bytes, section: bytes, count: int, base: int) -> list[int]:
    """Every record's timestamp, through kafka-python; raises where it cannot read them."""
    batch = bytearray(header + section)
    struct.pack_into(">i", batch, 8, len(batch) - 12)
    struct.pack_into(">i", batch, 57, count)
    struct.pack_into(">i", batch, 23, count - 1)
    struct.pack_into(">q", batch, 27, base)
    struct.pack_into(">I", batch, 17, calc_crc32c(bytes(batch[21:])))
    parsed = DefaultRecordBatch(bytes(batch))
    return [record.timestamp for record in parsed]


class _Seen:
    """What the reference saw of each well-formed record."""

    def __init__(self) -> None:
        self.deltas: list[int] = []
        self.kafka_python_stricter = False

    def __call__(self, delta: int, attributes: int, header_keys: list[bytes]) -> None:
        self.deltas.append(delta)
        if attributes >= 0x80 or not _utf8(header_keys):
            self.kafka_python_stricter = True


@SETTINGS
@given(
    section=mutated(),
    count_shift=st.sampled_from([0, 0, 0, -1, 1]),
    base=st.integers(-1, 2**45) | st.sampled_from([-(2**63), 2**63 - 1]),
    max_shift=st.sampled_from([0, 0, 1, -1]),
    create_time=st.booleans(),
    before=st.sampled_from([2**63 - 1, 0, 10**6, 10**13]),
    after=st.sampled_from([3_600_000, 0, 2**63 - 1]),
)
def test_c_walk_equals_reference_and_kafka_python_reads_what_it_accepts(
    section: bytes,
    count_shift: int,
    base: int,
    max_shift: int,
    create_time: bool,
    before: int,
    after: int,
) -> None:
    header, _ = _build([(0, None, b"v", [])], 0)
    count = max(1, _count(section) + count_shift)
    seen = _Seen()
    reference_walk(section, 0, len(section), count, base, 0, False, NOW, 0, 0, visit=seen)
    largest = base + max(seen.deltas, default=0) + max_shift
    max_timestamp = max(-(2**63), min(2**63 - 1, largest))
    args = (section, 0, len(section), count, base, max_timestamp, create_time, NOW, before, after)
    answer = walk(*args)
    assert answer == reference_walk(*args)
    if isinstance(answer, tuple):
        event(f"walk: {ErrorCode(answer[0]).name}")
        return
    event("walk: accepted" if answer is None else "walk: accepted, maxTimestamp to fix")
    assert create_time or answer is None  # LogAppendTime: the append time replaces it
    try:
        timestamps = _kafka_python_reads(header, section, count, base)
    except (CorruptRecordError, UnicodeDecodeError, ValueError, IndexError) as error:
        assert seen.kafka_python_stricter, f"accepted, but kafka-python cannot read it: {error!r}"
        event("accepted; kafka-python stricter")
        return
    assert len(timestamps) == count
    if not seen.kafka_python_stricter:
        assert timestamps == [base + delta for delta in seen.deltas]
        if create_time:  # Kafka's maxTimestamp: the largest record timestamp, at least -1
            kafka_max = max(-1, *timestamps)
            assert (max_timestamp if answer is None else answer) == kafka_max


def _utf8(keys: list[bytes]) -> bool:
    try:
        for key in keys:
            key.decode("utf-8")
    except UnicodeDecodeError:
        return False
    return True


def _count(section: bytes) -> int:
    """How many records the section holds, when that is what it holds (else 1)."""
    for count in range(1, 64):
        if reference_walk(section, 0, len(section), count, 0, 0, False, NOW, 0, 0) is None:
            return count
    return 1


@pytest.mark.parametrize(
    ("encoding", "accepted"),
    [
        (b"\x80\x80\x80\x80\x00", True),  # 5 bytes, overlong: Java reads 0
        (b"\x80\x80\x80\x80\x80\x00", False),  # 6 bytes: Java's readVarint throws
        (b"\xff\xff\xff\xff\x0f", True),  # 5 bytes, all 32 bits: -2147483648
        (b"\xff\xff\xff\xff\x1f", False),  # a bit past 32, which Java would drop
    ],
)
def test_varint_length_and_range_rules(encoding: bytes, accepted: bool) -> None:
    """The header count of a one-record section written in each encoding."""
    _, section = _build([(0, None, b"v", [])], 0)
    body = section[1:-1]  # attributes .. value, without the size and the header count
    if encoding == b"\xff\xff\xff\xff\x0f":
        body_with = body + zigzag_varint(0)  # a negative count is refused for its own reason
        encoding_ok = walk(
            zigzag_varint(len(body_with)) + body_with,
            0,
            len(body_with) + 1,
            1,
            0,
            0,
            False,
            NOW,
            0,
            0,
        )
        assert encoding_ok is None
        body_with = body + encoding
    else:
        body_with = body + encoding
    record = zigzag_varint(len(body_with)) + body_with
    args = (record, 0, len(record), 1, 0, 0, False, NOW, 0, 0)
    answer = walk(*args)
    assert answer == reference_walk(*args)
    if encoding == b"\xff\xff\xff\xff\x0f":
        assert answer is not None and "header count -2147483648" in answer[1]
    elif accepted:
        assert answer is None, answer
    else:
        assert answer is not None and answer[0] == ErrorCode.INVALID_RECORD, answer


def test_timestamps_out_of_int64_are_compared_exactly() -> None:
    """base + delta past 2**63 - 1 is no int64: out of any bound, not wrapped into one."""
    delta = 2**62
    body = b"\x00" + zigzag_varint(delta) + b"\x00\x01\x02v\x00"
    record = zigzag_varint(len(body)) + body
    base = 2**63 - 2**61
    answer = walk(record, 0, len(record), 1, base, 0, True, NOW, 2**63 - 1, 2**63 - 1)
    assert answer == reference_walk(
        record, 0, len(record), 1, base, 0, True, NOW, 2**63 - 1, 2**63 - 1
    )
    assert answer is not None and answer[0] == ErrorCode.INVALID_TIMESTAMP, answer
    assert str(base + delta) in answer[1]


@SETTINGS
@given(
    records=records_strategy,
    base=st.integers(0, 2**45),
    claimed=st.sampled_from(["exact", "minus one", "above", "below"]) | st.integers(-(2**63), -2),
    shift=st.integers(1, 2**40),
)
def test_the_max_timestamp_to_write_is_kafka_pythons_largest_timestamp(
    records: list[tuple[int, bytes | None, bytes | None, list[tuple[str, bytes | None]]]],
    base: int,
    claimed: str | int,
    shift: int,
) -> None:
    """Valid sections whose batch claims any maxTimestamp: the C walk and the reference answer
    nothing to do when the claim is Kafka's, and Kafka's otherwise."""
    header, section = _build(records, base)
    parsed = DefaultRecordBatch(header + section)
    timestamps = [record.timestamp for record in parsed]
    kafka_max = max(-1, *timestamps)
    assert parsed.max_timestamp == max(timestamps)  # what kafka-python itself writes
    claims = {"exact": kafka_max, "minus one": -1, "above": kafka_max + shift}
    claims["below"] = kafka_max - shift
    max_timestamp = claims[claimed] if isinstance(claimed, str) else claimed
    first = parsed.first_timestamp
    args = (section, 0, len(section), len(records), first, max_timestamp, True, NOW, 2**63 - 1)
    answer = walk(*args, 2**63 - 1)
    assert answer == reference_walk(*args, 2**63 - 1)
    assert answer == (None if max_timestamp == kafka_max else kafka_max)
    event("nothing to do" if answer is None else "maxTimestamp to fix")


@pytest.mark.parametrize(
    ("base", "deltas", "max_timestamp", "expected"),
    [
        (NOW, [0, 7, 3], NOW + 7, None),  # already right: nothing to do
        (NOW, [0, 7, 3], -1, NOW + 7),  # older clients (Sarama) send -1
        (NOW, [0, 7, 3], NOW + 100, NOW + 7),  # larger than any record: lowered, as Kafka does
        (NOW, [0, 7, 3], NOW, NOW + 7),
        (-9, [0, 4], -5, -1),  # every record before the epoch: Kafka's maximum starts at -1
        (-9, [0, 4], -1, None),
    ],
)
def test_the_walk_answers_the_max_timestamp_kafka_writes(
    base: int, deltas: list[int], max_timestamp: int, expected: int | None
) -> None:
    section = b"".join(_record(index, delta) for index, delta in enumerate(deltas))
    for create_time in (True, False):
        args = (section, 0, len(section), len(deltas), base, max_timestamp, create_time)
        bounds = (NOW, 2**63 - 1, 2**63 - 1)
        answer = walk(*args, *bounds)
        assert answer == reference_walk(*args, *bounds)
        assert answer == (expected if create_time else None)


def test_a_largest_timestamp_past_int64_cannot_be_written() -> None:
    """Within bounds that allow it, but no int64 can carry it as the batch's maxTimestamp."""
    base = 2**63 - 1
    section = _record(0, 0) + _record(1, 1000)
    args = (section, 0, len(section), 2, base, -1, True, NOW, 2**63 - 1, 2**63 - 1)
    answer = walk(*args)
    assert answer == reference_walk(*args)
    assert isinstance(answer, tuple) and answer[0] == ErrorCode.INVALID_RECORD, answer
    assert str(base + 1000) in answer[1]


def _record(index: int, delta: int) -> bytes:
    body = b"\x00" + zigzag_varint(delta) + zigzag_varint(index) + b"\x01" + b"\x02v" + b"\x00"
    return zigzag_varint(len(body)) + body
