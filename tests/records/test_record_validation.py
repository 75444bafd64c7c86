"""Record-level validation (`validate_records` via `parse_produce_payload`): the probe's cases."""

from __future__ import annotations

import struct
import zlib

import pytest

from diskless._types import ErrorCode, TimestampType
from diskless.records import (
    BatchHeader,
    InvalidBatch,
    RecordRules,
    decompressed_bytes_max,
    parse_produce_payload,
)
from testkit.mutate import (
    CODEC_NAMES,
    CODECS,
    build,
    decode,
    records_of,
    with_crc,
    with_length,
    with_records,
    zigzag_varint,
)

NOW = 1_700_000_000_000
MAX = 1_048_588


def _check(batch: bytes, rules: RecordRules | None = None) -> BatchHeader | InvalidBatch:
    return parse_produce_payload(batch, MAX, rules or RecordRules(NOW))


@pytest.mark.parametrize("codec", CODECS, ids=CODEC_NAMES.get)
def test_every_codec_with_headers_is_accepted(codec: int) -> None:
    batch = build(NOW, codec, 40, headers=True)
    assert isinstance(_check(batch), BatchHeader)
    assert len(decode(batch)) == 40


@pytest.mark.parametrize("codec", CODECS, ids=CODEC_NAMES.get)
def test_a_header_lying_about_the_count_is_refused(codec: int) -> None:
    batch = bytearray(build(NOW, codec, 3))
    struct.pack_into(">i", batch, 57, 5)  # records count
    struct.pack_into(">i", batch, 23, 4)  # last offset delta
    result = _check(with_crc(batch))
    assert isinstance(result, InvalidBatch) and result.error == ErrorCode.INVALID_RECORD, result


def test_leftover_bytes_after_the_records_are_refused() -> None:
    batch = build(NOW, 0, 3)
    result = _check(with_records(batch, records_of(batch) + b"\x00"))
    assert isinstance(result, InvalidBatch) and result.error == ErrorCode.INVALID_RECORD


@pytest.mark.parametrize("codec", [1, 2, 3, 4], ids=CODEC_NAMES.get)
def test_a_garbage_compressed_body_is_corrupt(codec: int) -> None:
    batch = build(NOW, codec, 3)
    garbage = with_crc(with_length(batch[:61] + b"\x1f\x8b\x08\x00garbage-not-a-stream" * 4))
    result = _check(garbage)
    assert isinstance(result, InvalidBatch) and result.error == ErrorCode.CORRUPT_MESSAGE, result


@pytest.mark.parametrize("codec", [1, 3, 4], ids=CODEC_NAMES.get)
def test_a_truncated_compressed_body_is_refused(codec: int) -> None:
    batch = build(NOW, codec, 30)
    result = _check(with_crc(with_length(batch[:-6])))
    assert isinstance(result, InvalidBatch)
    assert result.error in (ErrorCode.CORRUPT_MESSAGE, ErrorCode.INVALID_RECORD), result


@pytest.mark.parametrize("codec", [1, 3, 4], ids=CODEC_NAMES.get)
def test_a_decompression_bomb_is_refused(codec: int) -> None:
    """One record whose value is all zeros, expanding past the bound for a 100 KiB topic."""
    from testkit.mutate import compress

    limit = decompressed_bytes_max(100 * 1024)
    value = bytes(limit + 1)
    record = b"\x00\x00\x00\x01" + zigzag_varint(len(value)) + value + b"\x00"
    record = zigzag_varint(len(record)) + record
    batch = build(NOW, codec, 1)
    body = compress(codec, record)
    assert len(body) < 100 * 1024 // 2  # a small batch...
    bomb = with_crc(with_length(batch[:61] + body))
    result = parse_produce_payload(bomb, 100 * 1024, RecordRules(NOW))
    assert isinstance(result, InvalidBatch), result  # ...that must not expand in memory
    assert result.error == ErrorCode.MESSAGE_TOO_LARGE, result


