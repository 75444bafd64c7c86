"""Compaction's core: Kafka's log cleaner over a diskless partition's batches, as pure code.

A compacted topic keeps, among the records below its cleanable point, the latest record of each
key (Kafka's LogCleaner). Here are its two steps, over batches as the read path serves them:
- `build_offset_map` maps each key of the dirty range to its greatest offset, in an `OffsetMap`
  of a fixed number of bytes (Kafka's dedupe buffer); when it fills, the pass ends at the last
  batch it mapped whole and the next pass goes on from there;
- `clean` reads the log from its start up to there and yields the batches that replace it:
  superseded records, aborted transactions and expired tombstones and markers removed, every
  kept record at its own offset, each batch in its own codec, producers' last batches kept.
Neither does I/O: the caller reads the batches, stores what `clean` yields and swaps the range
in the coordinator. Memory is the map plus one batch at a time.
"""

from diskless.compaction._cleaner import CleanStats, MapOutcome, build_offset_map, clean
from diskless.compaction._offset_map import (
    LOAD_FACTOR_DEFAULT,
    MAP_BYTES_DEFAULT,
    MAP_BYTES_MAX,
    MAP_BYTES_MIN,
    OffsetMap,
    key_hash,
)
from diskless.compaction._records import UncleanableBatch
from diskless.compaction._transactions import AbortedRange, LastRecord, last_records_of

__all__ = [
    "LOAD_FACTOR_DEFAULT",
    "MAP_BYTES_DEFAULT",
    "MAP_BYTES_MAX",
    "MAP_BYTES_MIN",
    "AbortedRange",
    "CleanStats",
    "LastRecord",
    "MapOutcome",
    "OffsetMap",
    "UncleanableBatch",
    "build_offset_map",
    "clean",
    "key_hash",
    "last_records_of",
]
