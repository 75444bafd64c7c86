"""The object-store interface every backend implements, and the shapes it returns."""

from __future__ import annotations

import abc
from collections.abc import AsyncIterator, Sequence

import msgspec

from diskless._availability import Availability
from diskless.storage._stats import StatsCounter, StoreStats

LIST_PAGE_LIMIT_MAX = 1000  # S3 never returns more per ListObjectsV2 page
DELETE_KEYS_MAX = 1000  # S3 DeleteObjects takes at most this many keys per request


class ObjectInfo(msgspec.Struct, frozen=True):
    """One listed object: its key, its size and when it was last modified (epoch ms)."""

    key: str
    size: int
    last_modified_ms: int


class ListPage(msgspec.Struct, frozen=True):
    """One page of a prefix listing; pass `next_token` back to get the following page."""

    objects: list[ObjectInfo]
    next_token: str | None


class ObjectStore(abc.ABC):
    """Async object storage as the WAL and the read path need it.

    Keys are '/'-separated strings (see `diskless.storage._keys.validate_key`; invalid keys raise
    ValueError). Every method raises only `diskless.errors.StorageError` subclasses for storage
    failures; backends translate their own errors at this boundary.

    Empty objects are allowed: `get` returns b"", and every ranged read of one is invalid.
    """

    _stats_counter: StatsCounter | None = None
    _availability: Availability | None = None

    @abc.abstractmethod
    async def put(self, key: str, data: bytes | bytearray | memoryview) -> None:
        """Store `data` under `key` atomically: readers see all of it or nothing."""

    @abc.abstractmethod
    async def get(self, key: str) -> bytes:
        """Read a whole object; ObjectNotFoundError when absent."""

    @abc.abstractmethod
    async def get_range(self, key: str, start: int, end: int) -> bytes:
        """Read bytes [start, end) of an object.

        InvalidRangeError unless 0 <= start < end <= size.
        """

    async def get_range_view(self, key: str, start: int, end: int) -> memoryview:
        """`get_range` as a read-only view, for readers that only look at the bytes (the read
        path's caches). A store that can lend its bytes without copying them overrides it: the
        local store maps the file. Objects never change once written, so neither does a view."""
        return memoryview(await self.get_range(key, start, end)).toreadonly()

    @abc.abstractmethod
    async def list_page(
        self,
        prefix: str,
        token: str | None = None,
        limit: int = 1000,
        start_after: str | None = None,
    ) -> ListPage:
        """List up to `limit` objects under `prefix` in key order, after `start_after` if given."""

    @abc.abstractmethod
    async def delete_many(self, keys: Sequence[str]) -> list[str]:
        """Delete keys; absent keys count as deleted. Returns the keys now known to be gone."""

    async def close(self) -> None:  # noqa: B027 - optional hook, most stores hold nothing
        """Release connections; the store is unusable afterwards."""

    async def remove_stale_temp_files(self, older_than_s: float = 3600.0) -> int:
        """Reclaim what writes killed mid-way left behind, older than `older_than_s`; returns
        how many leftovers went. A store whose writes leave nothing behind (S3's PUT, memory)
        has nothing to do; the file manager calls this now and then on whatever store it has."""
        if older_than_s < 0:
            raise ValueError("older_than_s must not be negative")
        return 0

    async def list_all(
        self, prefix: str, start_after: str | None = None, page_size: int = LIST_PAGE_LIMIT_MAX
    ) -> AsyncIterator[ObjectInfo]:
        """Every object under `prefix` in key order, one page in memory at a time (GC scans)."""
        token: str | None = None
        while True:
            page = await self.list_page(
                prefix, token=token, limit=page_size, start_after=start_after
            )
            for info in page.objects:
                yield info
            if page.next_token is None:
                return
            token = page.next_token

    def stats(self) -> StoreStats:
        """Requests and bytes since creation, for the benchmarks' cost model.

        Wrappers report their inner store's counters: what reached storage is what is billed.
        """
        return self._counters.snapshot()

    @property
    def availability(self) -> Availability:
        """Whether the storage answers, as this process sees it: each backend reports every
        request's outcome there (and a caller a request it gave up waiting for), which logs
        when the storage stops answering and when it is back (`diskless._availability`).
        Wrappers report to their inner store's."""
        if self._availability is None:
            self._availability = Availability("object store")
        return self._availability

    @property
    def _counters(self) -> StatsCounter:
        if self._stats_counter is None:
            self._stats_counter = StatsCounter()
        return self._stats_counter