def test_a_snappy_block_declaring_a_huge_length_is_refused_before_decompressing() -> None:
    """Snappy expands at most ~21x, so its bomb is a lying length preamble."""
    batch = build(NOW, 2, 3)
    forged = b"\x82SNAPPY\x00" + bytes([0, 0, 0, 1, 0, 0, 0, 1]) + struct.pack(">i", 6)
    forged += b"\xff\xff\xff\xff\x0f\x00"  # a raw block claiming 4 GiB
    result = _check(with_crc(with_length(batch[:61] + forged)))
    assert isinstance(result, InvalidBatch) and result.error == ErrorCode.MESSAGE_TOO_LARGE, result


def test_gzip_stops_at_the_bound_without_inflating_the_rest() -> None:
    from diskless.records._compression import decompress_gzip

    bomb = zlib.compress(bytes(50_000_000), 9, wbits=31)
    result = decompress_gzip(bomb, 1_000_000)
    assert isinstance(result, InvalidBatch) and result.error == ErrorCode.MESSAGE_TOO_LARGE


@pytest.mark.parametrize(
    ("offset_ms", "expected"),
    [
        (3_600_000 + 10, ErrorCode.INVALID_TIMESTAMP),  # more than an hour ahead
        (3_600_000, None),  # exactly the bound
        (-(10**12), None),  # long ago: before.max.ms defaults to no bound
    ],
)
def test_create_time_bounds(offset_ms: int, expected: ErrorCode | None) -> None:
    batch = build(NOW + offset_ms, 1, 4)
    result = _check(batch)
    if expected is None:
        assert isinstance(result, BatchHeader), result
    else:
        assert isinstance(result, InvalidBatch) and result.error == expected, result


def test_before_max_bounds_old_timestamps_and_log_append_time_skips_bounds() -> None:
    batch = build(NOW - 10_000, 0, 4)
    strict = RecordRules(NOW, timestamp_before_max_ms=5_000)
    result = _check(batch, strict)
    assert isinstance(result, InvalidBatch) and result.error == ErrorCode.INVALID_TIMESTAMP
    lat = RecordRules(NOW, TimestampType.LOG_APPEND_TIME, 5_000, 5_000)
    assert isinstance(_check(batch, lat), BatchHeader)


def test_a_null_header_key_is_invalid() -> None:
    # attributes, ts delta 0, offset delta 0, null key, value "v", 1 header with key length -1
    body = b"\x00\x00\x00\x01\x02v\x02\x01\x00"
    record = zigzag_varint(len(body)) + body
    batch = build(NOW, 0, 1)
    result = _check(with_records(batch, record))
    assert isinstance(result, InvalidBatch) and result.error == ErrorCode.INVALID_RECORD, result
    assert "null header key" in result.message


def test_offset_deltas_must_run_from_zero() -> None:
    body = b"\x00\x00\x02\x01\x02v\x00"  # offset delta 1 in a one-record batch
    batch = build(NOW, 0, 1)
    result = _check(with_records(batch, zigzag_varint(len(body)) + body))
    assert isinstance(result, InvalidBatch) and result.error == ErrorCode.INVALID_RECORD
    assert "offset delta" in result.message


def test_the_walk_that_runs_is_the_c_one() -> None:
    """Production has one record walk: the C extension's (the fuzz tests go through it)."""
    import diskless.records._walk as module

    assert module.walk.__module__ == "diskless.records._cwalk"
    assert type(module.walk).__name__ == "builtin_function_or_method"


def _with_body(batch: bytes, body: bytes) -> bytes:
    return with_crc(with_length(batch[:61] + body))


def test_lz4_frames_without_a_declared_size_as_java_writes_them() -> None:
    """KafkaLZ4BlockOutputStream declares no content size: streamed within the bound."""
    import lz4.frame

    batch = build(NOW, 3, 20)
    records = records_of(batch)
    frame = lz4.frame.compress(records, store_size=False, block_linked=False)
    assert not frame[4] & 0x08
    assert isinstance(_check(_with_body(batch, frame)), BatchHeader)
    for hostile in (frame[:-5], frame + b"\x00\x01"):
        result = _check(_with_body(batch, hostile))
        assert isinstance(result, InvalidBatch) and result.error == ErrorCode.CORRUPT_MESSAGE


