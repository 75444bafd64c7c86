"""Kafka wire framing and message codec over kio's generated schemas.

A Kafka request on the wire is `int32 size` followed by `size` bytes: a request header (api key,
api version, correlation id, client id; plus tagged fields from header v2, used by flexible
versions) and the request body. A response is `int32 size`, a response header (correlation id;
tagged fields from header v1) and the body. kio knows, for every (api key, version) it models,
the body schema and which header version goes with it; this module only adds the framing, the
limits, and errors that say what was wrong with a frame.

ApiVersions is the one exception to the header rule: its response always uses header v0, so that a
client can read the answer to a version it sent before knowing what the broker supports (kio's
ApiVersionsResponse schemas already say so).

A response is encoded into buffers, not one bytes object (`encode_response_parts`): a large
value (a Fetch response's records) is referred to, not copied into the frame, and the connection
writes the buffers one after the other.
"""

from __future__ import annotations

import dataclasses
import datetime
import functools
import io
import struct
import types
import typing
from typing import Final, NamedTuple

from kio.index import UnknownAPIKey, UnknownEntity, load_request_schema, load_response_schema
from kio.schema.request_header.v1.header import RequestHeader as RequestHeaderV1
from kio.schema.request_header.v2.header import RequestHeader as RequestHeaderV2
from kio.schema.response_header.v0.header import ResponseHeader as ResponseHeaderV0
from kio.schema.response_header.v1.header import ResponseHeader as ResponseHeaderV1
from kio.serial import entity_reader, entity_writer
from kio.static.primitive import i32
from kio.static.protocol import RequestPayload, ResponsePayload

from diskless.kafka_server._protocol._declared_sizes import check_declared_sizes
from diskless.kafka_server._protocol.recurring import RECURRING, RecurringRequests

FRAME_BYTES_MAX: Final = 100 * 1024 * 1024
"""Kafka's `socket.request.max.bytes` default: a larger size prefix closes the connection."""
FRAME_SIZE: Final = struct.Struct(">i")
FIXED_HEADER: Final = struct.Struct(">hhi")
"""api key, api version, correlation id: the same in every request header version."""


class FrameError(Exception):
    """A request that cannot be decoded; the connection is closed after logging `str(self)`."""


class RequestPrefix(NamedTuple):
    """The part of every request header that does not depend on the header version."""

    api_key: int
    api_version: int
    correlation_id: int


class DecodedRequest(NamedTuple):
    prefix: RequestPrefix
    client_id: str | None
    body: RequestPayload
    """A kio request entity of the schema for (api key, api version)."""


def read_prefix(frame: bytes | memoryview) -> RequestPrefix:
    if len(frame) < FIXED_HEADER.size:
        raise FrameError(f"request of {len(frame)} bytes is shorter than a request header")
    api_key, api_version, correlation_id = FIXED_HEADER.unpack_from(frame)
    return RequestPrefix(api_key, api_version, correlation_id)


@functools.cache  # kio imports its class by name on every call: once per (key, version) here
def request_schema(api_key: int, api_version: int) -> type[RequestPayload] | None:
    """kio's request class for (api key, version), or None when kio does not model it."""
    try:
        return load_request_schema(api_key, api_version)
    except (UnknownAPIKey, UnknownEntity):
        return None


def response_schema(api_key: int, api_version: int) -> type[ResponsePayload]:
    return load_response_schema(api_key, api_version)


def decode_request(frame: bytes | memoryview, schema: type[RequestPayload]) -> DecodedRequest:
    """Parse the header and body of `frame` with `schema`; FrameError when they do not parse.

    The body must use the whole frame: trailing bytes mean the client and the broker disagree
    on the schema, and answering would only make the disagreement harder to see. The one
    exception is librdkafka's all-topics Metadata request (`_librdkafka_null_topics`).
    A small Fetch that recurs byte for byte (an idle consumer's) is decoded once
    (`recurring.RecurringRequests`).
    """
    prefix = read_prefix(frame)
    if prefix.api_key != _FETCH or len(frame) > RECURRING_FRAME_BYTES_MAX:
        return _decode_request(frame, schema)
    key = (schema, bytes(frame[FIXED_HEADER.size :]))
    known = _RECURRING_FETCHES.decoded(key, lambda: _decode_request(frame, schema))
    return DecodedRequest(prefix, known.client_id, known.body)


