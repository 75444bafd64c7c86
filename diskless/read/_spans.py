"""Byte ranges of objects: merged per object so that one fetch reads each object's bytes once."""

from __future__ import annotations

import bisect
from collections.abc import Iterable, Sequence
from typing import NamedTuple


class Span(NamedTuple):
    """A coalesced byte range [start, end) of one object: read once per fetch."""

    key: str
    start: int
    end: int


def coalesce(ranges: Iterable[Span], gap_bytes_max: int = 0) -> list[Span]:
    """Merge ranges of the same object that overlap, touch, or lie within `gap_bytes_max`.

    Returns disjoint spans sorted by (key, start); every input range lies within exactly one.
    """
    assert gap_bytes_max >= 0
    merged: list[Span] = []
    for span in sorted(ranges):
        assert 0 <= span.start < span.end, span
        if merged and merged[-1].key == span.key and span.start <= merged[-1].end + gap_bytes_max:
            last = merged[-1]
            merged[-1] = Span(last.key, last.start, max(last.end, span.end))
        else:
            merged.append(span)
    return merged


class SpanIndex:
    """Finds the coalesced span holding a batch's range, and the bytes read for it."""

    def __init__(self, spans: Sequence[Span]) -> None:
        self._starts: dict[str, list[int]] = {}
        self._spans: dict[str, list[Span]] = {}
        for span in spans:  # sorted by (key, start)
            self._starts.setdefault(span.key, []).append(span.start)
            self._spans.setdefault(span.key, []).append(span)

    def find(self, key: str, start: int, end: int) -> Span:
        starts = self._starts[key]
        span = self._spans[key][bisect.bisect_right(starts, start) - 1]
        assert span.start <= start and end <= span.end, (span, start, end)
        return span
