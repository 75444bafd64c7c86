"""Unit: request counters and the snapshot arithmetic benchmarks use around a phase."""

from __future__ import annotations

from diskless.storage import MemoryObjectStore, StoreStats


async def test_minus_gives_what_happened_between_two_snapshots() -> None:
    store = MemoryObjectStore()
    await store.put("warm-up", b"123")
    before = store.stats()
    await store.put("a", b"12345")
    await store.get_range("a", 0, 2)
    await store.delete_many(["a", "b", "c"])
    assert store.stats().minus(before) == StoreStats(
        puts=1,
        put_requests=1,
        ranged_gets=1,
        delete_requests=1,
        keys_deleted=3,
        bytes_in=5,
        bytes_out=2,
    )
    assert before == StoreStats(puts=1, put_requests=1, bytes_in=3)


def test_snapshots_do_not_change_afterwards() -> None:
    store = MemoryObjectStore()
    snapshot = store.stats()
    store._counters.get()
    assert snapshot.gets == 0 and store.stats().gets == 1