_FETCH: Final = 1
RECURRING_FRAME_BYTES_MAX: Final = 1024
_RECURRING_FETCHES: Final[RecurringRequests[DecodedRequest]] = RecurringRequests()


def _decode_request(frame: bytes | memoryview, schema: type[RequestPayload]) -> DecodedRequest:
    prefix = read_prefix(frame)
    header_schema: type[RequestHeaderV1] | type[RequestHeaderV2] = schema.__header_schema__
    try:
        header, header_size = entity_reader(header_schema)(frame, 0)
        check_declared_sizes(schema, frame, header_size)
        body, body_size = entity_reader(schema)(frame, header_size)
    except Exception as e:  # kio raises many kinds (ValueError, IndexError, UnicodeError, ...)
        raise FrameError(
            f"api key {prefix.api_key} v{prefix.api_version} does not decode: {e!r}"
        ) from None
    trailing = frame[header_size + body_size :]
    if (
        trailing
        and not _librdkafka_null_topics(prefix, body, len(frame) - header_size)
        and not _librdkafka_extra_tags(prefix, trailing)
    ):
        raise FrameError(
            f"api key {prefix.api_key} v{prefix.api_version}: "
            f"{len(frame) - header_size - body_size} bytes after the body"
        )
    null_field = _null_where_not_nullable(body)
    if null_field is not None:
        raise FrameError(
            f"api key {prefix.api_key} v{prefix.api_version}: {null_field} is null, "
            "which the schema does not allow"
        )
    return DecodedRequest(prefix, header.client_id, body)


def _null_where_not_nullable(entity: object) -> str | None:
    """The first field holding null although its schema is not nullable (kio reads a null array
    or string without looking at the schema's nullability), as Kafka refuses such a request."""
    for name, nullable, holds_entities in _null_checks(type(entity)):
        value = getattr(entity, name)
        if value is None:
            if not nullable:
                return name
        elif holds_entities:
            for item in value:
                inner = _null_where_not_nullable(item)
                if inner is not None:
                    return f"{name}.{inner}"
    return None


_NULL_CHECKS: Final[dict[type, tuple[tuple[str, bool, bool], ...]]] = {}
_NEVER_NULL: Final = (int, float, datetime.timedelta)
"""Field types kio always reads as a value (numbers, booleans, durations): nothing to check."""


def _null_checks(schema: type) -> tuple[tuple[str, bool, bool], ...]:
    """(field name, whether it may be null, whether it is an array of entities) of the fields
    of an entity class that could hold null, or entities that could: computed once per class,
    so that a request's check visits only strings, bytes and arrays."""
    known = _NULL_CHECKS.get(schema)
    if known is None:
        checks = []
        hints = typing.get_type_hints(schema)
        for field in dataclasses.fields(schema):
            hint = hints[field.name]
            args = typing.get_args(hint)
            nullable = types.NoneType in args
            base = next((a for a in args if a is not types.NoneType), hint) if nullable else hint
            if isinstance(base, type) and issubclass(base, _NEVER_NULL):
                continue
            items = typing.get_args(base) if typing.get_origin(base) is tuple else ()
            holds_entities = bool(items) and dataclasses.is_dataclass(items[0])
            if nullable and not holds_entities:
                continue
            checks.append((field.name, nullable, holds_entities))
        known = _NULL_CHECKS[schema] = tuple(checks)
    return known


_METADATA: Final = 3
_METADATA_FLEXIBLE: Final = 9
_NULL_ARRAY_PLACEHOLDER: Final = 4
"""librdkafka reserves 4 bytes for an array's count and, for a null compact array, leaves them
all zero instead of shrinking them to the one-byte varint."""


