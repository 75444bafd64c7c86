"""An in-process object store: the reference backend for unit tests and simulations."""

from __future__ import annotations

from collections.abc import Sequence

from sortedcontainers import SortedDict

from diskless.clock import Clock, SystemClock
from diskless.errors import ObjectNotFoundError
from diskless.storage._base import (
    DELETE_KEYS_MAX,
    LIST_PAGE_LIMIT_MAX,
    ListPage,
    ObjectInfo,
    ObjectStore,
)
from diskless.storage._keys import (
    check_list_limit,
    check_range_within,
    listing_floor,
    validate_key,
    validate_prefix,
)


class MemoryObjectStore(ObjectStore):
    """Objects in a sorted dict; `put` copies its input so callers may reuse their buffers.

    Every operation completes without yielding to the event loop, so a simulation that wants
    latency or failures wraps this in `FaultyObjectStore`.
    """

    def __init__(self, clock: Clock | None = None) -> None:
        self._clock: Clock = clock if clock is not None else SystemClock()
        # key -> (data, last_modified_ms); sorted so listings page in key order like S3.
        self._objects: SortedDict = SortedDict()

    async def put(self, key: str, data: bytes | bytearray | memoryview) -> None:
        validate_key(key)
        blob = bytes(data)
        self._counters.put(len(blob))
        self._objects[key] = (blob, self._clock.now_ms())

    async def get(self, key: str) -> bytes:
        validate_key(key)
        self._counters.get()
        blob = self._blob(key)
        self._counters.bytes_read(len(blob))
        return blob

    async def get_range(self, key: str, start: int, end: int) -> bytes:
        validate_key(key)
        self._counters.ranged_get()
        blob = self._blob(key)
        check_range_within(key, start, end, len(blob))
        chunk = blob[start:end]
        assert len(chunk) == end - start
        self._counters.bytes_read(len(chunk))
        return chunk

    async def list_page(
        self,
        prefix: str,
        token: str | None = None,
        limit: int = 1000,
        start_after: str | None = None,
    ) -> ListPage:
        validate_prefix(prefix)
        check_list_limit(limit, LIST_PAGE_LIMIT_MAX)
        self._counters.list()
        floor = listing_floor(token, start_after)
        if floor is None or floor < prefix:
            keys = self._objects.irange(minimum=prefix)
        else:
            keys = self._objects.irange(minimum=floor, inclusive=(False, True))
        objects: list[ObjectInfo] = []
        more = False
        for key in keys:
            if not key.startswith(prefix):
                break
            if len(objects) == limit:
                more = True
                break
            blob, modified_ms = self._objects[key]
            objects.append(ObjectInfo(key=key, size=len(blob), last_modified_ms=modified_ms))
        return ListPage(objects=objects, next_token=objects[-1].key if more else None)

    async def delete_many(self, keys: Sequence[str]) -> list[str]:
        for key in keys:
            validate_key(key)
        unique = list(dict.fromkeys(keys))
        self._counters.delete(len(unique), requests=-(-len(unique) // DELETE_KEYS_MAX))
        for key in unique:
            self._objects.pop(key, None)
        return unique

    def _blob(self, key: str) -> bytes:
        try:
            blob: bytes = self._objects[key][0]
        except KeyError:
            raise ObjectNotFoundError(f"no object {key!r}") from None
        return blob
