"""Bounded decompression of a batch's records, one function per Kafka codec; and compression,
for the topics whose `compression.type` names a codec.

Kafka sets no limit on how far a compressed batch may expand; a broker that decompresses to
validate must, or one small request (a "decompression bomb") could take all its memory. Every
codec here stops producing output once the bound is passed, using the codec's streaming or
size-aware API, so that memory stays within the bound whatever the input claims.

Each function returns the decompressed bytes or an `InvalidBatch`: a payload that does not
decompress cleanly (garbage, truncated, trailing bytes) is CORRUPT_MESSAGE, one that would expand
past the bound is MESSAGE_TOO_LARGE (see `decompressed_bytes_max`).

The compressors write what Kafka's own writes (its `Compression` classes): one gzip member;
snappy in xerial framing of 32 KiB blocks (snappy-java's `SnappyOutputStream`); an LZ4 frame of
independent 64 KiB blocks declaring no size, through the fast compressor at the default level and
the high-compression one at any other, as lz4-java's; one zstd frame. Levels take Kafka 4's
ranges (`compression.gzip.level` and the others, KIP-390), checked by `compression_level_error`.
"""

from __future__ import annotations

import struct
import threading
import zlib
from collections.abc import Callable
from typing import Final, TypeAlias

import lz4.frame
import snappy
import zstandard
from lz4.frame import create_decompression_context, decompress_chunk

from diskless._types import ErrorCode
from diskless.records._header import InvalidBatch

DECOMPRESSION_RATIO_MAX: Final = 64
"""A batch may expand to at most this many times the topic's max.message.bytes. Real producers
close a batch when its compressed size reaches batch.size, so honest batches of text or JSON
expand 3-10x and even runs of one byte stay far below 64x max.message.bytes."""
DECOMPRESSED_BYTES_MAX: Final = 64 * 1024 * 1024
"""Absolute cap (64 MiB) whatever max.message.bytes says, so a topic configured with a huge
max.message.bytes cannot make one batch hold gigabytes of broker memory."""
_FIRST_GUESS_RATIO: Final = 16
"""First output buffer, as a multiple of the compressed size: codecs whose bounded call allocates
the whole bound up front try this first and pay for the full bound only when it is too small."""
_FIRST_GUESS_MIN: Final = 64 * 1024

CODEC_GZIP: Final = 1
CODEC_SNAPPY: Final = 2
CODEC_LZ4: Final = 3
CODEC_ZSTD: Final = 4
CODEC_NAMES: Final = {0: "none", 1: "gzip", 2: "snappy", 3: "lz4", 4: "zstd"}

GZIP_LEVEL_DEFAULT: Final = -1
"""zlib's default (6), as Java's `Deflater.DEFAULT_COMPRESSION`; else 1 (fastest) to 9."""
GZIP_LEVEL_MIN: Final = 1
GZIP_LEVEL_MAX: Final = 9
LZ4_LEVEL_DEFAULT: Final = 9
LZ4_LEVEL_MIN: Final = 1
LZ4_LEVEL_MAX: Final = 17
"""lz4-java's range; liblz4 treats levels above its own maximum (12) as that maximum."""
ZSTD_LEVEL_DEFAULT: Final = 3
ZSTD_LEVEL_MIN: Final = -131072
"""zstd's fastest (`ZSTD_minCLevel`, -ZSTD_TARGETLENGTH_MAX)."""
ZSTD_LEVEL_MAX: Final = 22

XERIAL_MAGIC: Final = b"\x82SNAPPY\x00"
"""Java clients (snappy-java) frame snappy as this magic, two int32 versions, then blocks."""
_XERIAL_HEADER_SIZE: Final = 16
_XERIAL_VERSIONS: Final = b"\x00\x00\x00\x01\x00\x00\x00\x01"
"""Version 1, compatible with version 1: what snappy-java writes after the magic."""
_XERIAL_BLOCK_BYTES: Final = 32 * 1024
"""Uncompressed bytes per xerial block: snappy-java's default block size, Kafka's."""
_INT32: Final = struct.Struct(">i")
_UINT64_LE: Final = struct.Struct("<Q")

Payload: TypeAlias = bytes | memoryview


