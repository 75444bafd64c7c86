"""A bounded LRU of recently written WAL objects, so their writer serves reads without a GET."""

from __future__ import annotations

from collections import OrderedDict

from diskless.errors import InvalidRangeError

SEGMENT_CACHE_BYTES_MAX_DEFAULT = 32 * 1024 * 1024


class SegmentCache:
    """Whole objects by key, evicted least-recently-used first once `bytes_max` is exceeded.

    Objects are stored as given and must not change afterwards (the writer hands over a segment
    buffer it never touches again). An object larger than `bytes_max` is not cached at all.
    Not thread-safe; one event loop owns it.
    """

    __slots__ = ("_bytes_max", "_bytes_now", "_objects")

    def __init__(self, bytes_max: int = SEGMENT_CACHE_BYTES_MAX_DEFAULT) -> None:
        if bytes_max < 0:
            raise ValueError(f"bytes_max must be >= 0, got {bytes_max}")
        self._bytes_max = bytes_max
        self._bytes_now = 0
        self._objects: OrderedDict[str, bytes | bytearray] = OrderedDict()

    @property
    def bytes_max(self) -> int:
        return self._bytes_max

    @property
    def bytes_now(self) -> int:
        return self._bytes_now

    def __len__(self) -> int:
        return len(self._objects)

    def __contains__(self, key: object) -> bool:
        return key in self._objects

    def put(self, key: str, data: bytes | bytearray) -> bool:
        """Cache an object (replacing any older copy); False when it is too large to cache."""
        self.discard(key)
        size = len(data)
        if size > self._bytes_max:
            return False
        self._objects[key] = data
        self._bytes_now += size
        while self._bytes_now > self._bytes_max:
            _, evicted = self._objects.popitem(last=False)
            self._bytes_now -= len(evicted)
        assert 0 <= self._bytes_now <= self._bytes_max
        return True

    def get_range(self, key: str, start: int, end: int) -> memoryview | None:
        """Bytes [start, end) of a cached object (a read-only view: the object never changes),
        or None when it is not cached.

        Raises InvalidRangeError, like the stores, for a range outside a cached object.
        """
        data = self._objects.get(key)
        if data is None:
            return None
        if start < 0 or end <= start or end > len(data):
            raise InvalidRangeError(f"range [{start}, {end}) outside {key!r} ({len(data)} bytes)")
        self._objects.move_to_end(key)
        return memoryview(data).toreadonly()[start:end]

    def discard(self, key: str) -> None:
        """Forget an object (e.g. once it is deleted from storage)."""
        data = self._objects.pop(key, None)
        if data is not None:
            self._bytes_now -= len(data)

    def clear(self) -> None:
        self._objects.clear()
        self._bytes_now = 0
