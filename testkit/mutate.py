"""Valid batches built by kafka-python, and hostile variants of them with a recomputed CRC.

Mutations reach below the header: record bodies, counts, offset deltas, varints and compressed
payloads, each followed by a fresh CRC-32C so that only record-level validation can catch them.
"""

from __future__ import annotations

import random
import struct
import warnings
from collections.abc import Callable, Sequence

import crc32c

from testkit.batches import batch_builder
from testkit.reference_walk import reference_walk

with warnings.catch_warnings():
    warnings.simplefilter("ignore", DeprecationWarning)
    import kafka.codec
    from kafka.record.default_records import DefaultRecordBatch

CODECS = (0, 1, 2, 3, 4)
CODEC_NAMES = {0: "none", 1: "gzip", 2: "snappy", 3: "lz4", 4: "zstd"}
HEADER_SIZE = 61
_COUNT_AT = 57
_LAST_DELTA_AT = 23
_MAX_TS_AT = 35


def build(
    now_ms: int,
    codec: int = 0,
    records: int = 5,
    *,
    rng: random.Random | None = None,
    headers: bool = False,
) -> bytes:
    """A batch a producer could send at `now_ms`: record i stamped `now_ms - i`.

    kafka-python drops the codec when compressing does not pay (a single short record, with
    snappy): then the records are drawn again.
    """
    rng = rng or random.Random(0)
    for _ in range(20):
        batch = _build_once(now_ms, codec, records, rng, headers)
        if struct.unpack_from(">h", batch, 21)[0] & 7 == codec:
            return batch
    raise AssertionError(f"codec {codec} never kept for {records} records")


def _build_once(now_ms: int, codec: int, records: int, rng: random.Random, headers: bool) -> bytes:
    builder = batch_builder(compression=codec)
    for i in range(records):
        key = None if rng.random() < 0.3 else _text(rng, rng.randrange(0, 40))
        value = None if i and rng.random() < 0.1 else _text(rng, rng.randrange(200, 400))
        record_headers = (
            [(f"h{j}", None if j % 2 else rng.randbytes(rng.randrange(0, 20))) for j in range(3)]
            if headers or rng.random() < 0.2
            else []
        )
        assert builder.append(i, now_ms - i, key, value, record_headers) is not None
    return bytes(builder.build())


_WORDS = (b"order", b"id", b"user", b"amount", b"eur", b"status", b"shipped", b"{", b"}", b":")


def _text(rng: random.Random, size: int) -> bytes:
    """Text-like bytes, compressible as real payloads are."""
    out = bytearray(b"{")
    while len(out) < size:
        out += rng.choice(_WORDS) + b" %d " % rng.randrange(1000)
    return bytes(out[:size])


def with_crc(batch: bytes | bytearray) -> bytes:
    """`batch` with its CRC-32C (over bytes 21..end) recomputed."""
    out = bytearray(batch)
    struct.pack_into(">I", out, 17, crc32c.crc32c(bytes(out[21:])))
    return bytes(out)


def with_length(batch: bytes | bytearray) -> bytearray:
    """`batch` with its length field matching its size (after body mutations)."""
    out = bytearray(batch)
    struct.pack_into(">i", out, 8, len(out) - 12)
    return out


def decode(batch: bytes) -> list[object]:
    """Every record of `batch` through kafka-python's codec; raises if it cannot."""
    parsed = DefaultRecordBatch(batch)
    assert parsed.validate_crc()
    return list(parsed)


def kafka_python_misreads(batch: bytes) -> bool:
    """Whether a record of `batch` is one kafka-python reads differently from Kafka and
    librdkafka: an attributes byte with its high bit set (it reads a varint there) or a header
    key that is not UTF-8 (it decodes strictly). The broker accepts both, as Kafka does."""
    records = records_of(batch)
    (count,) = struct.unpack_from(">i", batch, _COUNT_AT)
    misread = False

    def visit(delta: int, attributes: int, header_keys: list[bytes]) -> None:
        nonlocal misread
        try:
            for key in header_keys:
                key.decode("utf-8")
        except UnicodeDecodeError:
            misread = True
        misread = misread or attributes >= 0x80

    reference_walk(records, 0, len(records), count, 0, 0, False, 0, 0, 0, visit=visit)
    return misread


