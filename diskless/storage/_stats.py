"""Request and byte counters shared by every backend, so cost models read them the same way."""

from __future__ import annotations

import msgspec


class StoreStats(msgspec.Struct, frozen=True):
    """A snapshot of what a store was asked to do, in the units object storage bills.

    `puts` counts objects written; `put_requests` counts billed PUT-class requests (a multipart
    upload costs create + parts + complete). Requests count when issued, failed ones included,
    because providers bill them; bytes count only when they actually moved.
    """

    puts: int = 0
    put_requests: int = 0
    gets: int = 0
    ranged_gets: int = 0
    lists: int = 0
    delete_requests: int = 0
    keys_deleted: int = 0
    bytes_in: int = 0
    bytes_out: int = 0

    def minus(self, earlier: StoreStats) -> StoreStats:
        """What happened between `earlier` and this snapshot (benchmarks diff around a phase)."""
        return StoreStats(
            **{
                field: getattr(self, field) - getattr(earlier, field)
                for field in self.__struct_fields__
            }
        )


class StatsCounter:
    """The one mutable implementation behind `ObjectStore.stats()`."""

    __slots__ = (
        "_bytes_in",
        "_bytes_out",
        "_delete_requests",
        "_gets",
        "_keys_deleted",
        "_lists",
        "_put_requests",
        "_puts",
        "_ranged_gets",
    )

    def __init__(self) -> None:
        self._puts = 0
        self._put_requests = 0
        self._gets = 0
        self._ranged_gets = 0
        self._lists = 0
        self._delete_requests = 0
        self._keys_deleted = 0
        self._bytes_in = 0
        self._bytes_out = 0

    def put(self, nbytes: int, requests: int = 1) -> None:
        assert nbytes >= 0 and requests >= 1
        self._puts += 1
        self._put_requests += requests
        self._bytes_in += nbytes

    def put_request(self) -> None:
        """One more billed PUT-class request inside an object write (e.g. an extra part)."""
        self._put_requests += 1

    def get(self) -> None:
        self._gets += 1

    def ranged_get(self) -> None:
        self._ranged_gets += 1

    def bytes_read(self, nbytes: int) -> None:
        assert nbytes >= 0
        self._bytes_out += nbytes

    def list(self) -> None:
        self._lists += 1

    def delete(self, keys: int, requests: int = 1) -> None:
        assert keys >= 0 and requests >= 0
        self._delete_requests += requests
        self._keys_deleted += keys

    def snapshot(self) -> StoreStats:
        return StoreStats(
            puts=self._puts,
            put_requests=self._put_requests,
            gets=self._gets,
            ranged_gets=self._ranged_gets,
            lists=self._lists,
            delete_requests=self._delete_requests,
            keys_deleted=self._keys_deleted,
            bytes_in=self._bytes_in,
            bytes_out=self._bytes_out,
        )
