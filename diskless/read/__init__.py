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
from diskless.read._purgatory import FetchPurgatory
from diskless.read._reader import (
    COALESCE_GAP_BYTES_MAX_DEFAULT,
    GETS_INFLIGHT_MAX_DEFAULT,
    FetchReader,
    RangeCache,
)
from diskless.read._spans import Span, coalesce
from diskless.read._view import RECONCILE_MS_DEFAULT as VIEW_RECONCILE_MS_DEFAULT
from diskless.read._view import PartitionView
from diskless.read._waiting import WaitingFetches

__all__ = [
    "COALESCE_GAP_BYTES_MAX_DEFAULT",
    "GETS_INFLIGHT_MAX_DEFAULT",
    "FetchReader",
    "FetchPurgatory",
    "PartitionView",
    "VIEW_RECONCILE_MS_DEFAULT",
    "WaitingFetches",
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
