"""The read path: batch coordinates from the coordinator, bytes from object storage, Kafka
record batches back (base offsets rewritten, markers synthesized, read_committed served)."""

from diskless.read._batches import CorruptBatch
from diskless.read._cache import (
    OBJECT_CACHE_BLOCK_BYTES_DEFAULT,
    OBJECT_CACHE_BYTES_MAX_DEFAULT,
    ObjectCache,
    ObjectCacheStats,
)
from diskless.read._copy import read_as_served
from diskless.read._extents import ExtentReader
from diskless.read._reader import (
    COALESCE_GAP_BYTES_MAX_DEFAULT,
    GETS_INFLIGHT_MAX_DEFAULT,
    FetchReader,
    RangeCache,
)
from diskless.read._spans import Span, coalesce

__all__ = [
    "COALESCE_GAP_BYTES_MAX_DEFAULT",
    "GETS_INFLIGHT_MAX_DEFAULT",
    "FetchReader",
    "RangeCache",
    "OBJECT_CACHE_BLOCK_BYTES_DEFAULT",
    "OBJECT_CACHE_BYTES_MAX_DEFAULT",
    "ObjectCache",
    "ObjectCacheStats",
    "ExtentReader",
    "CorruptBatch",
    "read_as_served",
    "Span",
    "coalesce",
]
