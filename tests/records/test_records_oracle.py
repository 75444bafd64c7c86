"""Unit tests of `diskless.records` against kafka-python's record codec as the oracle."""

from __future__ import annotations

import ctypes
import struct

import pytest
from kafka.record import MemoryRecords
from kafka.record.default_records import ControlRecord
from kafka.record.legacy_records import LegacyRecordBatchBuilder

from diskless._types import ControlType, ErrorCode, TimestampType
from diskless.records import (
    BatchHeader,
    InvalidBatch,
    build_control_batch,
    parse_batch,
    parse_produce_payload,
    set_base_offset,
    set_log_append_time,
    split_batches,
)
from testkit.batches import batch_builder
from testkit.oracle import (
    ATTRIBUTES_AT,
    BASE_OFFSET_AT,
    BASE_SEQUENCE_AT,
    CODECS,
    CRC_AT,
    LAST_OFFSET_DELTA_AT,
    LEADER_EPOCH_AT,
    LENGTH_AT,
    MAGIC_AT,
    MAX_TIMESTAMP_AT,
    RECORDS_COUNT_AT,
    Record,
    assert_header_matches,
    attributes_of,
    build_batch,
    oracle,
    patch,
    recompute_crc,
    simple_records,
)

MAX_MESSAGE_BYTES = 1048588
SEQUENCE_MAX = 2**31 - 1


def parse_ok(data: bytes | bytearray) -> BatchHeader:
    parsed = parse_batch(data)
    assert isinstance(parsed, BatchHeader), parsed
    return parsed


def codec(name: str) -> int:
    value, available = CODECS[name]
    if not available():
        pytest.skip(f"kafka-python has no {name} library installed here")
    return int(value)


# --- parsing: every header field equals kafka-python's -----------------------------------------

PRODUCERS = {
    "plain": {"producer_id": -1, "producer_epoch": -1, "base_sequence": -1},
    "idempotent": {"producer_id": 4242, "producer_epoch": 7, "base_sequence": 0},
    "transactional": {
        "producer_id": 2**40 + 3,
        "producer_epoch": 32767,
        "base_sequence": 1000,
        "transactional": True,
    },
}


@pytest.mark.parametrize("compression", list(CODECS))
@pytest.mark.parametrize("producer", list(PRODUCERS))
@pytest.mark.parametrize("count", [1, 2, 17, 300])
def test_parse_matches_kafka_python(compression: str, producer: str, count: int) -> None:
    data = build_batch(simple_records(count), compression=codec(compression), **PRODUCERS[producer])
    header = parse_ok(data)
    assert_header_matches(header, data)
    assert header.crc_valid()
    assert parse_produce_payload(data, MAX_MESSAGE_BYTES) is not None
    assert isinstance(parse_produce_payload(data, MAX_MESSAGE_BYTES), BatchHeader)
    if compression != "none" and count > 2:
        assert header.compression == CODECS[compression][0]  # really compressed


def test_compressed_batch_is_compressed() -> None:
    """Guard the gzip cases above: kafka-python falls back to none when it does not pay off."""
    data = build_batch(simple_records(300), compression=codec("gzip"))
    assert attributes_of(data) & 0x07 == 1
    assert parse_ok(data).compression == 1


def test_timestamps_out_of_order_and_negative() -> None:
    records: list[Record] = [
        (5_000, b"a", b"1", []),
        (9_000, None, b"2", [("h", b"v")]),
        (1_000, b"c", None, [("h1", None), ("h2", b"")]),
        (-1, b"", b"", []),
    ]
    data = build_batch(records)
    header = parse_ok(data)
    assert_header_matches(header, data)
    assert (header.base_timestamp, header.max_timestamp) == (5_000, 9_000)


@pytest.mark.parametrize(
    ("base_sequence", "count"),
    [
        (SEQUENCE_MAX, 1),
        (SEQUENCE_MAX, 2),
        (SEQUENCE_MAX - 4, 5),
        (SEQUENCE_MAX - 4, 6),
        (SEQUENCE_MAX - 4, 100),
        (0, 100),
    ],
)
def test_last_sequence_wraps_like_kafka(base_sequence: int, count: int) -> None:
    data = build_batch(
        simple_records(count), producer_id=9, producer_epoch=0, base_sequence=base_sequence
    )
    header = parse_ok(data)
    assert_header_matches(header, data)
    # Independently: the sequence of record i is (base + i) wrapped into [0, 2^31).
    assert header.last_sequence == (base_sequence + count - 1) % 2**31
    assert 0 <= header.last_sequence <= SEQUENCE_MAX


