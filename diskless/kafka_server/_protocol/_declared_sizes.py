"""Declared sizes checked against the frame before kio reads a request body.

kio's native reader reserves room for an array's declared item count before it reads a single
item. A frame of a few bytes that declares 2^32 items therefore makes it allocate tens of
gigabytes, and a failed allocation in native code aborts the whole process instead of raising.
One malformed request must close one connection, never kill the broker: `check_declared_sizes`
first walks the body along its schema, moving over each field by its declared size without
building anything, and refuses an array whose items cannot fit in the bytes left, and any size
that runs past the end of the frame. What it lets through, kio then reads for real; whatever
else is wrong with the body (a negative length, an unknown tag, bad UTF-8) is kio's to report.

Each field's encoding follows the schema's version: flexible versions use compact (varint)
lengths and end every entity with tagged fields; older ones use fixed-width lengths.
"""

from __future__ import annotations

import dataclasses
import functools
import struct
from collections.abc import Callable
from typing import Final, NamedTuple

from kio.serial._introspect import (
    EntityField,
    EntityTupleField,
    PrimitiveField,
    PrimitiveTupleField,
    classify_field,
    get_field_tag,
    get_schema_field_type,
    is_optional,
)
from kio.static.protocol import Entity

Buffer = bytes | memoryview
Skip = Callable[[Buffer, int, int], int]
"""(frame, position, end) -> the position after one value; raises DeclaredSizeError."""


class DeclaredSizeError(ValueError):
    """A size or count in the frame that the bytes after it cannot hold."""


class _Encoding(NamedTuple):
    skip: Skip
    min_size: int
    """The fewest bytes a value takes: bounds an array's item count by the bytes left."""
    fixed_size: int | None
    """Set when every value takes exactly that many bytes: an array of them is skipped whole."""


def check_declared_sizes(schema: type[Entity], frame: Buffer, offset: int) -> int:
    """Where the body at `offset` ends; DeclaredSizeError if a size in it overruns `frame`."""
    return _entity(schema).skip(frame, offset, len(frame))


_FIXED_SIZES: Final = {
    "bool": 1,
    "int8": 1,
    "uint8": 1,
    "int16": 2,
    "uint16": 2,
    "error_code": 2,
    "int32": 4,
    "uint32": 4,
    "timedelta_i32": 4,
    "int64": 8,
    "uint64": 8,
    "float64": 8,
    "timedelta_i64": 8,
    "datetime_i64": 8,
    "uuid": 16,
}
_INT16: Final = struct.Struct(">h")
_INT32: Final = struct.Struct(">i")
_NULL_ENTITY_MARKER: Final = 0xFF
"""An int8 -1 before a nullable struct (KIP-893) says it is null."""
_TAG_MIN_SIZE: Final = 2
"""A tagged field is at least its tag and its size, one varint byte each."""


def _past_end(what: str, size: int, position: int, end: int) -> DeclaredSizeError:
    return DeclaredSizeError(
        f"{what} of {size} declared at byte {position} with {end - position} bytes left"
    )


def _read_uvarint(frame: Buffer, position: int, end: int) -> tuple[int, int]:
    if position < end and frame[position] < 0x80:  # one byte, the usual case
        return frame[position], position + 1
    value = shift = 0
    while position < end:
        byte = frame[position]
        position += 1
        value |= (byte & 0x7F) << shift
        if byte < 0x80:
            return value, position
        shift += 7
        if shift > 28:
            raise DeclaredSizeError(f"varint longer than 5 bytes before byte {position}")
    raise DeclaredSizeError("the frame ends inside a varint")


def _read_fixed(layout: struct.Struct, frame: Buffer, position: int, end: int) -> int:
    if position + layout.size > end:
        raise DeclaredSizeError("the frame ends inside a length")
    value: int = layout.unpack_from(frame, position)[0]
    return value


def _skip_bytes(length: int, position: int, end: int) -> int:
    if length > end - position:
        raise _past_end("a string of bytes", length, position, end)
    return position + max(length, 0)  # a negative length is null, or kio's error to report


def _fixed(size: int) -> _Encoding:
    def skip(frame: Buffer, position: int, end: int) -> int:
        if position + size > end:
            raise _past_end("a field", size, position, end)
        return position + size

    return _Encoding(skip, size, size)


def _compact_bytes(frame: Buffer, position: int, end: int) -> int:
    length_plus_one, position = _read_uvarint(frame, position, end)
    return _skip_bytes(length_plus_one - 1, position, end)


def _legacy_string(frame: Buffer, position: int, end: int) -> int:
    return _skip_bytes(_read_fixed(_INT16, frame, position, end), position + _INT16.size, end)


