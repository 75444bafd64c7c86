"""Building kio entities: a response described once for every version of its API.

Handlers name each value as kio names the field; `build` keeps those the schema's version has.
Nested entity classes (a topic's entry, a partition's) are looked up next to the response class,
so the same code builds the entries of whichever version was asked for.
"""

from __future__ import annotations

import dataclasses
import sys
from collections.abc import Mapping, Sequence
from typing import Protocol, TypeGuard, TypeVar

from kio.schema.errors import ErrorCode as WireError
from kio.static.protocol import Entity, ResponsePayload

from diskless._types import ErrorCode, TopicPartition

Built = TypeVar("Built", bound=Entity)


def build(schema: type[Built], **values: object) -> Built:
    """An instance of a kio entity from the values its version has; others are dropped.

    Handlers describe a response once for all versions and let the schema pick its fields. The
    values are typed `object`: which fields a version has is known only at run time, and kio's
    dataclass constructor checks nothing either, so the response tests are what check them.
    """
    names = fields_of(schema)
    return schema(**{name: value for name, value in values.items() if name in names})


_FIELD_NAMES: dict[type[Entity], frozenset[str]] = {}


def fields_of(schema: type[Entity]) -> frozenset[str]:
    """The field names of `schema`, per schema once: `build` runs for every entry of a response
    (100,000 in a large one)."""
    names = _FIELD_NAMES.get(schema)
    if names is None:
        names = _FIELD_NAMES[schema] = frozenset(f.name for f in dataclasses.fields(schema))
    return names


def nested(schema: type[Entity], name: str) -> type[Entity]:
    """A nested entity class defined next to `schema` (same API and version)."""
    found: object = getattr(sys.modules[schema.__module__], name)
    if not _is_entity_class(found):
        raise TypeError(f"{schema.__module__}.{name} is not a kio entity")
    return found


def _is_entity_class(value: object) -> TypeGuard[type[Entity]]:
    return (
        isinstance(value, type) and dataclasses.is_dataclass(value) and hasattr(value, "__type__")
    )


class _TopicPartitions(Protocol):
    @property
    def name(self) -> str: ...

    @property
    def partitions(self) -> Sequence[_PartitionIndex]: ...


class _PartitionIndex(Protocol):
    @property
    def partition_index(self) -> int: ...


def partition_errors(
    response: type[ResponsePayload],
    topic_entity: str,
    partition_entity: str,
    topics: Sequence[_TopicPartitions],
    errors: Mapping[TopicPartition, object],
    unanswered: object,
) -> tuple[Entity, ...]:
    """The topics of a response that answers each requested partition with an error code alone
    (OffsetCommit, TxnOffsetCommit): `errors` per partition, `unanswered` for the others."""
    topic_entry = nested(response, topic_entity)
    partition_entry = nested(response, partition_entity)
    return tuple(
        build(
            topic_entry,
            name=topic.name,
            partitions=tuple(
                build(
                    partition_entry,
                    partition_index=p.partition_index,
                    error_code=errors.get(
                        TopicPartition(topic.name, int(p.partition_index)), unanswered
                    ),
                )
                for p in topic.partitions
            ),
        )
        for topic in topics
    )


def wire(code: ErrorCode) -> WireError:
    """A protocol outcome of the library, with the same number on the wire."""
    return WireError(int(code))