@pytest.mark.parametrize("base_sequence", [-1, -5, -(2**31)])
def test_last_sequence_of_negative_base_sequence(base_sequence: int) -> None:
    """Kafka adds without wrapping when the base is negative; -1 stays -1 (no sequence)."""
    data = build_batch(simple_records(3), base_sequence=base_sequence)
    assert_header_matches(parse_ok(data), data)


def test_partition_leader_epoch_is_read_and_outside_the_crc() -> None:
    data = patch(build_batch(simple_records(3)), ">i", LEADER_EPOCH_AT, 77, fix_crc=False)
    header = parse_ok(data)
    assert_header_matches(header, data)
    assert header.partition_leader_epoch == 77
    assert header.crc_valid()


def test_split_batches_frames_a_record_set_at_offsets() -> None:
    first = patch(build_batch(simple_records(3)), ">q", BASE_OFFSET_AT, 100, fix_crc=False)
    second = patch(
        build_batch(simple_records(40), compression=codec("gzip")),
        ">q",
        BASE_OFFSET_AT,
        103,
        fix_crc=False,
    )
    record_set = first + second
    headers = split_batches(record_set)
    assert isinstance(headers, list)
    assert [h.position for h in headers] == [0, len(first)]
    expected = []
    records = MemoryRecords(record_set)
    while records.has_next():
        expected.append(records.next_batch())
    assert len(headers) == len(expected) == 2
    for header, kb, raw in zip(headers, expected, [first, second], strict=True):
        assert (header.base_offset, header.size) == (kb.base_offset, kb.size_in_bytes)
        assert_header_matches(header, raw)
        assert header.crc_valid()


def test_parse_accepts_memoryview_at_position() -> None:
    data = build_batch(simple_records(2))
    buffer = memoryview(b"\xff" * 9 + data + b"\xee" * 3)
    header = parse_batch(buffer, 9)
    assert isinstance(header, BatchHeader)
    assert header.position == 9
    assert bytes(header.bytes_view()) == data
    assert header.crc_valid()


# --- rewrites decode in kafka-python -------------------------------------------------------------


@pytest.mark.parametrize("compression", ["none", "gzip"])
@pytest.mark.parametrize("base_offset", [0, 1, 12345, 2**40, 2**63 - 1000])
def test_set_base_offset_keeps_crc(compression: str, base_offset: int) -> None:
    original = build_batch(simple_records(50), compression=codec(compression))
    batch = bytearray(original)
    set_base_offset(batch, base_offset)
    assert batch[CRC_AT : CRC_AT + 4] == original[CRC_AT : CRC_AT + 4]
    assert batch[8:] == original[8:]
    kb = oracle(bytes(batch))
    assert kb.validate_crc()
    assert kb.base_offset == base_offset
    assert [r.offset for r in kb] == [base_offset + i for i in range(50)]
    assert_header_matches(parse_ok(batch), bytes(batch))


def test_set_base_offset_at_position_in_a_larger_buffer() -> None:
    data = build_batch(simple_records(4))
    buffer = bytearray(b"\x00" * 5 + data + b"\x00" * 5)
    set_base_offset(memoryview(buffer), 900, position=5)
    assert buffer[:5] == b"\x00" * 5 and buffer[-5:] == b"\x00" * 5
    kb = oracle(bytes(buffer[5:-5]))
    assert kb.validate_crc()
    assert [r.offset for r in kb] == [900, 901, 902, 903]


