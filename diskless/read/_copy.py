"""Batches read back as a fetch would serve them, for consolidation to copy into one object."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence

from diskless.coordinator import BatchInfo
from diskless.read._batches import as_served
from diskless.read._cache import ObjectCache
from diskless.read._spans import Span, SpanIndex, coalesce


async def read_as_served(
    cache: ObjectCache, batches: Sequence[BatchInfo], whole_blocks: bool = False
) -> list[bytearray]:
    """Each batch as served (markers synthesized, base offsets set, append times stamped),
    its stored bytes read through `cache` and checked. Raises StorageError when a read fails
    and CorruptBatch when a stored batch fails the read-back checks.

    `whole_blocks` reads whole blocks of the objects whose size the batches give: one GET each
    for all the reads that follow, when the cache can keep them until then."""
    assert all(info.extent is None for info in batches), "extents are served as they are"
    # A partition's batches lie scattered among other partitions' in a WAL object, and the
    # cache reads such an object's block from its start anyway: one read per block, not one
    # per batch (each of which would extend the block by one more GET and copy it again).
    spans = coalesce(
        (
            Span(info.object_key, info.byte_offset, info.byte_offset + info.size)
            for info in batches
            if info.object_key
        ),
        cache.block_bytes,
    )
    sizes = {
        info.object_key: info.object_size
        for info in batches
        if whole_blocks and info.object_size is not None
    }
    chunks = await asyncio.gather(*(cache.read(*span, sizes.get(span.key)) for span in spans))
    # Copying and checking a range's batches is CPU work in proportion to its bytes (up to an
    # object's 256 MiB): in a thread, so that the event loop (a broker's) keeps serving.
    return await asyncio.to_thread(_served, batches, dict(zip(spans, chunks, strict=True)))


def _served(batches: Sequence[BatchInfo], data: dict[Span, memoryview]) -> list[bytearray]:
    index = SpanIndex(list(data))
    served: list[bytearray] = []
    for info in batches:
        stored: memoryview | None = None
        if info.object_key:
            start, end = info.byte_offset, info.byte_offset + info.size
            span = index.find(info.object_key, start, end)
            stored = data[span][start - span.start : end - span.start]
        served.append(as_served(info, stored))
    return served
