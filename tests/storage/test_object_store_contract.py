"""Integration: one contract every object store honours (memory, local files, S3 over HTTP),
and that a forwarding wrapper keeps, calls, counters and all.

Empty objects are allowed everywhere: `get` returns b"" and no ranged read of one is valid.
"""

from __future__ import annotations

import mmap
import random
import time
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from diskless.errors import InvalidRangeError, ObjectNotFoundError
from diskless.storage import (
    ForwardingObjectStore,
    LocalObjectStore,
    MemoryObjectStore,
    ObjectStore,
)
from testkit.s3server import create_bucket, s3_store

MIB = 1024 * 1024
PART = 5 * MIB  # the S3 store's part size here, so big objects span several parts
BIG = 11 * MIB + 123  # three parts, the last one short


@pytest.fixture(params=["memory", "local", "s3", "forwarding"])
async def store(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[ObjectStore]:
    backend: ObjectStore
    if request.param == "memory":
        backend = MemoryObjectStore()
    elif request.param == "local":
        backend = LocalObjectStore(tmp_path / "objects")
    elif request.param == "forwarding":
        backend = ForwardingObjectStore(MemoryObjectStore())
    else:
        endpoint = request.getfixturevalue("s3_endpoint")
        backend = s3_store(
            endpoint,
            await create_bucket(endpoint),
            multipart_threshold=PART,
            multipart_part_size=PART,
        )
    try:
        yield backend
    finally:
        await backend.close()


def payload(size: int, seed: int = 7) -> bytes:
    return random.Random(seed).randbytes(size)


async def test_put_get_round_trip_accepts_every_buffer_type(store: ObjectStore) -> None:
    await store.put("a", b"bytes")
    await store.put("b", bytearray(b"bytearray"))
    await store.put("c", memoryview(b"xxmemoryviewxx")[2:-2])
    assert await store.get("a") == b"bytes"
    assert await store.get("b") == b"bytearray"
    assert await store.get("c") == b"memoryview"


async def test_put_copies_the_callers_buffer(store: ObjectStore) -> None:
    buffer = bytearray(b"original")
    await store.put("k", buffer)
    buffer[:] = b"reused!!"
    assert await store.get("k") == b"original"


async def test_overwrite_replaces_content_and_size(store: ObjectStore) -> None:
    await store.put("k", b"first version")
    await store.put("k", b"v2")
    assert await store.get("k") == b"v2"
    page = await store.list_page("")
    assert [(o.key, o.size) for o in page.objects] == [("k", 2)]


async def test_empty_object_reads_back_empty_and_has_no_valid_range(store: ObjectStore) -> None:
    await store.put("empty", b"")
    assert await store.get("empty") == b""
    page = await store.list_page("")
    assert [(o.key, o.size) for o in page.objects] == [("empty", 0)]
    with pytest.raises(InvalidRangeError):
        await store.get_range("empty", 0, 1)


async def test_ranged_reads_of_a_small_object(store: ObjectStore) -> None:
    data = bytes(range(256))
    await store.put("r", data)
    assert await store.get_range("r", 0, 1) == data[:1]
    assert await store.get_range("r", 255, 256) == data[255:]
    assert await store.get_range("r", 10, 100) == data[10:100]
    assert await store.get_range("r", 0, 256) == data


async def test_big_object_reads_across_part_boundaries(store: ObjectStore) -> None:
    data = payload(BIG)
    await store.put("big", data)
    assert await store.get("big") == data
    for start, end in [
        (PART - 10, PART + 10),
        (2 * PART - 1, 2 * PART + 1),
        (0, PART + 1),
        (PART, 2 * PART),
        (BIG - 5, BIG),
    ]:
        assert await store.get_range("big", start, end) == data[start:end], (start, end)
    listed = await store.list_page("big")
    assert [o.size for o in listed.objects] == [BIG]


async def test_ranged_views_hold_what_ranged_gets_return(store: ObjectStore) -> None:
    """`get_range_view` is `get_range` without the promise of a copy: same bytes, read-only,
    short ranges and long ones (the local store maps a long one), across S3 parts too."""
    data = payload(BIG)
    await store.put("big", data)
    for start, end in [(0, 1), (10, 100), (4097, 4097 + 70_000), (PART - 10, 2 * PART + 3)]:
        view = await store.get_range_view("big", start, end)
        assert (view.readonly, view.format, view.nbytes) == (True, "B", end - start)
        assert view == await store.get_range("big", start, end) == data[start:end], (start, end)
    with pytest.raises(InvalidRangeError):
        await store.get_range_view("big", BIG - 5, BIG + 100_000)
    with pytest.raises(ObjectNotFoundError):
        await store.get_range_view("absent", 0, 100_000)


async def test_missing_keys_raise_object_not_found(store: ObjectStore) -> None:
    await store.put("present", b"x")
    with pytest.raises(ObjectNotFoundError):
        await store.get("absent")
    with pytest.raises(ObjectNotFoundError):
        await store.get_range("absent", 0, 1)
    with pytest.raises(ObjectNotFoundError):
        await store.get_range_view("absent", 0, 1)
    with pytest.raises(ObjectNotFoundError):
        await store.get("present/child")


@pytest.mark.parametrize(
    ("start", "end"),
    [(-1, 5), (3, 3), (5, 2), (10, 11), (12, 20), (0, 11), (9, 11)],
    ids=["negative", "empty", "reversed", "start-at-end", "start-past-end", "end-past", "tail"],
)
async def test_bad_ranges_raise_invalid_range(store: ObjectStore, start: int, end: int) -> None:
    await store.put("ten", b"0123456789")
    with pytest.raises(InvalidRangeError):
        await store.get_range("ten", start, end)
    with pytest.raises(InvalidRangeError):
        await store.get_range_view("ten", start, end)


async def test_prefix_listing_pages_in_key_order(store: ObjectStore) -> None:
    wanted = [f"p/{i}" for i in range(5)]
    for key in ["o/x", "p0", "q/x", *reversed(wanted)]:
        await store.put(key, key.encode())
    keys: list[str] = []
    pages = 0
    token: str | None = None
    while True:
        page = await store.list_page("p/", token=token, limit=2)
        pages += 1
        assert len(page.objects) <= 2
        keys += [o.key for o in page.objects]
        if page.next_token is None:
            break
        token = page.next_token
    assert keys == wanted
    assert pages == 3
    assert [o.key async for o in store.list_all("p/")] == wanted
    assert [o.key async for o in store.list_all("p")] == [*wanted, "p0"]


async def test_listing_start_after_skips_and_pages(store: ObjectStore) -> None:
    for i in range(5):
        await store.put(f"s/{i}", b"x")
    page = await store.list_page("s/", start_after="s/1", limit=2)
    assert [o.key for o in page.objects] == ["s/2", "s/3"]
    assert page.next_token is not None
    rest = await store.list_page("s/", token=page.next_token, start_after="s/1", limit=2)
    assert [o.key for o in rest.objects] == ["s/4"]
    assert rest.next_token is None
    assert (await store.list_page("s/", start_after="s/4")).objects == []
    assert [o.key for o in (await store.list_page("s/", start_after="a")).objects] == [
        f"s/{i}" for i in range(5)
    ]


async def test_listing_reports_size_and_modification_time(store: ObjectStore) -> None:
    before_ms = time.time_ns() // 1_000_000
    await store.put("t/one", b"12345")
    after_ms = time.time_ns() // 1_000_000
    (info,) = (await store.list_page("t/")).objects
    assert info.key == "t/one" and info.size == 5
    # S3 keeps whole seconds; filesystems may round too.
    assert before_ms - 2000 <= info.last_modified_ms <= after_ms + 2000


async def test_listing_an_absent_prefix_is_empty(store: ObjectStore) -> None:
    await store.put("x/y", b"1")
    page = await store.list_page("nothing/here/")
    assert page.objects == [] and page.next_token is None


async def test_delete_many_is_idempotent_and_reports_gone_keys(store: ObjectStore) -> None:
    for key in ["d/1", "d/2", "keep"]:
        await store.put(key, b"x")
    assert await store.delete_many(["d/1", "d/2", "d/never", "d/1"]) == ["d/1", "d/2", "d/never"]
    assert [o.key for o in (await store.list_page("")).objects] == ["keep"]
    with pytest.raises(ObjectNotFoundError):
        await store.get("d/1")
    assert await store.delete_many(["d/1", "d/2"]) == ["d/1", "d/2"]
    assert await store.delete_many([]) == []
    assert await store.get("keep") == b"x"


async def test_keys_with_slashes_list_in_code_point_order(store: ObjectStore) -> None:
    # '.' < '/' < 'c': a naive directory walk would put "a/b/c" first or last.
    keys = ["a/bc", "a/b/c", "a.b", "a/b.c", "a/b/d/e", "a/b0"]
    for key in keys:
        await store.put(key, key.encode())
    assert [o.key for o in (await store.list_page("")).objects] == sorted(keys)
    assert [o.key for o in (await store.list_page("a/b")).objects] == [
        "a/b.c",
        "a/b/c",
        "a/b/d/e",
        "a/b0",
        "a/bc",
    ]
    page = await store.list_page("a/", start_after="a/b/c", limit=2)
    assert [o.key for o in page.objects] == ["a/b/d/e", "a/b0"]
    for key in keys:
        assert await store.get(key) == key.encode()


@pytest.mark.parametrize("key", ["", "/abs", "a//b", "a/../b", "..", "./a", "a/", "nul\x00"])
async def test_invalid_keys_are_rejected_before_any_request(store: ObjectStore, key: str) -> None:
    with pytest.raises(ValueError):
        await store.put(key, b"x")
    with pytest.raises(ValueError):
        await store.get(key)
    with pytest.raises(ValueError):
        await store.delete_many([key])
    assert store.stats().puts == 0 and store.stats().gets == 0


async def test_list_limit_must_be_within_one_page(store: ObjectStore) -> None:
    with pytest.raises(ValueError):
        await store.list_page("", limit=0)
    with pytest.raises(ValueError):
        await store.list_page("", limit=1001)


async def test_stats_count_requests_and_bytes(store: ObjectStore) -> None:
    await store.put("s", b"12345")
    await store.get("s")
    await store.get_range("s", 1, 3)
    await store.get_range_view("s", 0, 2)
    with pytest.raises(ObjectNotFoundError):
        await store.get("missing")
    await store.list_page("")
    await store.delete_many(["s", "t"])
    stats = store.stats()
    assert (stats.puts, stats.put_requests, stats.bytes_in) == (1, 1, 5)
    assert (stats.gets, stats.ranged_gets, stats.bytes_out) == (2, 2, 9)
    assert (stats.lists, stats.delete_requests, stats.keys_deleted) == (1, 1, 2)


async def test_a_wrapper_that_changes_ranged_reads_changes_views_too(tmp_path: Path) -> None:
    """A view goes through a wrapper's own `get_range` when it has one (so a fault, delay or
    count applies to views too); a wrapper that leaves it alone lends the inner store's view."""

    class Counting(ForwardingObjectStore):
        calls = 0

        async def get_range(self, key: str, start: int, end: int) -> bytes:
            self.calls += 1
            return await super().get_range(key, start, end)

    inner = LocalObjectStore(tmp_path / "objects")
    await inner.put("k", payload(200_000))
    counting = Counting(inner)
    view = await counting.get_range_view("k", 0, 100_000)
    assert counting.calls == 1
    assert view == payload(200_000)[:100_000]
    plain = await ForwardingObjectStore(inner).get_range_view("k", 0, 100_000)
    assert isinstance(plain.obj, mmap.mmap)