def decompressed_bytes_max(max_message_bytes: int) -> int:
    """How far one batch may expand: 64 x max.message.bytes, at most 64 MiB.

    Kafka has no such bound. Exceeding it is MESSAGE_TOO_LARGE rather than CORRUPT_MESSAGE:
    the payload is not corrupt, merely too big, and Java producers answer MESSAGE_TOO_LARGE by
    splitting the batch and retrying, which is what an honest producer of an unusually
    compressible batch needs.
    """
    limit = DECOMPRESSION_RATIO_MAX * max_message_bytes  # once per batch: no min()/max() calls
    if limit > DECOMPRESSED_BYTES_MAX:
        return DECOMPRESSED_BYTES_MAX
    return limit if limit > 0 else DECOMPRESSION_RATIO_MAX


def _corrupt(codec: str, detail: object) -> InvalidBatch:
    return InvalidBatch(ErrorCode.CORRUPT_MESSAGE, f"{codec} payload does not decompress: {detail}")


def _too_large(codec: str, limit: int) -> InvalidBatch:
    return InvalidBatch(ErrorCode.MESSAGE_TOO_LARGE, f"{codec} payload expands past {limit} bytes")


def _first_guess(payload: Payload, limit: int) -> int:
    return min(limit, max(_FIRST_GUESS_MIN, _FIRST_GUESS_RATIO * len(payload)))


def decompress_gzip(payload: Payload, limit: int) -> bytes | InvalidBatch:
    """gzip, possibly several concatenated members (Java's GZIPInputStream reads them all)."""
    parts: list[bytes] = []
    total = 0
    data: Payload = payload
    try:
        while True:
            inflater = zlib.decompressobj(wbits=31)
            part = inflater.decompress(data, limit - total + 1)
            total += len(part)
            if total > limit:
                return _too_large("gzip", limit)
            parts.append(part)
            if not inflater.eof:
                if inflater.unconsumed_tail:  # only possible when the output limit stopped it
                    return _too_large("gzip", limit)
                return _corrupt("gzip", "truncated stream")
            data = inflater.unused_data
            if not data:
                break
    except zlib.error as error:
        return _corrupt("gzip", error)
    return parts[0] if len(parts) == 1 else b"".join(parts)


def _snappy_block(block: Payload, limit: int) -> bytes | InvalidBatch:
    """One raw snappy block, its declared (varint) length checked before decompressing."""
    declared = 0
    shift = 0
    for index in range(min(5, len(block))):
        byte = block[index]
        declared |= (byte & 0x7F) << shift
        if byte < 0x80:
            break
        shift += 7
    else:
        return _corrupt("snappy", "bad length preamble")
    if declared > limit:
        return _too_large("snappy", limit)
    try:
        out = snappy.uncompress(bytes(block))
    except Exception as error:  # the codec raises several unrelated exception types
        return _corrupt("snappy", error)
    if not isinstance(out, bytes):
        out = bytes(out)
    if len(out) != declared:
        return _corrupt("snappy", "length preamble disagrees with the data")
    return out


def decompress_snappy(payload: Payload, limit: int) -> bytes | InvalidBatch:
    """Raw snappy (librdkafka) or xerial-framed blocks (Java clients' snappy-java)."""
    if bytes(payload[:8]) != XERIAL_MAGIC:
        return _snappy_block(payload, limit)
    view = memoryview(payload)
    position = _XERIAL_HEADER_SIZE
    if len(view) < position:
        return _corrupt("snappy", "truncated xerial header")
    parts: list[bytes] = []
    total = 0
    while position < len(view):
        if position + 4 > len(view):
            return _corrupt("snappy", "truncated xerial block length")
        (size,) = _INT32.unpack_from(view, position)
        position += 4
        if size < 0 or position + size > len(view):
            return _corrupt("snappy", f"xerial block of {size} bytes overruns the payload")
        part = _snappy_block(view[position : position + size], limit - total)
        if isinstance(part, InvalidBatch):
            return part
        parts.append(part)
        total += len(part)
        position += size
    return b"".join(parts)


_LZ4_CONTENT_SIZE_FLAG: Final = 0x08


def _lz4_declared_size(payload: Payload) -> int:
    """The content size an LZ4 frame declares (FLG bit 3, then 8 bytes LE); -1 when none."""
    if len(payload) >= 14 and payload[4] & _LZ4_CONTENT_SIZE_FLAG:
        size: int = _UINT64_LE.unpack_from(payload, 6)[0]
        return size
    return -1