@pytest.mark.parametrize("compression", ["none", "gzip"])
@pytest.mark.parametrize("transactional", [False, True])
def test_set_log_append_time(compression: str, transactional: bool) -> None:
    records = [(1_000 + (i * 7919) % 500, b"k", b"v" * i, []) for i in range(60)]
    producer = {"producer_id": 3, "producer_epoch": 1, "base_sequence": 10} if transactional else {}
    original = build_batch(
        records, compression=codec(compression), transactional=transactional, **producer
    )
    append_time = 1_800_000_000_123
    batch = bytearray(original)
    set_base_offset(batch, 500)
    set_log_append_time(batch, append_time)

    kb = oracle(bytes(batch))
    assert kb.validate_crc()
    assert kb.timestamp_type == 1
    assert kb.max_timestamp == append_time
    assert kb.first_timestamp == original_first_timestamp(original)
    assert kb.compression_type == oracle(original).compression_type
    assert kb.is_transactional == transactional
    decoded = list(kb)
    assert [r.offset for r in decoded] == list(range(500, 560))
    assert all(r.timestamp == append_time for r in decoded)
    assert all(r.timestamp_type == 1 for r in decoded)
    assert [r.value for r in decoded] == [v for _, _, v, _ in records]

    header = parse_ok(batch)
    assert_header_matches(header, bytes(batch))
    assert header.timestamp_type == TimestampType.LOG_APPEND_TIME
    assert header.crc_valid()


def original_first_timestamp(data: bytes) -> int:
    return int(oracle(data).first_timestamp)


def test_set_log_append_time_at_position() -> None:
    data = build_batch(simple_records(3))
    buffer = bytearray(b"\x01" * 7 + data + b"\x02" * 7)
    set_log_append_time(buffer, 42, position=7)
    assert buffer[:7] == b"\x01" * 7 and buffer[-7:] == b"\x02" * 7
    kb = oracle(bytes(buffer[7:-7]))
    assert kb.validate_crc()
    assert [r.timestamp for r in kb] == [42, 42, 42]


# --- control batches -----------------------------------------------------------------------------


def expected_marker(
    *,
    base_offset: int,
    producer_id: int,
    producer_epoch: int,
    control_type: int,
    coordinator_epoch: int,
    timestamp: int,
    partition_leader_epoch: int,
) -> bytes:
    """The marker Kafka writes, built by kafka-python: a transactional batch of one record with
    key (version 0, type) and value (version 0, coordinator epoch), then the control bit, the
    broker-assigned base offset and leader epoch patched in, and the CRC recomputed."""
    builder = batch_builder(
        transactional=True, producer_id=producer_id, producer_epoch=producer_epoch, batch_size=1024
    )
    key = struct.pack(">hh", 0, control_type)
    value = struct.pack(">hi", 0, coordinator_epoch)
    assert builder.append(0, timestamp, key, value, []) is not None
    batch = bytearray(builder.build())
    struct.pack_into(">q", batch, BASE_OFFSET_AT, base_offset)
    struct.pack_into(">i", batch, LEADER_EPOCH_AT, partition_leader_epoch)
    struct.pack_into(">h", batch, ATTRIBUTES_AT, attributes_of(bytes(batch)) | 0x20)
    return bytes(recompute_crc(batch))


@pytest.mark.parametrize("control_type", [ControlType.COMMIT, ControlType.ABORT])
@pytest.mark.parametrize(
    ("producer_id", "producer_epoch", "coordinator_epoch", "leader_epoch"),
    [(0, 0, 0, -1), (77, 3, 12, 5), (2**62, 32767, 2**31 - 1, 2**31 - 1), (5, 1, -1, 0)],
)
def test_control_batch(
    control_type: ControlType,
    producer_id: int,
    producer_epoch: int,
    coordinator_epoch: int,
    leader_epoch: int,
) -> None:
    base_offset, timestamp = 987_654, 1_700_000_000_555
    marker = build_control_batch(
        base_offset=base_offset,
        producer_id=producer_id,
        producer_epoch=producer_epoch,
        control_type=control_type,
        coordinator_epoch=coordinator_epoch,
        timestamp=timestamp,
        partition_leader_epoch=leader_epoch,
    )
    kb = oracle(marker)
    assert kb.validate_crc()
    assert kb.is_control_batch and kb.is_transactional
    assert kb.compression_type == 0 and kb.timestamp_type == 0
    assert (kb.producer_id, kb.producer_epoch) == (producer_id, producer_epoch)
    assert (kb.base_offset, kb.last_offset_delta, kb.records_count) == (base_offset, 0, 1)
    assert (kb.first_timestamp, kb.max_timestamp) == (timestamp, timestamp)
    assert kb.base_sequence == -1
    assert kb.leader_epoch == leader_epoch
    (record,) = list(kb)
    assert isinstance(record, ControlRecord)
    assert record.version == 0
    assert record.type == int(control_type)
    assert record.commit == (control_type == ControlType.COMMIT)
    assert record.abort == (control_type == ControlType.ABORT)
    assert record.offset == base_offset
    assert record.timestamp == timestamp
    assert record.headers == []
    assert struct.unpack(">hi", record.value) == (0, coordinator_epoch)

    assert marker == expected_marker(
        base_offset=base_offset,
        producer_id=producer_id,
        producer_epoch=producer_epoch,
        control_type=int(control_type),
        coordinator_epoch=coordinator_epoch,
        timestamp=timestamp,
        partition_leader_epoch=leader_epoch,
    )
    header = parse_ok(marker)
    assert_header_matches(header, marker)
    assert header.is_control and header.crc_valid()


