"""A client batch rewritten in its topic's codec: Kafka's recompression on append.

A topic whose `compression.type` names a codec stores every batch in it. Kafka's LogValidator
keeps a batch already in that codec as written and rebuilds any other (`inPlaceAssignment` is
false when the source and target codecs differ): the same records, offsets, timestamps, producer
id, epoch, base sequence and transactional flag, compressed with the topic's codec at its level,
a new CRC. Then, since the size may have changed, the rebuilt batch must still fit the topic's
max.message.bytes, else MESSAGE_TOO_LARGE (`RecordTooLargeException` in `UnifiedLog.append`).

Here the records are the client's own bytes, as the record walk has just validated them; only
their compression changes. The header keeps every field but the length, the codec bits of the
attributes, maxTimestamp (the one the walk settled on) and the CRC, so a reader sees the records
exactly as Kafka's rebuilt batch would present them. The copy is one join.
"""

from __future__ import annotations

import struct
from typing import Final

import crc32c

from diskless._types import ErrorCode
from diskless.records._compression import CODEC_NAMES, COMPRESSORS, Payload
from diskless.records._header import (
    COMPRESSION_MASK,
    HEADER_SIZE,
    LOG_OVERHEAD,
    BatchHeader,
    InvalidBatch,
)

_LENGTH_AT: Final = 8
_CRC_AT: Final = 17
_ATTRIBUTES_AT: Final = 21
_MAX_TIMESTAMP_AT: Final = 35
_INT16: Final = struct.Struct(">h")
_INT32: Final = struct.Struct(">i")
_INT64: Final = struct.Struct(">q")
_UINT32: Final = struct.Struct(">I")


def recompress(
    header: BatchHeader,
    records: Payload,
    *,
    codec: int,
    level: int,
    max_timestamp: int,
    max_message_bytes: int,
) -> BatchHeader | InvalidBatch:
    """The batch of `header` holding `records` (its records, uncompressed) in `codec` at `level`,
    carrying `max_timestamp`; or MESSAGE_TOO_LARGE when it no longer fits `max_message_bytes`.

    Only a batch whose CRC and records were validated may be rewritten: the new CRC would hide a
    corruption. A codec that fails (a level no topic config accepts, given through the library's
    API) fails this batch only, as UNKNOWN_SERVER_ERROR, as Kafka answers a failed append.
    """
    assert codec in CODEC_NAMES and codec != header.attributes & COMPRESSION_MASK, codec
    if codec:
        try:
            payload: Payload = COMPRESSORS[codec](records, level)
        except Exception as error:  # the codecs raise several unrelated exception types
            return InvalidBatch(
                ErrorCode.UNKNOWN_SERVER_ERROR,
                f"recompression to {CODEC_NAMES[codec]} at level {level} failed: {error}",
            )
    else:
        payload = records
    size = HEADER_SIZE + len(payload)
    if size > max_message_bytes:
        return InvalidBatch(
            ErrorCode.MESSAGE_TOO_LARGE,
            f"batch of {size} bytes after recompression to {CODEC_NAMES[codec]} exceeds "
            f"max.message.bytes {max_message_bytes}",
        )
    head = bytearray(header.bytes_view()[:HEADER_SIZE])
    _INT32.pack_into(head, _LENGTH_AT, size - LOG_OVERHEAD)
    _INT16.pack_into(head, _ATTRIBUTES_AT, header.attributes & ~COMPRESSION_MASK | codec)
    _INT64.pack_into(head, _MAX_TIMESTAMP_AT, max_timestamp)
    crc = crc32c.crc32c(payload, crc32c.crc32c(memoryview(head)[_ATTRIBUTES_AT:]))
    _UINT32.pack_into(head, _CRC_AT, crc)
    return BatchHeader(memoryview(b"".join((head, payload))))
