"""Unit and property: a batch recompressed in its topic's codec, against kafka-python's decoder.

Batches built by kafka-python in every codec go through `parse_produce_payload` with a topic's
`compression.type` of every kind. kafka-python must read the stored batch in the topic's codec
(in the producer's when the topic keeps it) with a valid CRC, and find in it exactly the records
it built (offsets, timestamps, keys, values, headers) and the producer's header fields (producer
id, epoch, base sequence, transactional flag, record count, last offset delta); maxTimestamp is
the largest record timestamp, as Kafka's LogValidator sets it. A batch already in the topic's
codec, and every batch of a topic that keeps the producer's codec, is stored as written, without
a copy. A batch that no longer fits max.message.bytes once recompressed is MESSAGE_TOO_LARGE, and
a codec failing fails its batch only. The frames are those Kafka's own compressors write.
"""

from __future__ import annotations

import random
import struct
import warnings
import zlib
from typing import Any

import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from diskless._types import CompressionType, ErrorCode
from diskless.records import (
    GZIP_LEVEL_DEFAULT,
    LZ4_LEVEL_DEFAULT,
    ZSTD_LEVEL_DEFAULT,
    BatchHeader,
    InvalidBatch,
    RecordRules,
    compression_level_error,
    parse_produce_payload,
)
from testkit.oracle import (
    CODECS,
    MAX_TIMESTAMP_AT,
    Record,
    build_batch,
    oracle,
    patch,
)

with warnings.catch_warnings():
    warnings.simplefilter("ignore", DeprecationWarning)
    import kafka.codec

