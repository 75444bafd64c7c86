"""Per-partition results of the broker facade, shaped like the Kafka protocol responses."""

from __future__ import annotations

import msgspec

from diskless._types import ErrorCode
from diskless.wal import WalStats


class ProduceResult(msgspec.Struct, frozen=True, gc=False):
    """One partition of a Produce response.

    `log_append_time` is -1 unless the topic uses LogAppendTime; on error every offset is -1.
    A duplicate (a retry of an acknowledged batch) is NONE with the original `base_offset`.
    (`gc=False`: one per produced partition, holding no container, so never in a cycle.)
    """

    error: ErrorCode
    base_offset: int = -1
    log_append_time: int = -1
    log_start_offset: int = -1
    error_message: str | None = None


class FetchResult(msgspec.Struct, frozen=True):
    """One partition of a Fetch response.

    `records` are Kafka v2 record batches, offsets and (LogAppendTime topics) timestamps already
    rewritten; the first batch may start before the requested offset, as in Kafka, and the client
    skips the records below it. `aborted_transactions` lists (producer id, first offset) of the
    aborted transactions overlapping the returned range (READ_COMMITTED only).

    A fetch that asks for views (`views=True`) gets the same records as `record_views` instead,
    with `records` empty: read-only buffers that follow each other, views of the broker's cached
    bytes with only the rewritten header bytes new, so that nothing copies the records on the
    broker (a caller writes them out with one scatter-gather write, or walks them). What they
    view never changes; holding them holds those bytes.
    """

    error: ErrorCode
    high_watermark: int = -1
    last_stable_offset: int = -1
    log_start_offset: int = -1
    records: bytes = b""
    aborted_transactions: list[tuple[int, int]] = msgspec.field(default_factory=list)
    error_message: str | None = None
    record_views: tuple[bytes | memoryview, ...] = ()

    @property
    def records_size(self) -> int:
        """Bytes of records, whether joined (`records`) or as `record_views`."""
        return len(self.records) + sum(len(view) for view in self.record_views)


class ListOffsetsResult(msgspec.Struct, frozen=True):
    """One partition of a ListOffsets response; offset and timestamp are -1 when none matches."""

    error: ErrorCode
    offset: int = -1
    timestamp: int = -1


class FetchStats(msgspec.Struct, frozen=True):
    """What the read path did since the broker started.

    `ranges_read` counts coalesced object ranges (each one GET or one cache hit); `batches_read`
    counts the stored batches they held, so batches_read / gets_issued shows what coalescing saved.
    """

    fetches: int = 0
    batches_read: int = 0
    control_batches_synthesized: int = 0
    ranges_read: int = 0
    gets_issued: int = 0
    cache_hits: int = 0
    bytes_fetched: int = 0
    bytes_returned: int = 0
    storage_errors: int = 0
    corrupt_batches: int = 0
    object_cache_block_hits: int = 0
    """Reads the shared object cache answered from a block it held."""
    time_lookup_batches_read: int = 0
    """Batches whose records ListOffsets walked to answer by time (one per answer; two when
    the log start cuts the first)."""


class ProduceStats(msgspec.Struct, frozen=True):
    """Produce requests and partition outcomes since the broker started."""

    requests: int = 0
    partitions: int = 0
    partitions_failed: int = 0
    """Partitions answered with an error, whether by validation or by the write pipeline."""
    bytes_accepted: int = 0
    """Bytes of valid batches handed to the WAL writer."""


class BrokerStats(msgspec.Struct, frozen=True):
    """A broker's counters: its requests, its read path and its WAL writer (None before start)."""

    produce: ProduceStats
    fetch: FetchStats
    wal: WalStats | None