def _librdkafka_null_topics(prefix: RequestPrefix, body: RequestPayload, body_size: int) -> bool:
    """librdkafka's Metadata v9+ for all topics: the topics array is null (varint 0) followed by
    3 more zero bytes. Kafka ignores the bytes left after the body, so it reads that request as
    all topics, no auto-creation, nothing more; the decoded body says the same."""
    return (
        prefix.api_key == _METADATA
        and prefix.api_version >= _METADATA_FLEXIBLE
        and getattr(body, "topics", ()) is None
        and body_size == _NULL_ARRAY_PLACEHOLDER - 1 + len(_encoded(body))
    )


_ALTER_USER_SCRAM_CREDENTIALS: Final = 51


def _librdkafka_extra_tags(prefix: RequestPrefix, trailing: bytes | memoryview) -> bool:
    """librdkafka's AlterUserScramCredentials ends with one more empty tagged-field section
    (a zero byte) after the body's own. Kafka ignores the bytes left after the body."""
    return prefix.api_key == _ALTER_USER_SCRAM_CREDENTIALS and bytes(trailing) == b"\0"


def _encoded(body: RequestPayload | ResponsePayload) -> bytes:
    buffer = io.BytesIO()
    entity_writer(type(body))(buffer, body)
    return buffer.getvalue()


Frame = bytes | tuple[bytes | memoryview, ...]
"""A framed response: one buffer, or buffers to write one after the other."""
PART_BYTES_MIN: Final = 16 * 1024
"""A `bytes` value at least this large (a Fetch response's records) is written by reference, not
copied into the frame: one more buffer to write costs less than copying it."""


class _Gather:
    """What kio writes a response into: small writes are copied together, a large `bytes` value
    (immutable) is kept by reference, each as one buffer of the frame. The first buffer starts
    with the size prefix, filled in at the end."""

    __slots__ = ("_head", "_small", "parts", "size")

    def __init__(self) -> None:
        self.parts: list[bytes | memoryview] = []
        self._small = bytearray(FRAME_SIZE.size)
        self._head: bytearray | None = None
        self.size = 0
        """Bytes written, after the size prefix."""

    def write(self, data: bytes | bytearray | memoryview) -> int:
        size = len(data)
        self.size += size
        if size >= PART_BYTES_MIN and type(data) is bytes:
            self._flush()
            self.parts.append(memoryview(data))  # a partial send slices it without a copy
        else:
            self._small += data
        return size

    def _flush(self) -> None:
        if self._head is None:  # the prefix and what came before the first large value
            self._head = self._small
            self.parts.append(memoryview(self._head))
            self._small = bytearray()
        elif self._small:
            self.parts.append(bytes(self._small))
            self._small.clear()

    def frame(self) -> Frame:
        """The size prefix and what was written."""
        self._flush()
        assert self._head is not None
        FRAME_SIZE.pack_into(self._head, 0, self.size)
        if len(self.parts) == 1:
            return bytes(self._head)
        return tuple(self.parts)


def encode_response(correlation_id: int, body: ResponsePayload) -> bytes:
    """The framed response: size prefix, the header version the schema uses, the body."""
    frame = encode_response_parts(correlation_id, body)
    return frame if isinstance(frame, bytes) else b"".join(frame)


def encode_response_parts(correlation_id: int, body: ResponsePayload) -> Frame:
    """`encode_response` without copying large values (a Fetch response's records) into the
    frame: the buffers to write one after the other, or one buffer when there is no such value."""
    gather = _Gather()
    buffer = typing.cast(typing.IO[bytes], gather)  # kio only calls its `write`
    header_schema = type(body).__header_schema__
    header: ResponseHeaderV0 | ResponseHeaderV1
    if header_schema is ResponseHeaderV1:
        header = ResponseHeaderV1(correlation_id=i32(correlation_id))
        entity_writer(ResponseHeaderV1)(buffer, header)
    else:
        assert header_schema is ResponseHeaderV0, header_schema
        header = ResponseHeaderV0(correlation_id=i32(correlation_id))
        entity_writer(ResponseHeaderV0)(buffer, header)
    if RECURRING.holds(body):  # a response that recurs unchanged: encoded once
        encoded = RECURRING.body_of(body)
        if encoded is None:
            encoded = _encoded(body)
            RECURRING.remember(body, encoded)
        buffer.write(encoded)
    else:
        entity_writer(type(body))(buffer, body)
    return gather.frame()