def compress(codec: int, data: bytes) -> bytes:
    encoders: dict[int, Callable[[bytes], bytes]] = {
        1: kafka.codec.gzip_encode,
        2: kafka.codec.snappy_encode,
        3: kafka.codec.lz4_encode,
        4: kafka.codec.zstd_encode,
    }
    return encoders[codec](data)


def decompress(codec: int, data: bytes) -> bytes:
    decoders: dict[int, Callable[[bytes], bytes]] = {
        1: kafka.codec.gzip_decode,
        2: kafka.codec.snappy_decode,
        3: kafka.codec.lz4_decode,
        4: kafka.codec.zstd_decode,
    }
    return decoders[codec](data)


def with_records(batch: bytes, records: bytes) -> bytes:
    """`batch` holding `records` (uncompressed bytes), compressed with the batch's codec."""
    codec = struct.unpack_from(">h", batch, 21)[0] & 7
    body = records if codec == 0 else compress(codec, records)
    return with_crc(with_length(batch[:HEADER_SIZE] + body))


def records_of(batch: bytes) -> bytes:
    codec = struct.unpack_from(">h", batch, 21)[0] & 7
    body = batch[HEADER_SIZE:]
    return body if codec == 0 else decompress(codec, body)


def zigzag_varint(value: int) -> bytes:
    """Kafka's signed varint of `value`, written here apart from the library's, for the bytes
    the tests hand its walks."""
    encoded = (value << 1) ^ (value >> 63)
    out = bytearray()
    while encoded > 0x7F:
        out.append(encoded & 0x7F | 0x80)
        encoded >>= 7
    out.append(encoded)
    return bytes(out)


def _flip_byte(rng: random.Random, data: bytearray) -> None:
    if data:
        data[rng.randrange(len(data))] ^= 1 << rng.randrange(8)


def _set_byte(rng: random.Random, data: bytearray) -> None:
    if data:
        data[rng.randrange(len(data))] = rng.choice((0x00, 0x01, 0x7F, 0x80, 0xFF, 0x03))


def _truncate(rng: random.Random, data: bytearray) -> None:
    if data:
        del data[rng.randrange(len(data)) :]


def _append(rng: random.Random, data: bytearray) -> None:
    data.extend(rng.randbytes(rng.randrange(1, 8)))


def _long_varint(rng: random.Random, data: bytearray) -> None:
    if data:
        at = rng.randrange(len(data))
        data[at:at] = b"\xff" * rng.randrange(1, 11)


MUTATIONS: Sequence[Callable[[random.Random, bytearray], None]] = (
    _flip_byte,
    _set_byte,
    _truncate,
    _append,
    _long_varint,
)


def mutate(rng: random.Random, batch: bytes) -> tuple[str, bytes]:
    """One hostile variant of `batch` (CRC recomputed) and what was done to it."""
    kind = rng.choice(("records", "count", "delta", "max_ts", "payload"))
    out = bytearray(batch)
    if kind == "count":
        count = struct.unpack_from(">i", out, _COUNT_AT)[0] + rng.choice((-2, -1, 1, 2))
        struct.pack_into(">i", out, _COUNT_AT, count)
        if rng.random() < 0.7:  # a consistent lie: the header agrees with itself
            struct.pack_into(">i", out, _LAST_DELTA_AT, count - 1)
        return kind, with_crc(out)
    if kind == "delta":
        struct.pack_into(">i", out, _LAST_DELTA_AT, rng.randrange(-1, 10))
        return kind, with_crc(out)
    if kind == "max_ts":
        (max_ts,) = struct.unpack_from(">q", out, _MAX_TS_AT)
        struct.pack_into(">q", out, _MAX_TS_AT, max_ts + rng.choice((-1, 1, 1000)))
        return kind, with_crc(out)
    if kind == "payload":  # the compressed (or raw) bytes themselves
        body = bytearray(out[HEADER_SIZE:])
        rng.choice(MUTATIONS)(rng, body)
        return kind, with_crc(with_length(out[:HEADER_SIZE] + body))
    records = bytearray(records_of(batch))  # the uncompressed records, recompressed after
    for _ in range(rng.randrange(1, 3)):
        rng.choice(MUTATIONS)(rng, records)
    return kind, with_records(batch, bytes(records))
