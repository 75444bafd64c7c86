"""Integration: what only the filesystem store can get wrong (escapes, temp files, torn writes)."""

from __future__ import annotations

import mmap
import os
import time
from pathlib import Path

import pytest

from diskless.errors import ObjectNotFoundError, StorageError
from diskless.storage import LocalObjectStore, _local


@pytest.fixture
def root(tmp_path: Path) -> Path:
    return tmp_path / "store"


def files_under(root: Path) -> list[str]:
    return sorted(str(p.relative_to(root)) for p in root.rglob("*") if p.is_file())


@pytest.mark.parametrize(
    "key",
    ["../escape", "a/../../escape", "/etc/passwd", "a//b", "a/./b", "", "a\x00b", "a\\..\\b"],
)
async def test_keys_that_could_escape_the_root_are_rejected(root: Path, key: str) -> None:
    store = LocalObjectStore(root)
    with pytest.raises(ValueError):
        await store.put(key, b"x")
    with pytest.raises(ValueError):
        await store.get(key)
    with pytest.raises(ValueError):
        await store.get_range(key, 0, 1)
    with pytest.raises(ValueError):
        await store.delete_many([key])
    assert not (root.parent / "escape").exists()
    assert files_under(root.parent) == []


async def test_keys_may_not_look_like_temp_files(root: Path) -> None:
    store = LocalObjectStore(root)
    with pytest.raises(ValueError):
        await store.put(f"a/{_local.TEMP_MARKER}x", b"x")


async def test_objects_are_plain_files_named_by_their_key(root: Path) -> None:
    store = LocalObjectStore(root)
    await store.put("wal/0001/segment", b"data")
    assert (root / "wal" / "0001" / "segment").read_bytes() == b"data"
    assert files_under(root) == ["wal/0001/segment"]


async def test_temp_files_are_never_listed(root: Path) -> None:
    store = LocalObjectStore(root)
    await store.put("p/a", b"1")
    # What a crash mid-write leaves behind.
    (root / "p" / f"{_local.TEMP_MARKER}crashed").write_bytes(b"partial")
    (root / f"{_local.TEMP_MARKER}top").write_bytes(b"partial")
    assert [o.key for o in (await store.list_page("")).objects] == ["p/a"]
    assert [o.key for o in (await store.list_page("p/")).objects] == ["p/a"]
    assert [o.key async for o in store.list_all(f"p/{_local.TEMP_MARKER[:3]}")] == []


