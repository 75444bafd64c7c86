"""A store that hands every call to another one: the base of wrappers that change a few calls."""

from __future__ import annotations

from collections.abc import Sequence

from diskless._availability import Availability
from diskless.storage._base import ListPage, ObjectStore
from diskless.storage._stats import StoreStats


class ForwardingObjectStore(ObjectStore):
    """Forwards every operation to `inner`; subclasses override only what they change.

    `stats` and `close` forward too: what reached the inner store is what is billed, and closing
    the wrapper closes what it wraps.
    """

    def __init__(self, inner: ObjectStore) -> None:
        self._inner = inner

    @property
    def inner(self) -> ObjectStore:
        return self._inner

    @property
    def availability(self) -> Availability:
        return self._inner.availability

    async def put(self, key: str, data: bytes | bytearray | memoryview) -> None:
        await self._inner.put(key, data)

    async def get(self, key: str) -> bytes:
        return await self._inner.get(key)

    async def get_range(self, key: str, start: int, end: int) -> bytes:
        return await self._inner.get_range(key, start, end)

    async def get_range_view(self, key: str, start: int, end: int) -> memoryview:
        """The inner store's view, unless a subclass changes `get_range`: then through it, so
        that what the wrapper does to a ranged read (a fault, a delay, a count) it does to a
        view too."""
        if type(self).get_range is not ForwardingObjectStore.get_range:
            return await super().get_range_view(key, start, end)
        return await self._inner.get_range_view(key, start, end)

    async def list_page(
        self,
        prefix: str,
        token: str | None = None,
        limit: int = 1000,
        start_after: str | None = None,
    ) -> ListPage:
        return await self._inner.list_page(prefix, token, limit, start_after)

    async def delete_many(self, keys: Sequence[str]) -> list[str]:
        return await self._inner.delete_many(keys)

    async def close(self) -> None:
        await self._inner.close()

    async def remove_stale_temp_files(self, older_than_s: float = 3600.0) -> int:
        return await self._inner.remove_stale_temp_files(older_than_s)

    def stats(self) -> StoreStats:
        return self._inner.stats()