def test_control_batch_default_leader_epoch_is_unknown() -> None:
    marker = build_control_batch(
        base_offset=0,
        producer_id=1,
        producer_epoch=0,
        control_type=ControlType.COMMIT,
        coordinator_epoch=0,
        timestamp=0,
    )
    assert oracle(marker).leader_epoch == -1


# --- client validation ---------------------------------------------------------------------------


def rejected(data: bytes, max_message_bytes: int = MAX_MESSAGE_BYTES) -> ErrorCode:
    result = parse_produce_payload(data, max_message_bytes)
    assert isinstance(result, InvalidBatch), result
    assert isinstance(result.error, ErrorCode)
    assert result.message
    return result.error


def valid_batch(count: int = 5) -> bytes:
    return build_batch(simple_records(count), producer_id=1, producer_epoch=0, base_sequence=0)


def test_valid_batch_is_accepted() -> None:
    data = valid_batch()
    result = parse_produce_payload(data, MAX_MESSAGE_BYTES)
    assert isinstance(result, BatchHeader)
    assert_header_matches(result, data)


@pytest.mark.parametrize("cut", [1, 20, 100])
def test_truncated(cut: int) -> None:
    data = valid_batch()
    assert rejected(data[:-cut]) == ErrorCode.CORRUPT_MESSAGE


@pytest.mark.parametrize("size", [0, 5, 11, 12, 16])
def test_too_short_for_framing(size: int) -> None:
    data = valid_batch()[:size]
    if size == 0:
        assert rejected(data) == ErrorCode.INVALID_RECORD  # no batch at all
    else:
        assert rejected(data) == ErrorCode.CORRUPT_MESSAGE


@pytest.mark.parametrize("length", [-1, 0, 13, -(2**31)])
def test_length_below_minimum(length: int) -> None:
    data = patch(valid_batch(), ">i", LENGTH_AT, length, fix_crc=False)
    assert rejected(data) == ErrorCode.CORRUPT_MESSAGE


@pytest.mark.parametrize("length", [14, 30, 48])
def test_length_below_v2_header(length: int) -> None:
    data = patch(valid_batch(), ">i", LENGTH_AT, length, fix_crc=False)
    assert rejected(data) == ErrorCode.CORRUPT_MESSAGE


def test_magic_1_batch_from_legacy_builder() -> None:
    builder = LegacyRecordBatchBuilder(magic=1, compression_type=0, batch_size=1 << 20)
    for i in range(3):
        builder.append(i, timestamp=1_000 + i, key=b"k", value=b"v" * 30)
    data = bytes(builder.build())
    assert data[MAGIC_AT] == 1
    assert rejected(data) == ErrorCode.CORRUPT_MESSAGE
    assert isinstance(split_batches(data), InvalidBatch)


@pytest.mark.parametrize("magic", [0, 1, 3, -1])
def test_magic_not_2(magic: int) -> None:
    data = patch(valid_batch(), ">b", MAGIC_AT, magic, fix_crc=False)
    assert rejected(data) == ErrorCode.CORRUPT_MESSAGE


@pytest.mark.parametrize("where", ["last byte", "first record byte", "producer id"])
def test_crc_mismatch(where: str) -> None:
    data = bytearray(valid_batch())
    at = {"last byte": len(data) - 1, "first record byte": 61, "producer id": 45}[where]
    data[at] ^= 0x01
    assert not oracle(bytes(data)).validate_crc()
    assert rejected(bytes(data)) == ErrorCode.CORRUPT_MESSAGE