async def test_a_failure_mid_write_leaves_no_partial_object(
    root: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = LocalObjectStore(root)
    await store.put("k", b"old version")

    def write_half_then_fail(fd: int, data: memoryview) -> None:
        os.write(fd, data[: len(data) // 2])
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(_local, "_write_all", write_half_then_fail)
    with pytest.raises(StorageError, match="No space left"):
        await store.put("k", b"new version, longer")
    with pytest.raises(StorageError):
        await store.put("fresh", b"never complete")
    monkeypatch.undo()

    assert await store.get("k") == b"old version"
    with pytest.raises(ObjectNotFoundError):
        await store.get("fresh")
    assert files_under(root) == ["k"]  # the temp files were removed too


async def test_a_failed_rename_leaves_no_temp_file(root: Path) -> None:
    store = LocalObjectStore(root)
    await store.put("a/b/c", b"x")
    # "a/b" is a directory of other keys: this store cannot also make it an object.
    with pytest.raises(StorageError):
        await store.put("a/b", b"y")
    assert files_under(root) == ["a/b/c"]
    with pytest.raises(ObjectNotFoundError):
        await store.get("a/b")


async def test_reads_stay_consistent_across_store_instances(root: Path) -> None:
    await LocalObjectStore(root).put("x/y", b"persisted")
    reopened = LocalObjectStore(root)
    assert await reopened.get("x/y") == b"persisted"
    assert await reopened.get_range("x/y", 3, 6) == b"sis"


async def test_non_durable_mode_still_writes_atomically(root: Path) -> None:
    store = LocalObjectStore(root, durable=False)
    await store.put("k", b"v" * 1000)
    assert await store.get("k") == b"v" * 1000
    assert files_under(root) == ["k"]


async def test_delete_of_a_directory_key_is_a_no_op(root: Path) -> None:
    store = LocalObjectStore(root)
    await store.put("d/child", b"x")
    assert await store.delete_many(["d"]) == ["d"]
    assert await store.get("d/child") == b"x"


async def test_stale_temp_files_are_swept_and_fresh_ones_kept(root: Path) -> None:
    store = LocalObjectStore(root)
    await store.put("p/a", b"1")
    stale = root / "p" / f"{_local.TEMP_MARKER}crashed"
    fresh = root / f"{_local.TEMP_MARKER}in-flight"
    stale.write_bytes(b"partial")
    fresh.write_bytes(b"partial")
    hour_ago = time.time() - 3600
    os.utime(stale, (hour_ago, hour_ago))
    assert await store.remove_stale_temp_files(older_than_s=600) == 1
    assert not stale.exists() and fresh.exists()
    assert files_under(root) == [f"{_local.TEMP_MARKER}in-flight", "p/a"]


# --- symbolic links never lead out of the root ------------------------------------------------
@pytest.fixture
def escape(tmp_path: Path) -> tuple[LocalObjectStore, Path]:
    """A store whose root holds `out`, a link to a directory outside it with one file."""
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "secret").write_bytes(b"not an object")
    store = LocalObjectStore(tmp_path / "root", durable=False)
    (store.root / "out").symlink_to(outside, target_is_directory=True)
    return store, outside


async def test_put_through_a_symlinked_directory_is_refused(
    escape: tuple[LocalObjectStore, Path],
) -> None:
    store, outside = escape
    for key in ("out/new", "out/secret", "out/deeper/new"):
        with pytest.raises(StorageError, match="symbolic link"):
            await store.put(key, b"x")
    assert sorted(p.name for p in outside.iterdir()) == ["secret"]
    assert (outside / "secret").read_bytes() == b"not an object"


async def test_get_through_a_symlink_is_refused(escape: tuple[LocalObjectStore, Path]) -> None:
    store, outside = escape
    (store.root / "linked-file").symlink_to(outside / "secret")
    for key in ("out/secret", "linked-file"):
        with pytest.raises(StorageError, match="symbolic link"):
            await store.get(key)
        with pytest.raises(StorageError, match="symbolic link"):
            await store.get_range(key, 0, 1)
        with pytest.raises(StorageError, match="symbolic link"):
            await store.get_range_view(key, 0, 1)


async def test_a_long_view_is_the_files_pages_and_outlives_replacement_and_deletion(
    root: Path,
) -> None:
    """No copy: a view of `MAP_BYTES_MIN` or more maps the file; a shorter one is read. A put
    renames a new file over the key and a delete unlinks it, so a view keeps its bytes."""
    store = LocalObjectStore(root, durable=False)
    first = bytes(i % 253 for i in range(3 * _local.MAP_BYTES_MIN))
    await store.put("k", first)
    start = 4097  # not page-aligned: the mapping starts at the page below
    long = await store.get_range_view("k", start, start + _local.MAP_BYTES_MIN)
    short = await store.get_range_view("k", start, start + _local.MAP_BYTES_MIN - 1)
    assert isinstance(long.obj, mmap.mmap)
    assert isinstance(short.obj, bytes)
    await store.put("k", b"\xff" * len(first))
    assert long == first[start : start + _local.MAP_BYTES_MIN]
    await store.delete_many(["k"])
    assert long == first[start : start + _local.MAP_BYTES_MIN]
    assert short == first[start : start + _local.MAP_BYTES_MIN - 1]


async def test_delete_through_a_symlinked_directory_is_refused(
    escape: tuple[LocalObjectStore, Path],
) -> None:
    store, outside = escape
    await store.put("inside", b"x")
    with pytest.raises(StorageError, match="symbolic link"):
        await store.delete_many(["inside", "out/secret"])
    assert (outside / "secret").exists()
    assert await store.get("inside") == b"x"  # checked before anything was deleted


async def test_listing_never_enters_a_symlink(escape: tuple[LocalObjectStore, Path]) -> None:
    store, _ = escape
    await store.put("inside", b"x")
    assert [info.key async for info in store.list_all("")] == ["inside"]
    with pytest.raises(StorageError, match="symbolic link"):
        await store.list_page("out/")