PROPERTY = settings(
    max_examples=150,
    deadline=None,
    print_blob=True,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
NOW = 1_700_000_000_000
MAX_MESSAGE_BYTES = 1 << 22
SOURCES = [code for code, available in CODECS.values() if available()]
assert len(SOURCES) == 5, "every codec must be available to kafka-python here"
CODECS_BY_ID = {code: name for name, (code, _) in CODECS.items()}
TOPIC_TYPES = list(CompressionType)
LEVELS = {
    CompressionType.GZIP: GZIP_LEVEL_DEFAULT,
    CompressionType.LZ4: LZ4_LEVEL_DEFAULT,
    CompressionType.ZSTD: ZSTD_LEVEL_DEFAULT,
}
PRODUCERS: dict[str, dict[str, Any]] = {
    "plain": {},
    "idempotent": {"producer_id": 4321, "producer_epoch": 7, "base_sequence": 2**31 - 3},
    "transactional": {
        "producer_id": 99,
        "producer_epoch": 0,
        "base_sequence": 12,
        "transactional": True,
    },
}


def _rules(topic: CompressionType, level: int | None = None) -> RecordRules:
    return RecordRules(
        NOW,
        compression=topic,
        compression_level=LEVELS.get(topic, 0) if level is None else level,
    )


def _store(
    data: bytes, topic: CompressionType, *, level: int | None = None, max_bytes: int = 0
) -> BatchHeader | InvalidBatch:
    return parse_produce_payload(data, max_bytes or MAX_MESSAGE_BYTES, _rules(topic, level))


def _records(count: int, rng: random.Random | None = None) -> list[Record]:
    """Records with keys, values and headers, timestamps in no order (some null parts)."""
    rng = rng or random.Random(count)
    out: list[Record] = []
    for i in range(count):
        key = None if i % 7 == 3 else f"key-{i}".encode()
        value = None if i % 11 == 5 else (f"value {i} " * rng.randrange(1, 40)).encode()
        headers = [(f"h{j}", None if j == 1 else bytes([i % 256]) * j) for j in range(i % 3)]
        out.append((NOW - rng.randrange(0, 100_000), key, value, headers))
    return out


def _assert_stored_as_kafka_stores(
    stored: BatchHeader | InvalidBatch, sent: bytes, records: list[Record], codec: int
) -> bytes:
    """The stored batch, after checking it against kafka-python's reading of what was sent."""
    assert isinstance(stored, BatchHeader), stored
    data = bytes(stored.bytes_view())
    before, after = oracle(sent), oracle(data)
    assert after.validate_crc(), "kafka-python rejects the CRC"
    assert after.compression_type == codec
    read = [(r.offset, r.timestamp, r.key, r.value, r.headers) for r in after]
    assert read == [(r.offset, r.timestamp, r.key, r.value, r.headers) for r in before]
    assert [(ts, k, v, h) for _, ts, k, v, h in read] == [
        (ts, k, v, [(hk, hv) for hk, hv in h]) for ts, k, v, h in records
    ]
    for field in (
        "base_offset",
        "leader_epoch",
        "magic",
        "last_offset_delta",
        "first_timestamp",
        "producer_id",
        "producer_epoch",
        "base_sequence",
        "records_count",
        "is_transactional",
        "is_control_batch",
        "timestamp_type",
    ):
        assert getattr(after, field) == getattr(before, field), field
    assert after.max_timestamp == max(ts for ts, *_ in records)
    assert stored.size == len(data) == after.size_in_bytes
    assert stored.compression == codec and stored.crc_valid()
    return data


@pytest.mark.parametrize("producer", sorted(PRODUCERS))
@pytest.mark.parametrize("topic", TOPIC_TYPES, ids=lambda t: t.name.lower())
@pytest.mark.parametrize("source", SOURCES, ids=lambda c: CODECS_BY_ID[c])
def test_a_batch_is_stored_in_the_topics_codec(
    source: int, topic: CompressionType, producer: str
) -> None:
    records = _records(60)
    sent = build_batch(records, compression=source, **PRODUCERS[producer])
    assert oracle(sent).compression_type == source
    stored = _store(sent, topic)
    codec = source if topic is CompressionType.PRODUCER else int(topic)
    data = _assert_stored_as_kafka_stores(stored, sent, records, codec)
    if codec == source:  # kept as written: the client's own bytes, no copy
        assert isinstance(stored, BatchHeader) and data == sent
        assert stored.buffer.obj is sent
    if codec == 0:  # records unchanged, uncompressed: exactly kafka-python's own batch
        expected = build_batch(records, compression=0, **PRODUCERS[producer])
        assert data == expected


@pytest.mark.parametrize("topic", TOPIC_TYPES[2:], ids=lambda t: t.name.lower())
def test_a_wrong_max_timestamp_is_fixed_in_the_recompressed_batch(topic: CompressionType) -> None:
    records = _records(20)
    for claimed in (-1, NOW + 1_000_000):
        sent = patch(build_batch(records, compression=0), ">q", MAX_TIMESTAMP_AT, claimed)
        _assert_stored_as_kafka_stores(_store(sent, topic), sent, records, int(topic))


def test_invalid_records_are_refused_before_any_recompression() -> None:
    records = _records(5)
    records[2] = (NOW + 2 * 3_600_000, *records[2][1:])  # past message.timestamp.after.max.ms
    sent = build_batch(records, compression=3)
    for topic in TOPIC_TYPES:
        refused = _store(sent, topic)
        assert isinstance(refused, InvalidBatch) and refused.error == ErrorCode.INVALID_TIMESTAMP


@pytest.mark.parametrize("source", SOURCES[1:])
def test_a_batch_too_large_once_recompressed_is_message_too_large(source: int) -> None:
    """Kafka checks the rebuilt batch against max.message.bytes again (`UnifiedLog.append`)."""
    records = [(NOW, None, b"a" * 5000, [])] * 4
    sent = build_batch(records, compression=source)
    uncompressed = len(build_batch(records, compression=0))
    assert len(sent) < 2000 < uncompressed
    fits = _store(sent, CompressionType.UNCOMPRESSED, max_bytes=uncompressed)
    assert isinstance(fits, BatchHeader) and fits.size == uncompressed
    refused = _store(sent, CompressionType.UNCOMPRESSED, max_bytes=uncompressed - 1)
    assert isinstance(refused, InvalidBatch), refused
    assert refused.error == ErrorCode.MESSAGE_TOO_LARGE
    assert f"{uncompressed} bytes after recompression to none" in refused.message


def test_a_codec_that_fails_fails_its_batch_only() -> None:
    """A level no topic config accepts, given through the library's API: no exception."""
    sent = build_batch(_records(3), compression=0)
    failed = _store(sent, CompressionType.ZSTD, level=100)
    assert isinstance(failed, InvalidBatch) and failed.error == ErrorCode.UNKNOWN_SERVER_ERROR
    assert "zstd at level 100" in failed.message
    failed = _store(sent, CompressionType.GZIP, level=42)
    assert isinstance(failed, InvalidBatch) and failed.error == ErrorCode.UNKNOWN_SERVER_ERROR


def _payload(stored: BatchHeader | InvalidBatch) -> bytes:
    assert isinstance(stored, BatchHeader), stored
    return bytes(stored.bytes_view()[61:])


@pytest.mark.parametrize(
    ("topic", "fast", "small"),
    [
        (CompressionType.GZIP, 1, 9),
        (CompressionType.LZ4, LZ4_LEVEL_DEFAULT, 17),
        (CompressionType.ZSTD, -5, 19),
    ],
    ids=["gzip", "lz4", "zstd"],
)
def test_the_topics_level_is_applied(topic: CompressionType, fast: int, small: int) -> None:
    rng = random.Random(5)
    words = [rng.randbytes(3).hex() for _ in range(300)]
    records = [(NOW, None, " ".join(rng.choices(words, k=2000)).encode(), [])] * 3
    sent = build_batch(records, compression=0)
    quick, tight = _store(sent, topic, level=fast), _store(sent, topic, level=small)
    _assert_stored_as_kafka_stores(quick, sent, records, int(topic))
    _assert_stored_as_kafka_stores(tight, sent, records, int(topic))
    assert len(_payload(tight)) < len(_payload(quick))


def test_gzip_at_the_default_level_is_zlibs_default() -> None:
    records = _records(40)
    payload = _payload(_store(build_batch(records, compression=0), CompressionType.GZIP))
    assert payload[:3] == b"\x1f\x8b\x08"  # one gzip member, deflate
    inflated = zlib.decompress(payload, wbits=31)
    compressor = zlib.compressobj(6, zlib.DEFLATED, 31)
    assert payload == compressor.compress(inflated) + compressor.flush()


def test_lz4_frames_are_kafkas() -> None:
    """Kafka's `Lz4BlockOutputStream`: frame version 1, independent blocks, no checksums, no
    declared size (FLG 0x60), 64 KiB blocks (BD 0x40); more than one block when the records
    hold more than 64 KiB."""
    records = _records(1500, random.Random(2))
    sent = build_batch(records, compression=0)
    assert len(sent) > 3 * 65536
    payload = _payload(_store(sent, CompressionType.LZ4))
    assert payload[:4] == b"\x04\x22\x4d\x18" and payload[4:6] == b"\x60\x40"
    assert payload[-4:] == b"\x00\x00\x00\x00"  # the end mark, no content checksum after it
    (first_block,) = struct.unpack_from("<I", payload, 7)
    assert first_block & 0x7FFFFFFF < 65536 + 16
    assert kafka.codec.lz4_decode(payload) == sent[61:]


def test_snappy_is_xerial_framed_in_32_kib_blocks() -> None:
    """snappy-java's `SnappyOutputStream`, Kafka's: the magic, versions 1 and 1, then blocks of
    at most 32 KiB of records, each an int32 length and a raw snappy block."""
    records = _records(300, random.Random(3))
    sent = build_batch(records, compression=0)
    payload = _payload(_store(sent, CompressionType.SNAPPY))
    assert payload[:16] == b"\x82SNAPPY\x00" + struct.pack(">ii", 1, 1)
    position, blocks = 16, []
    while position < len(payload):
        (size,) = struct.unpack_from(">i", payload, position)
        blocks.append(kafka.codec.snappy_decode(payload[position + 4 : position + 4 + size]))
        position += 4 + size
    assert position == len(payload)
    assert len(blocks) == -(-(len(sent) - 61) // 32768) > 1
    assert all(len(block) == 32768 for block in blocks[:-1])
    assert b"".join(blocks) == sent[61:] == kafka.codec.snappy_decode(payload)


@pytest.mark.parametrize(
    ("codec", "levels", "refused"),
    [
        (CompressionType.GZIP, [-1, 1, 5, 9], [-2, 0, 10]),
        (CompressionType.LZ4, [1, 9, 17], [0, 18, -1]),
        (CompressionType.ZSTD, [-131072, -1, 0, 3, 22], [-131073, 23]),
    ],
    ids=["gzip", "lz4", "zstd"],
)
def test_levels_are_kafkas(codec: CompressionType, levels: list[int], refused: list[int]) -> None:
    """KIP-390's ranges: gzip 1 to 9 or -1, lz4 1 to 17, zstd -131072 to 22."""
    assert [compression_level_error(codec, level) for level in levels] == [None] * len(levels)
    assert all(compression_level_error(codec, level) for level in refused)
    sent = build_batch(_records(10), compression=0)
    for level in levels:  # every accepted level compresses
        assert isinstance(_store(sent, codec, level=level), BatchHeader), level


@pytest.mark.seeds(6)
def test_large_batches_of_random_records_keep_every_record(seed: int) -> None:
    """Records of up to 200 KiB in batches of up to 4 MiB: codecs' block boundaries crossed."""
    print(f"seed={seed}")
    rng = random.Random(seed)
    for _ in range(4):
        count = rng.choice([1, 2, 17, 300])
        records = [
            (
                NOW - rng.randrange(1000),
                rng.choice([None, rng.randbytes(rng.randrange(0, 50))]),
                rng.choice([None, rng.randbytes(rng.randrange(0, 200_000 // count + 1))]),
                [("h", rng.randbytes(rng.randrange(0, 20)))] * rng.randrange(0, 3),
            )
            for _ in range(count)
        ]
        topic = rng.choice(TOPIC_TYPES[1:])
        sent = build_batch(records, compression=rng.choice(SOURCES), **PRODUCERS["idempotent"])
        stored = _store(sent, topic, level=_random_level(rng, topic))
        _assert_stored_as_kafka_stores(stored, sent, records, int(topic))


def _random_level(rng: random.Random, topic: CompressionType) -> int:
    if topic is CompressionType.GZIP:
        return rng.choice([-1, 1, 9])
    if topic is CompressionType.LZ4:
        return rng.choice([1, 9, 12, 17])
    if topic is CompressionType.ZSTD:
        return rng.choice([-20, 1, 3, 12])
    return 0


records_strategy = st.lists(
    st.tuples(
        st.integers(0, 10**6),  # how long before now
        st.none() | st.binary(max_size=40),
        st.none()
        | st.binary(max_size=300)
        | st.tuples(st.text(max_size=30), st.integers(1, 30)).map(lambda t: (t[0] * t[1]).encode()),
        st.lists(st.tuples(st.text(max_size=8), st.none() | st.binary(max_size=20)), max_size=3),
    ),
    min_size=1,
    max_size=40,
)


@PROPERTY
@given(
    records_strategy,
    st.sampled_from(SOURCES),
    st.sampled_from(TOPIC_TYPES),
    st.sampled_from(sorted(PRODUCERS)),
    st.sampled_from([-1, None]),
    st.randoms(use_true_random=False),
)
def test_any_batch_in_any_topic_keeps_its_records(
    raw: list[tuple[int, bytes | None, bytes | None, list[tuple[str, bytes | None]]]],
    source: int,
    topic: CompressionType,
    producer: str,
    claimed: int | None,
    rng: random.Random,
) -> None:
    records: list[Record] = [(NOW - ago, k, v, h) for ago, k, v, h in raw]
    sent = build_batch(records, compression=source, **PRODUCERS[producer])
    if claimed is not None:  # an older client's maxTimestamp
        sent = patch(sent, ">q", MAX_TIMESTAMP_AT, claimed)
    source = oracle(sent).compression_type  # kafka-python sends what does not shrink as is
    codec = source if topic is CompressionType.PRODUCER else int(topic)
    event(f"{CODECS_BY_ID[source]} -> {CODECS_BY_ID[codec]}")
    stored = _store(sent, topic, level=_random_level(rng, topic))
    data = _assert_stored_as_kafka_stores(stored, sent, records, codec)
    if codec == source and claimed is None:
        assert data == sent