def decompress_lz4(payload: Payload, limit: int) -> bytes | InvalidBatch:
    """One LZ4 frame, nothing after it.

    A frame that declares its size (librdkafka's, kafka-python's) is decompressed in one call
    into exactly that room: one that holds more stops short of its end and is refused without
    the memory. Java's frames declare none; their output is pulled in bounded steps.
    """
    declared = _lz4_declared_size(payload)
    if declared > limit:
        return _too_large("lz4", limit)
    if declared < 0:
        return _lz4_stream(payload, limit)
    # The context-level call, not LZ4FrameDecompressor: that wrapper copies a memoryview input.
    try:
        result: tuple[bytes, int, bool] = decompress_chunk(
            create_decompression_context(), payload, max_length=declared
        )
    except RuntimeError as error:
        return _corrupt("lz4", error)
    records, read, eof = result
    if not eof:
        return _corrupt("lz4", "truncated frame, or longer than it declares")
    if read != len(payload):
        return _corrupt("lz4", "bytes after the frame")
    return records


def _lz4_stream(payload: Payload, limit: int) -> bytes | InvalidBatch:
    """A frame of undeclared size, its output pulled in steps: first a guess, then the bound."""
    context = create_decompression_context()
    parts: list[bytes] = []
    total = 0
    position = 0
    step = _first_guess(payload, limit)
    try:
        while True:
            part, read, eof = decompress_chunk(
                context,
                payload[position:] if position else payload,
                max_length=min(step, limit - total + 1),
            )
            position += read
            total += len(part)
            if total > limit:
                return _too_large("lz4", limit)
            parts.append(part)
            if eof:
                break
            if not part and (not read or position >= len(payload)):
                return _corrupt("lz4", "truncated frame")
            step = limit  # the first guess was short: allow the rest of the bound
    except RuntimeError as error:
        return _corrupt("lz4", error)
    if position != len(payload):
        return _corrupt("lz4", "bytes after the frame")
    return parts[0] if len(parts) == 1 else b"".join(parts)


_ZSTD_MAGIC: Final = b"\x28\xb5\x2f\xfd"


def _zstd_frame_size(payload: Payload) -> int | None:
    """Bytes of the first zstd frame, from its block headers; None when they overrun."""
    try:
        position = zstandard.frame_header_size(payload)
    except zstandard.ZstdError:
        return None
    has_checksum = payload[4] & 0x04
    end = len(payload)
    while position + 3 <= end:
        header = payload[position] | payload[position + 1] << 8 | payload[position + 2] << 16
        position += 3
        block_type = (header >> 1) & 3
        if block_type == 3:
            return None
        position += 1 if block_type == 1 else header >> 3
        if header & 1:
            return position + (4 if has_checksum else 0)
    return None


_zstd_local = threading.local()


def _zstd_decompressor() -> zstandard.ZstdDecompressor:
    """One decompressor per thread: creating one per batch costs as much as decompressing a
    small batch, and one must not be used by two threads at once."""
    try:
        decompressor: zstandard.ZstdDecompressor = _zstd_local.decompressor
    except AttributeError:
        decompressor = _zstd_local.decompressor = zstandard.ZstdDecompressor()
    return decompressor


def decompress_zstd(payload: Payload, limit: int) -> bytes | InvalidBatch:
    """Exactly one zstd frame (what Kafka clients write); no trailing bytes.

    A frame that declares its size is decompressed in one call into exactly that room (zstd
    refuses a frame holding anything else); one that does not is first checked to span the
    payload, then decompressed within the bound.
    """
    if bytes(payload[:4]) != _ZSTD_MAGIC:
        return _corrupt("zstd", "bad frame magic")
    try:
        declared = zstandard.frame_content_size(payload)
    except zstandard.ZstdError as error:
        return _corrupt("zstd", error)
    if declared > limit:
        return _too_large("zstd", limit)
    decompressor = _zstd_decompressor()
    if declared >= 0:
        try:
            records: bytes = decompressor.decompress(payload, allow_extra_data=False)
        except zstandard.ZstdError as error:
            return _corrupt("zstd", error)
        return records
    if _zstd_frame_size(payload) != len(payload):
        return _corrupt("zstd", "frame does not span the payload exactly")
    try:
        return decompressor.decompress(payload, max_output_size=_first_guess(payload, limit))
    except zstandard.ZstdError:
        pass  # too small a first guess, or a bad frame: the second try says which
    try:
        return decompressor.decompress(payload, max_output_size=limit)
    except zstandard.ZstdError as error:
        if "full frame" in str(error):
            return _too_large("zstd", limit)
        return _corrupt("zstd", error)


