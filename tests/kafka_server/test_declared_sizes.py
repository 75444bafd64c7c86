"""Declared sizes are checked before kio's native reader sees a request body.

kio reserves memory for an array's declared count before reading its items, so a tiny frame
declaring billions of items used to abort the broker process ("memory allocation failed").
The crafted frames below are decoded in a child process under an address-space limit: should
the check ever stop covering an array, the child dies and the test fails, rather than the test
run itself being killed.
"""

from __future__ import annotations

import dataclasses
import io
import os
import random
import struct
import sys
import textwrap

import hypothesis
import pytest
from hypothesis import HealthCheck, given, settings
from kio.index import load_request_schema
from kio.serial import entity_writer
from kio.serial._introspect import EntityField, EntityTupleField, classify_field, get_field_tag
from kio.static.primitive import i16, i32

from diskless.kafka_server import SUPPORTED_VERSIONS
from diskless.kafka_server._protocol._declared_sizes import DeclaredSizeError, check_declared_sizes
from diskless.kafka_server._protocol.codec import FrameError, decode_request
from testkit.processes import run_in_bounded_memory
from tests.kafka_server._strategies import requests

SEED = int(os.environ.get("KAFKA_FUZZ_SEED", random.randrange(2**32)))
CHILD_ADDRESS_SPACE = 3 * 1024**3
"""Far below what a declared count of 2^31 items makes kio reserve (16 GiB and more)."""
HUGE_LEGACY_COUNT = struct.pack(">i", 2**31 - 1)
HUGE_COMPACT_COUNT = b"\xff\xff\xff\xff\x0f"  # varint 2^32 - 1: 2^32 - 2 items


def _supported_schemas() -> list[type]:
    return [
        load_request_schema(int(key), version)
        for key, (low, high) in sorted(SUPPORTED_VERSIONS.items())
        for version in range(low, high + 1)
    ]


def _least_value(field: dataclasses.Field[object], flexible: bool) -> bytes:
    """The shortest encoding of a scalar field: zeros, an empty string, an entity of those."""
    kind = classify_field(field)
    if isinstance(kind, EntityField):
        return b"\x01" + _up_to_array(kind.type_, depth=-1)
    kafka_type = field.metadata["kafka_type"]
    sizes = {"bool": 1, "int8": 1, "int16": 2, "int32": 4, "int64": 8, "uuid": 16}
    sizes |= {"timedelta_i32": 4, "timedelta_i64": 8, "error_code": 2, "float64": 8}
    if kafka_type in sizes:
        return bytes(sizes[kafka_type])
    if flexible:
        return b"\x01"
    return bytes(2 if kafka_type == "string" else 4)


def _up_to_array(schema: type, depth: int) -> bytes:
    """A body cut right after a huge count, declared for the first array found `depth` arrays
    deep along the path of first arrays (each outer one declaring one item); a whole minimal
    entity when `depth` is negative or the schema has no array on that path."""
    flexible = schema.__flexible__
    encoded = b""
    for field in dataclasses.fields(schema):
        if get_field_tag(field) is not None:
            continue
        kind = classify_field(field)
        if not kind.is_array or depth < 0:
            encoded += _least_value(field, flexible)
            continue
        if depth == 0 or not isinstance(kind, EntityTupleField):
            return encoded + (HUGE_COMPACT_COUNT if flexible else HUGE_LEGACY_COUNT)
        one = b"\x02" if flexible else struct.pack(">i", 1)
        return encoded + one + _up_to_array(kind.type_, depth - 1)
    return encoded + (b"\x00" if flexible else b"")


def _header(schema: type) -> bytes:
    header = schema.__header_schema__(
        request_api_key=i16(schema.__api_key__),
        request_api_version=i16(schema.__version__),
        correlation_id=i32(7),
        client_id="hostile",
    )
    return _encoded(header)


def _hostile_frames() -> list[tuple[str, bytes]]:
    frames = []
    for schema in _supported_schemas():
        for depth in range(3):
            body = _up_to_array(schema, depth)
            if body.endswith((HUGE_COMPACT_COUNT, HUGE_LEGACY_COUNT)):
                frames.append((f"{schema.__module__} depth {depth}", _header(schema) + body))
    return frames


def _encoded(entity: object) -> bytes:
    buffer = io.BytesIO()
    entity_writer(type(entity))(buffer, entity)  # type: ignore[arg-type]
    return buffer.getvalue()


def test_every_supported_request_has_an_array_the_hostile_frames_reach() -> None:
    names = {name.rsplit(".", 2)[0] for name, _ in _hostile_frames()}
    # APIs without arrays: ApiVersions, Heartbeat, InitProducerId, AddOffsetsToTxn, EndTxn,
    # DescribeAcls, SaslHandshake, SaslAuthenticate, DescribeCluster.
    assert len(names) >= len(SUPPORTED_VERSIONS) - 9


def test_a_huge_declared_count_is_refused_before_kio_allocates() -> None:
    """Every supported (api, version), arrays at three depths: each frame is refused with a
    FrameError naming the count, in a child whose address space could not hold kio's vector."""
    frames = _hostile_frames()
    script = textwrap.dedent(
        """
        import sys
        from diskless.kafka_server._protocol.codec import FrameError, decode_request, request_schema
        from diskless.kafka_server._protocol.codec import read_prefix
        refused = 0
        for line in sys.stdin.read().split():
            frame = bytes.fromhex(line)
            prefix = read_prefix(frame)
            try:
                decode_request(frame, request_schema(prefix.api_key, prefix.api_version))
            except FrameError as e:
                assert "declared" in str(e), e
                refused += 1
        print(refused)
        """
    )

    child = run_in_bounded_memory(
        [sys.executable, "-c", script],
        CHILD_ADDRESS_SPACE,
        timeout_s=120,
        input="\n".join(frame.hex() for _, frame in frames),
    )
    assert child.returncode == 0, child.stderr[-3000:]
    assert int(child.stdout) == len(frames)


@hypothesis.seed(SEED)
@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(body=requests())
def test_a_well_formed_body_walks_to_its_exact_end_and_a_cut_one_is_refused(body: object) -> None:
    print(f"seed: {SEED} (set KAFKA_FUZZ_SEED to replay)")
    data = _encoded(body)
    assert check_declared_sizes(type(body), data, 0) == len(data)  # type: ignore[arg-type]
    assert check_declared_sizes(type(body), b"xyz" + data, 3) == len(data) + 3  # type: ignore[arg-type]
    for cut in {0, len(data) // 3, len(data) // 2, len(data) - 1} & set(range(len(data))):
        with pytest.raises(DeclaredSizeError):  # never an end position beyond the bytes given
            check_declared_sizes(type(body), data[:cut], 0)  # type: ignore[arg-type]


def test_a_string_longer_than_the_frame_is_refused() -> None:
    produce = load_request_schema(0, 3)  # transactional_id: nullable int16-length string
    with pytest.raises(DeclaredSizeError, match="string of bytes of 300 declared"):
        check_declared_sizes(produce, b"\x01\x2c" + bytes(10), 0)


def test_decode_request_names_the_overrun() -> None:
    metadata = load_request_schema(3, 1)  # the body is one array: the topics
    with pytest.raises(FrameError, match="array of items of 2147483647 declared"):
        decode_request(_header(metadata) + HUGE_LEGACY_COUNT, metadata)