def test_crc_mismatch_in_crc_field() -> None:
    data = bytearray(valid_batch())
    data[CRC_AT] ^= 0x80
    assert rejected(bytes(data)) == ErrorCode.CORRUPT_MESSAGE


@pytest.mark.parametrize("base_offset", [1, 42, -1])
def test_base_offset_not_zero(base_offset: int) -> None:
    data = patch(valid_batch(), ">q", BASE_OFFSET_AT, base_offset, fix_crc=False)
    assert oracle(data).validate_crc()
    assert rejected(data) == ErrorCode.INVALID_RECORD


@pytest.mark.parametrize("count", [0, -1])
def test_records_count_not_positive(count: int) -> None:
    data = patch(valid_batch(1), ">i", RECORDS_COUNT_AT, count)
    data = patch(data, ">i", LAST_OFFSET_DELTA_AT, count - 1)
    assert oracle(data).validate_crc()
    assert rejected(data) == ErrorCode.INVALID_RECORD


@pytest.mark.parametrize("delta", [0, 3, 5, 100, -1])
def test_last_offset_delta_does_not_match_count(delta: int) -> None:
    data = patch(valid_batch(5), ">i", LAST_OFFSET_DELTA_AT, delta)
    assert oracle(data).validate_crc()
    assert rejected(data) == ErrorCode.INVALID_RECORD


def test_control_batch_from_client() -> None:
    data = valid_batch()
    data = patch(data, ">h", ATTRIBUTES_AT, attributes_of(data) | 0x20)
    assert oracle(data).validate_crc() and oracle(data).is_control_batch
    assert rejected(data) == ErrorCode.INVALID_RECORD


def test_marker_from_client() -> None:
    marker = build_control_batch(
        base_offset=0,
        producer_id=1,
        producer_epoch=0,
        control_type=ControlType.ABORT,
        coordinator_epoch=0,
        timestamp=1,
    )
    assert rejected(marker) == ErrorCode.INVALID_RECORD


@pytest.mark.parametrize("base_sequence", [-1, -2, -(2**31)])
def test_producer_id_without_sequence(base_sequence: int) -> None:
    data = build_batch(
        simple_records(3), producer_id=8, producer_epoch=0, base_sequence=base_sequence
    )
    assert oracle(data).validate_crc()
    assert rejected(data) == ErrorCode.INVALID_RECORD


def test_no_producer_id_without_sequence_is_fine() -> None:
    data = build_batch(simple_records(3))
    assert isinstance(parse_produce_payload(data, MAX_MESSAGE_BYTES), BatchHeader)


def test_transactional_without_producer_id() -> None:
    data = build_batch(simple_records(3), transactional=True)
    assert oracle(data).is_transactional and not oracle(data).has_producer_id()
    assert rejected(data) == ErrorCode.INVALID_RECORD


def test_message_too_large_boundary() -> None:
    data = valid_batch(20)
    assert isinstance(parse_produce_payload(data, len(data)), BatchHeader)
    assert rejected(data, len(data) - 1) == ErrorCode.MESSAGE_TOO_LARGE


def test_message_too_large_is_checked_before_crc() -> None:
    data = bytearray(valid_batch(20))
    data[-1] ^= 0xFF
    assert rejected(bytes(data), len(data)) == ErrorCode.CORRUPT_MESSAGE
    assert rejected(bytes(data), len(data) - 1) == ErrorCode.MESSAGE_TOO_LARGE


def test_log_append_time_set_by_producer() -> None:
    data = valid_batch()
    data = patch(data, ">h", ATTRIBUTES_AT, attributes_of(data) | 0x08)
    assert oracle(data).validate_crc() and oracle(data).timestamp_type == 1
    assert rejected(data) == ErrorCode.INVALID_TIMESTAMP


def test_log_append_time_batch_from_our_rewrite_is_refused_from_a_client() -> None:
    batch = bytearray(valid_batch())
    set_log_append_time(batch, 5)
    assert rejected(bytes(batch)) == ErrorCode.INVALID_TIMESTAMP