def _legacy_bytes(frame: Buffer, position: int, end: int) -> int:
    return _skip_bytes(_read_fixed(_INT32, frame, position, end), position + _INT32.size, end)


def _primitive(kafka_type: str, flexible: bool) -> _Encoding:
    fixed = _FIXED_SIZES.get(kafka_type)
    if fixed is not None:
        return _fixed(fixed)
    if kafka_type not in ("string", "bytes", "records"):
        raise TypeError(f"no wire encoding known for kafka type {kafka_type!r}")
    if flexible:
        return _Encoding(_compact_bytes, 1, None)
    if kafka_type == "string":
        return _Encoding(_legacy_string, _INT16.size, None)
    return _Encoding(_legacy_bytes, _INT32.size, None)


def _array(item: _Encoding, flexible: bool) -> _Encoding:
    item_skip, item_min, item_fixed = item
    least = max(item_min, 1)

    def skip(frame: Buffer, position: int, end: int) -> int:
        if flexible:
            count_plus_one, position = _read_uvarint(frame, position, end)
            count = count_plus_one - 1
        else:
            count = _read_fixed(_INT32, frame, position, end)
            position += _INT32.size
        if count <= 0:
            return position  # empty, null, or a negative count kio refuses
        if count * least > end - position:
            raise _past_end("an array of items", count, position, end)
        if item_fixed is not None:
            return position + count * item_fixed
        for _ in range(count):
            position = item_skip(frame, position, end)
        return position

    return _Encoding(skip, 1 if flexible else _INT32.size, None)


def _nullable(entity: _Encoding) -> _Encoding:
    entity_skip = entity.skip

    def skip(frame: Buffer, position: int, end: int) -> int:
        if position >= end:
            raise DeclaredSizeError("the frame ends before a nullable struct's marker")
        if frame[position] == _NULL_ENTITY_MARKER:
            return position + 1
        return entity_skip(frame, position + 1, end)

    return _Encoding(skip, 1, None)


def _field(field: dataclasses.Field[object], flexible: bool, tagged: bool) -> _Encoding:
    kind = classify_field(field)
    if isinstance(kind, (EntityField, EntityTupleField)):
        encoding = _entity(kind.type_)
        if isinstance(kind, EntityField) and is_optional(field) and not tagged:
            encoding = _nullable(encoding)
    else:
        assert isinstance(kind, (PrimitiveField, PrimitiveTupleField))
        encoding = _primitive(get_schema_field_type(field), flexible)
    return _array(encoding, flexible) if kind.is_array else encoding


@functools.cache
def _entity(schema: type[Entity]) -> _Encoding:
    flexible: bool = schema.__flexible__
    steps: list[int | Skip] = []
    """Each field's skip, except that a run of fixed-size fields is one number of bytes."""
    tagged: dict[int, Skip] = {}
    least = 0
    for field in dataclasses.fields(schema):
        tag = get_field_tag(field)
        if tag is not None:
            tagged[tag] = _field(field, flexible, tagged=True).skip
            continue
        encoding = _field(field, flexible, tagged=False)
        least += encoding.min_size
        if encoding.fixed_size is None:
            steps.append(encoding.skip)
        elif steps and isinstance(steps[-1], int):
            steps[-1] += encoding.fixed_size
        else:
            steps.append(encoding.fixed_size)
    if not flexible and all(isinstance(step, int) for step in steps):
        return _fixed(least)
    frozen = tuple(steps)

    def skip(frame: Buffer, position: int, end: int) -> int:
        # Past `end` after a fixed run, the next read of a length refuses the frame, or the
        # check below does.
        for step in frozen:
            if isinstance(step, int):
                position += step
            else:
                position = step(frame, position, end)
        if flexible:
            if position < end and frame[position] == 0:
                position += 1  # no tagged fields, the usual case
            else:
                position = _skip_tagged_fields(tagged, frame, position, end)
        if position > end:
            raise DeclaredSizeError(f"{schema.__name__} runs {position - end} bytes past the end")
        return position

    return _Encoding(skip, least + 1 if flexible else least, None)


def _skip_tagged_fields(tagged: dict[int, Skip], frame: Buffer, position: int, end: int) -> int:
    """A known tag's value is walked within its declared size; an unknown one is kio's to refuse."""
    count, position = _read_uvarint(frame, position, end)
    if count * _TAG_MIN_SIZE > end - position:
        raise _past_end("tagged fields", count, position, end)
    for _ in range(count):
        tag, position = _read_uvarint(frame, position, end)
        size, position = _read_uvarint(frame, position, end)
        value_end = _skip_bytes(size, position, end)
        skip_value = tagged.get(tag)
        if skip_value is not None:
            skip_value(frame, position, value_end)
        position = value_end
    return position