DECOMPRESSORS: Final[dict[int, Callable[[Payload, int], bytes | InvalidBatch]]] = {
    CODEC_GZIP: decompress_gzip,
    CODEC_SNAPPY: decompress_snappy,
    CODEC_LZ4: decompress_lz4,
    CODEC_ZSTD: decompress_zstd,
}


def compression_level_error(codec: int, level: int) -> str | None:
    """Why `level` is no level of `codec` in Kafka 4 (KIP-390); None when it is one. snappy and
    no compression have no levels, so any level is theirs (it is never used)."""
    if codec == CODEC_GZIP:
        if level != GZIP_LEVEL_DEFAULT and not GZIP_LEVEL_MIN <= level <= GZIP_LEVEL_MAX:
            return f"must be between {GZIP_LEVEL_MIN} and {GZIP_LEVEL_MAX} or {GZIP_LEVEL_DEFAULT}"
    elif codec == CODEC_LZ4:
        if not LZ4_LEVEL_MIN <= level <= LZ4_LEVEL_MAX:
            return f"must be between {LZ4_LEVEL_MIN} and {LZ4_LEVEL_MAX}"
    elif codec == CODEC_ZSTD and not ZSTD_LEVEL_MIN <= level <= ZSTD_LEVEL_MAX:
        return f"must be between {ZSTD_LEVEL_MIN} and {ZSTD_LEVEL_MAX}"
    return None


def compress_gzip(records: Payload, level: int) -> bytes:
    """One gzip member (Java's `GZIPInputStream` and every client read it)."""
    compressor = zlib.compressobj(level, zlib.DEFLATED, 31)
    return compressor.compress(records) + compressor.flush()


def compress_snappy(records: Payload, level: int) -> bytes:
    """xerial framing: the magic, the versions, then each 32 KiB as an int32 length and a raw
    snappy block; every client reads it (librdkafka and kafka-python look for the magic)."""
    view = memoryview(records)
    parts = [XERIAL_MAGIC, _XERIAL_VERSIONS]
    for start in range(0, len(view), _XERIAL_BLOCK_BYTES):
        block: bytes = snappy.compress(view[start : start + _XERIAL_BLOCK_BYTES])
        parts.append(_INT32.pack(len(block)))
        parts.append(block)
    return b"".join(parts)


def compress_lz4(records: Payload, level: int) -> bytes:
    """An LZ4 frame as Kafka's `Lz4BlockOutputStream` writes it: independent 64 KiB blocks, no
    checksums, no declared size; the fast compressor at the default level (liblz4's frame API
    takes level 0 for it), the high-compression one at the others."""
    compressed: bytes = lz4.frame.compress(
        records,
        compression_level=0 if level == LZ4_LEVEL_DEFAULT else level,
        block_size=lz4.frame.BLOCKSIZE_MAX64KB,
        block_linked=False,
        content_checksum=False,
        block_checksum=False,
        store_size=False,
    )
    return compressed


_ZSTD_COMPRESSORS_MAX: Final = 8
"""Compressors kept per thread, one per level in use (most clusters use one or two levels)."""


def compress_zstd(records: Payload, level: int) -> bytes:
    """One zstd frame declaring its size, which lets a reader decompress it in one call."""
    try:
        compressors: dict[int, zstandard.ZstdCompressor] = _zstd_local.compressors
    except AttributeError:
        compressors = _zstd_local.compressors = {}
    compressor = compressors.get(level)
    if compressor is None:
        if len(compressors) >= _ZSTD_COMPRESSORS_MAX:
            compressors.clear()
        compressor = compressors[level] = zstandard.ZstdCompressor(level=level)
    compressed: bytes = compressor.compress(records)
    return compressed


COMPRESSORS: Final[dict[int, Callable[[Payload, int], bytes]]] = {
    CODEC_GZIP: compress_gzip,
    CODEC_SNAPPY: compress_snappy,
    CODEC_LZ4: compress_lz4,
    CODEC_ZSTD: compress_zstd,
}
"""A codec's compressor, given the records and the topic's level for that codec."""
