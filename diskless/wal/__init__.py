"""The write pipeline: shared WAL segments, uploads and ordered commits."""

from diskless.wal._cache import SegmentCache
from diskless.wal._config import WalConfig, WalStats
from diskless.wal._extent_format import (
    EXTENT_TRAILER_SIZE,
    INDEX_INTERVAL_BYTES_DEFAULT,
    ExtentFooter,
    ExtentFormatError,
    ExtentIndexEntry,
    decode_extent_footer,
    encode_extent,
)
from diskless.wal._format import (
    FORMAT_VERSION,
    TRAILER_SIZE,
    SegmentIndexEntry,
    WalEntry,
    WalFormatError,
    encode_footer,
    read_footer,
    read_object_index,
)
from diskless.wal._request import PendingWrite
from diskless.wal._segment import encode_segment
from diskless.wal._writer import WalWriter

__all__ = [
    # the writer
    "PendingWrite",
    "WalConfig",
    "WalEntry",
    "WalStats",
    "WalWriter",
    # the read path's cache of recently written objects
    "SegmentCache",
    # the object format
    "FORMAT_VERSION",
    "TRAILER_SIZE",
    "SegmentIndexEntry",
    "WalFormatError",
    "encode_footer",
    "encode_segment",
    "read_footer",
    "read_object_index",
    # the consolidated object format
    "EXTENT_TRAILER_SIZE",
    "INDEX_INTERVAL_BYTES_DEFAULT",
    "ExtentFooter",
    "ExtentFormatError",
    "ExtentIndexEntry",
    "decode_extent_footer",
    "encode_extent",
]
