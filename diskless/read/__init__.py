"""The read path: batch coordinates from the coordinator, bytes from object storage, Kafka
record batches back (base offsets rewritten, markers synthesized, read_committed served)."""

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
    "Span",
    "coalesce",
]
