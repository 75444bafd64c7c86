"""The object-store interface every backend implements, and the shapes it returns."""

from __future__ import annotations

import abc
from collections.abc import Sequence

import msgspec


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

    Keys are '/'-separated strings. Every method raises only `diskless.errors.StorageError`
    subclasses; backends translate their own errors at this boundary.
    """

    @abc.abstractmethod
    async def put(self, key: str, data: bytes | bytearray | memoryview) -> None:
        """Store `data` under `key` atomically: readers see all of it or nothing."""

    @abc.abstractmethod
    async def get(self, key: str) -> bytes:
        """Read a whole object; ObjectNotFoundError when absent."""

    @abc.abstractmethod
    async def get_range(self, key: str, start: int, end: int) -> bytes:
        """Read bytes [start, end) of an object; InvalidRangeError unless 0 <= start < end <= size."""

    @abc.abstractmethod
    async def list_page(
        self, prefix: str, token: str | None = None, limit: int = 1000, start_after: str | None = None
    ) -> ListPage:
        """List up to `limit` objects under `prefix` in key order, after `start_after` if given."""

    @abc.abstractmethod
    async def delete_many(self, keys: Sequence[str]) -> list[str]:
        """Delete keys; absent keys count as deleted. Returns the keys now known to be gone."""

    async def close(self) -> None:  # noqa: B027 - optional hook, most stores hold nothing
        """Release connections; the store is unusable afterwards."""
