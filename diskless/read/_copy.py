"""Batches read back as a fetch would serve them, for consolidation to copy into one object."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence

from diskless.coordinator import BatchInfo
from diskless.read._batches import as_served
from diskless.read._cache import ObjectCache
from diskless.read._spans import Span, SpanIndex, coalesce


async def read_as_served(cache: ObjectCache, batches: Sequence[BatchInfo]) -> list[bytearray]:
    """Each batch as served (markers synthesized, base offsets set, append times stamped),
    its stored bytes read through `cache` and checked. Raises StorageError when a read fails
    and CorruptBatch when a stored batch fails the read-back checks."""
    assert all(info.extent is None for info in batches), "extents are served as they are"
    # A partition's batches lie scattered among other partitions' in a WAL object, and the
    # cache reads such an object's block from its start anyway: one read per block, not one
    # per batch (each of which would extend the block by one more GET and copy it again).
    # No object size is passed: a run moves one partition range at a time, and whole blocks
    # of every WAL object it touches would outgrow the cache before the next range needs them.
    spans = coalesce(
        (
            Span(info.object_key, info.byte_offset, info.byte_offset + info.size)
            for info in batches
            if info.object_key
        ),
        cache.block_bytes,
    )
    chunks = await asyncio.gather(*(cache.read(*span) for span in spans))
    data = dict(zip(spans, chunks, strict=True))
    index = SpanIndex(spans)
    served: list[bytearray] = []
    for info in batches:
        stored: bytes | None = None
        if info.object_key:
            start, end = info.byte_offset, info.byte_offset + info.size
            span = index.find(info.object_key, start, end)
            stored = data[span][start - span.start : end - span.start]
        served.append(as_served(info, stored))
    return served