def test_an_lz4_bomb_without_a_declared_size_is_refused() -> None:
    import lz4.frame

    limit = decompressed_bytes_max(100 * 1024)
    bomb = lz4.frame.compress(bytes(limit + 1), store_size=False, block_linked=False)
    assert len(bomb) < 100 * 1024
    result = parse_produce_payload(_with_body(build(NOW, 3, 1), bomb), 100 * 1024, RecordRules(NOW))
    assert isinstance(result, InvalidBatch) and result.error == ErrorCode.MESSAGE_TOO_LARGE, result


@pytest.mark.parametrize("shift", [-1, 1])
def test_an_lz4_frame_lying_about_its_size_is_corrupt(shift: int) -> None:
    """The declared size is the room given: a frame holding more or less is refused."""
    import lz4.frame

    batch = build(NOW, 3, 20)
    records = records_of(batch)
    frame = bytearray(lz4.frame.compress(records, block_linked=False, content_checksum=False))
    assert frame[4] & 0x08 and int.from_bytes(frame[6:14], "little") == len(records)
    assert _xxh32(bytes(frame[4:14])) >> 8 & 0xFF == frame[14]  # so the forged one is valid
    frame[6:14] = (len(records) + shift).to_bytes(8, "little")
    frame[14] = _xxh32(bytes(frame[4:14])) >> 8 & 0xFF  # the descriptor's checksum
    result = _check(_with_body(batch, bytes(frame)))
    assert isinstance(result, InvalidBatch) and result.error == ErrorCode.CORRUPT_MESSAGE, result


def _xxh32(data: bytes) -> int:
    """xxHash32 with seed 0 (an LZ4 frame descriptor's checksum), for inputs under 16 bytes."""
    assert len(data) < 16
    p1, p2, p3, p4, p5 = 2654435761, 2246822519, 3266489917, 668265263, 374761393
    mask = 0xFFFFFFFF

    def rotl(value: int, bits: int) -> int:
        return ((value << bits) | (value >> (32 - bits))) & mask

    value = (p5 + len(data)) & mask
    at = 0
    while at + 4 <= len(data):
        word = int.from_bytes(data[at : at + 4], "little")
        value = rotl((value + word * p3) & mask, 17) * p4 & mask
        at += 4
    for byte in data[at:]:
        value = rotl((value + byte * p5) & mask, 11) * p1 & mask
    value ^= value >> 15
    value = value * p2 & mask
    value ^= value >> 13
    value = value * p3 & mask
    return value ^ (value >> 16)


def test_zstd_frames_with_and_without_a_declared_size() -> None:
    import zstandard

    batch = build(NOW, 4, 20)
    records = records_of(batch)
    for declare in (True, False):
        frame = zstandard.ZstdCompressor(write_content_size=declare).compress(records)
        assert (zstandard.frame_content_size(frame) >= 0) == declare
        assert isinstance(_check(_with_body(batch, frame)), BatchHeader)
        for hostile in (frame[:-3], frame + b"\x00", frame + frame):
            result = _check(_with_body(batch, hostile))
            assert isinstance(result, InvalidBatch), (declare, hostile[-4:])
            assert result.error == ErrorCode.CORRUPT_MESSAGE, (declare, result)


def test_zstd_when_not_allowed_is_refused_before_every_other_rule() -> None:
    """Kafka checks the request's own rules (Produce below v7: no zstd) on the first batch
    before its CRC and its records; other codecs are unaffected."""
    zstd = build(NOW, 4, 3)
    assert isinstance(_check(zstd), BatchHeader)  # allowed by default
    corrupt = bytearray(zstd)
    corrupt[-1] ^= 0x01
    for batch in (zstd, bytes(corrupt), zstd + build(NOW, 0, 1)):
        result = parse_produce_payload(batch, MAX, RecordRules(NOW), allow_zstd=False)
        assert isinstance(result, InvalidBatch), result
        assert result.error == ErrorCode.UNSUPPORTED_COMPRESSION_TYPE, result
    for codec in (0, 1, 2, 3):
        batch = build(NOW, codec, 3)
        assert isinstance(parse_produce_payload(batch, MAX, allow_zstd=False), BatchHeader)
