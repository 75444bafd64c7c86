"""The cleaner's per-record work in C (`_cclean.c`), when it is built.

`NATIVE` is the extension module, or None in a checkout where it was never compiled: the
cleaner then walks records in Python (`_records.records_of` and `_offset_map.OffsetMap`), which
holds the same rules, only slower. The tests run both and check that they agree.
"""

from __future__ import annotations

from types import ModuleType
from typing import Final

SPAN_BYTES: Final = 5 * 8
"""One kept record in `filter_records`' spans: five int64."""

NATIVE: ModuleType | None
try:
    from diskless.compaction import _cclean as NATIVE
except ImportError:  # a checkout whose extension was never compiled
    NATIVE = None