@pytest.mark.parametrize("compression", [5, 6, 7])
def test_unknown_compression_codec(compression: int) -> None:
    data = valid_batch()
    data = patch(data, ">h", ATTRIBUTES_AT, (attributes_of(data) & ~0x07) | compression)
    assert oracle(data).validate_crc() and oracle(data).compression_type == compression
    assert rejected(data) == ErrorCode.UNSUPPORTED_COMPRESSION_TYPE


@pytest.mark.parametrize("compression", [1, 2, 3, 4])
def test_known_compression_codecs_are_stored_opaquely(compression: int) -> None:
    """The broker does not decompress: any of the five codecs' ids is accepted as stored."""
    data = valid_batch()
    data = patch(data, ">h", ATTRIBUTES_AT, attributes_of(data) | compression)
    assert isinstance(parse_produce_payload(data, MAX_MESSAGE_BYTES), BatchHeader)


def test_two_batches_in_one_payload() -> None:
    data = valid_batch(2) + build_batch(simple_records(3))
    assert isinstance(split_batches(data), list)
    assert rejected(data) == ErrorCode.INVALID_RECORD


def test_empty_payload() -> None:
    assert split_batches(b"") == []
    assert rejected(b"") == ErrorCode.INVALID_RECORD


def test_trailing_garbage_after_one_batch() -> None:
    data = valid_batch() + b"\x00" * 5
    assert rejected(data) == ErrorCode.CORRUPT_MESSAGE


def test_max_timestamp_outside_records_invalidates_crc_only() -> None:
    """A header patch without a new CRC is caught by the CRC, proving the patch helper matters."""
    data = patch(valid_batch(), ">q", MAX_TIMESTAMP_AT, 1, fix_crc=False)
    assert rejected(data) == ErrorCode.CORRUPT_MESSAGE
    assert isinstance(
        parse_produce_payload(patch(valid_batch(), ">q", MAX_TIMESTAMP_AT, 1), MAX_MESSAGE_BYTES),
        BatchHeader,
    )


def test_sequence_patch_keeps_other_rules_quiet() -> None:
    data = patch(valid_batch(), ">i", BASE_SEQUENCE_AT, SEQUENCE_MAX)
    result = parse_produce_payload(data, MAX_MESSAGE_BYTES)
    assert isinstance(result, BatchHeader)
    assert result.last_sequence == oracle(data).last_sequence == 3


@pytest.mark.parametrize("fmt", ["c", "b"])
def test_parse_a_memoryview_of_another_byte_format(fmt: str) -> None:
    """A view whose items are not unsigned bytes still frames by bytes (magic read as 2)."""
    data = valid_batch()
    view = memoryview(data).cast(fmt)
    result = parse_produce_payload(view, MAX_MESSAGE_BYTES)
    assert isinstance(result, BatchHeader), result
    assert_header_matches(result, data)
    assert isinstance(split_batches(view), list)


def test_negative_position_is_refused() -> None:
    data = valid_batch()
    result = parse_batch(data + data, -len(data))
    assert isinstance(result, InvalidBatch)
    assert result.error == ErrorCode.CORRUPT_MESSAGE


def java_increment_sequence(base: int, increment: int) -> int:
    """Kafka's `DefaultRecordBatch.incrementSequence`, evaluated in 32-bit ints via ctypes."""
    i32 = ctypes.c_int32
    if base > i32(SEQUENCE_MAX - increment).value:
        return i32(i32(increment - i32(SEQUENCE_MAX - base).value).value - 1).value
    return i32(base + increment).value


@pytest.mark.parametrize(
    ("base_sequence", "delta"),
    [(-2, -(2**31)), (5, 2**31 - 1), (2**31 - 1, 2**31 - 1), (-(2**31), -1), (100, -200)],
)
def test_last_sequence_of_hostile_fields_is_javas_int32(base_sequence: int, delta: int) -> None:
    data = patch(build_batch(simple_records(1)), ">i", BASE_SEQUENCE_AT, base_sequence)
    data = patch(data, ">i", LAST_OFFSET_DELTA_AT, delta)
    header = parse_ok(data)
    assert header.last_sequence == java_increment_sequence(base_sequence, delta)
    assert -(2**31) <= header.last_sequence < 2**31
