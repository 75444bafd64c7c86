"""The error codes a response carries, for the request error metrics: Kafka's `errorCounts`, read
once for every response class from its declared fields instead of written per API."""

from __future__ import annotations

import dataclasses
import types
import typing
from typing import Any


def error_codes(response: object) -> list[int]:
    """Every error code other than NONE in `response` (one per partition, topic or request that
    failed), found through its nested entities."""
    found: list[int] = []
    _walk(response, found)
    return found


def _walk(value: Any, found: list[int]) -> None:
    codes, nested = _plan(type(value))
    for name in codes:
        code = getattr(value, name)
        if code:
            found.append(int(code))
    for name in nested:
        child = getattr(value, name)
        if isinstance(child, tuple):
            for item in child:
                _walk(item, found)
        elif child is not None:
            _walk(child, found)


_PLANS: dict[type, tuple[tuple[str, ...], tuple[str, ...]]] = {}


def _plan(cls: type) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """(the error-code fields, the fields holding entities) of an entity class, found once."""
    plan = _PLANS.get(cls)
    if plan is None:
        plan = _PLANS[cls] = _make_plan(cls)
    return plan


def _make_plan(cls: type) -> tuple[tuple[str, ...], tuple[str, ...]]:
    if not dataclasses.is_dataclass(cls):
        return (), ()
    codes: list[str] = []
    nested: list[str] = []
    for field in dataclasses.fields(cls):
        if field.name == "error_code":
            codes.append(field.name)
        elif _holds_entities(field.type):
            nested.append(field.name)
    return tuple(codes), tuple(nested)


def _holds_entities(annotation: object) -> bool:
    if isinstance(annotation, type) and dataclasses.is_dataclass(annotation):
        return True
    origin = typing.get_origin(annotation)
    if origin in (tuple, typing.Union, types.UnionType):
        return any(_holds_entities(a) for a in typing.get_args(annotation) if a is not ...)
    return False
