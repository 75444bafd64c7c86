"""Kafka's signed varints (zigzag, then base-128), as records carry them: one writer and one
reader for every Python walk over records (the produce path's walk is the C one).

The reader never trusts the bytes: a varint that runs past `end` or past its size (5 bytes for
an int, 10 for a long) raises `MalformedVarint`, and each caller turns it into its own outcome
(an `InvalidBatch`, an `UncleanableBatch`). Hot walks decode a one-byte varint inline and call
`read_varint` only for longer ones.
"""

from __future__ import annotations

from typing import Final

VARINT_BYTES_MAX: Final = 5
"""An int's varint (a length, an offset delta, a key or value length)."""
VARLONG_BYTES_MAX: Final = 10
"""A long's varint (a timestamp delta)."""


class MalformedVarint(Exception):
    """The bytes at a position do not decode as a varint within its bounds."""


def zigzag(value: int) -> bytes:
    """Kafka's signed varint (varlong) encoding of `value`."""
    encoded = (value << 1) ^ (value >> 63)
    out = bytearray()
    while encoded & ~0x7F:
        out.append((encoded & 0x7F) | 0x80)
        encoded >>= 7
    out.append(encoded)
    return bytes(out)


def read_varint(
    buffer: bytes | memoryview, position: int, end: int, bytes_max: int
) -> tuple[int, int]:
    """The signed varint at `position` (of at most `bytes_max` bytes, before `end`): its value
    and the position after it; `MalformedVarint` when it does not decode."""
    raw = 0
    for shift in range(0, 7 * bytes_max, 7):
        if position >= end:
            raise MalformedVarint(f"a varint runs past {end}")
        byte = buffer[position]
        position += 1
        raw |= (byte & 0x7F) << shift
        if not byte & 0x80:
            return (raw >> 1) ^ -(raw & 1), position
    raise MalformedVarint(f"a varint longer than {bytes_max} bytes before {position}")
