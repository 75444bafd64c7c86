"""Hypothesis strategies for well-formed Kafka requests of any advertised API and version.

Built from kio's schemas: every field gets values of its wire type, biased towards the values
that matter (existing topic names, small and boundary integers, real record batches), so that
requests decode and reach the handlers with odd but legal contents.
"""

from __future__ import annotations

import dataclasses
import datetime
import functools
from typing import Any

from hypothesis import strategies as st
from kio.index import load_request_schema
from kio.schema.errors import ErrorCode as WireError
from kio.serial._introspect import (
    EntityField,
    EntityTupleField,
    PrimitiveTupleField,
    classify_field,
    is_optional,
)

from diskless.kafka_server import SUPPORTED_VERSIONS
from testkit.wal import build_batch

TOPICS = ("fuzzed", "unknown-topic")
"""The first exists in the fuzzing cluster, the second does not."""

_WAIT_MS_MAX = 50
"""Timeouts in generated requests stay short: a fuzz run must not sit in long polls."""


def _integers(bits: int) -> st.SearchStrategy[int]:
    low, high = -(2 ** (bits - 1)), 2 ** (bits - 1) - 1
    return st.one_of(st.integers(-2, 3), st.sampled_from([low, high]), st.integers(low, high))


def _records() -> st.SearchStrategy[bytes]:
    batches = st.builds(
        lambda n, pid, seq: build_batch(
            [b"v%d" % i for i in range(n)],
            producer_id=pid,
            producer_epoch=0 if pid >= 0 else -1,
            base_sequence=seq if pid >= 0 else -1,
        ),
        st.integers(1, 5),
        st.sampled_from([-1, 0, 1, 2**40]),
        st.integers(0, 10),
    )
    return st.one_of(batches, st.binary(max_size=80), batches.map(lambda b: b[:-1] + b"\x00"))


def _primitive(kafka_type: str, name: str) -> st.SearchStrategy[Any]:
    if kafka_type == "int8":
        return _integers(8)
    if kafka_type in ("int16", "uint16"):
        return _integers(16) if kafka_type == "int16" else st.integers(0, 2**16 - 1)
    if kafka_type == "int32":
        return _integers(32)
    if kafka_type == "int64":
        return _integers(64)
    if kafka_type == "string":
        return st.one_of(st.sampled_from(TOPICS), st.text(max_size=10))
    if kafka_type == "bool":
        return st.booleans()
    if kafka_type in ("bytes", "records"):
        return _records()
    if kafka_type == "uuid":
        return st.one_of(st.none(), st.uuids())
    if kafka_type == "error_code":
        return st.sampled_from(list(WireError))
    if kafka_type == "timedelta_i64":
        return st.integers(-1, 10**9).map(lambda ms: datetime.timedelta(milliseconds=ms))
    if kafka_type == "timedelta_i32":
        return st.integers(0, _WAIT_MS_MAX).map(lambda ms: datetime.timedelta(milliseconds=ms))
    if kafka_type == "float64":
        return st.floats(allow_nan=False)
    raise AssertionError(f"no strategy for kafka type {kafka_type!r} (field {name})")


def _field(field: dataclasses.Field[Any]) -> st.SearchStrategy[Any]:
    kind = classify_field(field)
    strategy: st.SearchStrategy[Any]
    if isinstance(kind, EntityField):
        strategy = entity(kind.type_)
    elif isinstance(kind, EntityTupleField):
        strategy = st.lists(entity(kind.type_), max_size=3).map(tuple)
    elif isinstance(kind, PrimitiveTupleField):
        item = _primitive(field.metadata["kafka_type"], field.name)
        strategy = st.lists(item, max_size=4).map(tuple)
    else:
        strategy = _primitive(field.metadata["kafka_type"], field.name)
    if is_optional(field):
        strategy = st.one_of(st.none(), strategy)
    return strategy


@functools.cache
def entity(schema: type[Any]) -> st.SearchStrategy[Any]:
    return st.builds(schema, **{f.name: _field(f) for f in dataclasses.fields(schema)})


def requests() -> st.SearchStrategy[Any]:
    """A request entity of any advertised (api key, version)."""
    schemas = [
        load_request_schema(int(key), version)
        for key, (low, high) in sorted(SUPPORTED_VERSIONS.items())
        for version in range(low, high + 1)
    ]
    return st.sampled_from(schemas).flatmap(entity)
