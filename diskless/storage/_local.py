"""A filesystem-backed object store: durable objects without a network, for tests and laptops."""

from __future__ import annotations

import asyncio
import contextlib
import errno
import logging
import mmap
import os
import stat
import tempfile
import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import BinaryIO, TypeVar

from diskless.errors import ObjectNotFoundError, StorageError, StorageNotWritableError
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

logger = logging.getLogger(__name__)

TEMP_MARKER = ".diskless-tmp-"  # names starting with this are writes in progress, never objects
WRITE_CHUNK_BYTES_MAX = 1 << 20  # bound each os.write so huge objects need no second buffer
MAP_BYTES_MIN = 64 * 1024
"""A ranged view at least this long maps the file; a shorter one is read (a mapping costs two
system calls and page tables of its own, more than copying a few pages)."""
_MAP_POPULATE = getattr(mmap, "MAP_POPULATE", 0)
_Chunk = TypeVar("_Chunk", bytes, memoryview)

_ABSENT = (FileNotFoundError, NotADirectoryError, IsADirectoryError)
_NOT_WRITABLE = frozenset({errno.EACCES, errno.EPERM, errno.EROFS, errno.ENOTDIR})


def _write_all(fd: int, data: memoryview) -> None:
    """Write every byte; os.write may write less than asked."""
    offset = 0
    while offset < len(data):
        offset += os.write(fd, data[offset : offset + WRITE_CHUNK_BYTES_MAX])


def _read_range(file: BinaryIO, key: str, start: int, end: int) -> bytes:
    """Bytes [start, end) of the open object `key`, InvalidRangeError outside it."""
    check_range_within(key, start, end, os.fstat(file.fileno()).st_size)
    file.seek(start)
    chunk = file.read(end - start)
    if len(chunk) != end - start:  # the file shrank under us: it cannot, objects are replaced
        raise StorageError(f"short read of {key!r}: {len(chunk)} of {end - start} bytes")
    return chunk


def _fsync_dir(path: Path) -> None:
    """Make a directory entry change (create, rename, unlink) survive a power cut."""
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


class LocalObjectStore(ObjectStore):
    """Each object is one file under `root`, its key's segments being directories.

    Writes go to a temp file in the target directory, are fsynced, then renamed over the key
    and the directory is fsynced: readers and a crash see the old object or the new one, never a
    torn one. `durable=False` skips the fsyncs (benchmarks of everything but the disk).
    Blocking I/O runs in worker threads so the event loop keeps serving.

    Symbolic links are not part of the store: an operation whose path goes through one (a
    directory below the root, or the object itself) is refused with StorageError, so a link
    planted inside the root cannot make put, get, delete or a listing reach files outside it.
    Listings skip links. (The root itself may be a link: the caller chose it.)

    Limits: a key cannot also be a directory of other keys (`a/b` and `a/b/c`), which S3 allows;
    such a put raises StorageError. Temp files left by a crash are never listed; call
    `remove_stale_temp_files` (e.g. at start-up) to reclaim their space.
    Empty directories left by deletes are kept (a few per prefix; removing them races with puts).
    """

    def __init__(self, root: str | os.PathLike[str], *, durable: bool = True) -> None:
        self._root = Path(root).absolute()
        self._root.mkdir(parents=True, exist_ok=True)
        self._durable = durable

    @property
    def root(self) -> Path:
        return self._root

    async def put(self, key: str, data: bytes | bytearray | memoryview) -> None:
        path = self._path(key)
        view = memoryview(data).cast("B")
        self._counters.put(view.nbytes)
        with self._boundary(f"put {key!r}"):
            await asyncio.to_thread(self._put_sync, path, view)

    async def get(self, key: str) -> bytes:
        path = self._path(key)
        self._counters.get()
        with self._boundary(f"get {key!r}", missing=key):
            blob = await asyncio.to_thread(self._get_sync, path)
        self._counters.bytes_read(len(blob))
        return blob

    async def get_range(self, key: str, start: int, end: int) -> bytes:
        return await self._ranged(self._get_range_sync, key, start, end)

    async def get_range_view(self, key: str, start: int, end: int) -> memoryview:
        """The file's pages themselves, mapped read-only: no copy, and the page cache holds them
        once for every reader. The pages are mapped before this returns (MAP_POPULATE), so a
        cold read waits in a worker thread, not on the event loop. The store never changes a
        file in place (a put renames a new file over it), so a view never sees bytes change or
        vanish."""
        return await self._ranged(self._view_range_sync, key, start, end)

    async def _ranged(
        self, read: Callable[[str, Path, int, int], _Chunk], key: str, start: int, end: int
    ) -> _Chunk:
        path = self._path(key)
        self._counters.ranged_get()
        with self._boundary(f"get {key!r}", missing=key):
            chunk = await asyncio.to_thread(read, key, path, start, end)
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
        directory, _, name_prefix = prefix.rpartition("/")
        if any(s.startswith(TEMP_MARKER) for s in prefix.split("/")):
            return ListPage(objects=[], next_token=None)
        self._counters.list()
        floor = listing_floor(token, start_after)
        with self._boundary(f"list {prefix!r}"):
            objects, more = await asyncio.to_thread(
                self._list_sync, directory, name_prefix, floor, limit
            )
        return ListPage(objects=objects, next_token=objects[-1].key if more else None)

    async def delete_many(self, keys: Sequence[str]) -> list[str]:
        paths = {key: self._path(key) for key in keys}
        self._counters.delete(len(paths), requests=-(-len(paths) // DELETE_KEYS_MAX))
        with self._boundary("delete"):
            await asyncio.to_thread(self._delete_sync, list(paths.values()))
        return list(paths)

    async def remove_stale_temp_files(self, older_than_s: float = 3600.0) -> int:
        """Delete temp files a crash left behind; returns how many.

        Only files older than `older_than_s` go, so writes in progress are never pulled from
        under a concurrent put.
        """
        if older_than_s < 0:
            raise ValueError("older_than_s must not be negative")
        with self._boundary("temp sweep"):
            return await asyncio.to_thread(self._remove_stale_sync, older_than_s)

    @contextlib.contextmanager
    def _boundary(self, operation: str, missing: str | None = None) -> Iterator[None]:
        """Translate an OSError raised inside the block (a file that is not there is the
        ObjectNotFoundError of key `missing`, when given) and report the outcome to the
        availability: a failing disk is this store not answering."""
        try:
            yield
        except OSError as exc:
            if missing is not None and isinstance(exc, _ABSENT):
                self.availability.answered()
                raise ObjectNotFoundError(f"no object {missing!r}") from None
            kind = StorageNotWritableError if exc.errno in _NOT_WRITABLE else StorageError
            error = kind(f"local {operation} failed: {exc.strerror or exc}")
            self.availability.failed(error)
            raise error from exc
        self.availability.answered()

    def _remove_stale_sync(self, older_than_s: float) -> int:
        cutoff_ns = time.time_ns() - int(older_than_s * 1e9)
        removed = 0
        for directory, _, names in os.walk(self._root):
            for name in names:
                if not name.startswith(TEMP_MARKER):
                    continue
                path = os.path.join(directory, name)
                with contextlib.suppress(FileNotFoundError):
                    if os.stat(path, follow_symlinks=False).st_mtime_ns <= cutoff_ns:
                        os.unlink(path)
                        removed += 1
        if removed:
            logger.info("removed %d stale temp files under %s", removed, self._root)
        return removed

    def _path(self, key: str) -> Path:
        validate_key(key)
        segments = key.split("/")
        if any(segment.startswith(TEMP_MARKER) for segment in segments):
            raise ValueError(f"object key segments may not start with {TEMP_MARKER!r}: {key!r}")
        path = self._root.joinpath(*segments)
        assert path.is_relative_to(self._root)
        return path

    def _refuse_symlinks(self, path: Path) -> None:
        """StorageError if a directory from the root down to `path` (inclusive) is a symlink.

        One lstat per key segment; a missing segment ends the walk (nothing below it exists to
        follow, and a put creates real directories).
        """
        current = self._root
        for segment in path.relative_to(self._root).parts:
            current = current / segment
            try:
                mode = os.lstat(current).st_mode
            except (FileNotFoundError, NotADirectoryError):
                return
            if stat.S_ISLNK(mode):
                raise StorageError(
                    f"refusing {path.relative_to(self._root).as_posix()!r}: "
                    f"{current.relative_to(self._root).as_posix()!r} is a symbolic link, which "
                    "may lead out of the store root"
                )

    def _open_object(self, path: Path) -> int:
        """A read-only descriptor of the object at `path`, which no symlink may lead to."""
        self._refuse_symlinks(path.parent)
        try:
            return os.open(path, os.O_RDONLY | os.O_NOFOLLOW)
        except OSError as exc:
            if exc.errno == errno.ELOOP:
                raise StorageError(
                    f"refusing {path.relative_to(self._root).as_posix()!r}: it is a symbolic "
                    "link, which may lead out of the store root"
                ) from None
            raise

    def _get_sync(self, path: Path) -> bytes:
        with open(self._open_object(path), "rb") as file:
            return file.read()

    def _put_sync(self, path: Path, data: memoryview) -> None:
        self._refuse_symlinks(path.parent)  # the object's own name is replaced, not followed
        self._make_dirs(path.parent)
        fd, temp_name = tempfile.mkstemp(prefix=TEMP_MARKER, dir=path.parent)
        try:
            try:
                _write_all(fd, data)
                if self._durable:
                    os.fsync(fd)
            finally:
                os.close(fd)
            os.replace(temp_name, path)
        except BaseException:
            with contextlib.suppress(OSError):
                os.unlink(temp_name)
            raise
        if self._durable:
            _fsync_dir(path.parent)

    def _make_dirs(self, directory: Path) -> None:
        """Create missing directories top-down, fsyncing each parent so new ones persist."""
        missing: list[Path] = []
        while directory != self._root and not directory.is_dir():
            missing.append(directory)
            directory = directory.parent
        for path in reversed(missing):
            with contextlib.suppress(FileExistsError):
                path.mkdir()
            if self._durable:
                _fsync_dir(path.parent)

    def _get_range_sync(self, key: str, path: Path, start: int, end: int) -> bytes:
        with open(self._open_object(path), "rb") as file:
            return _read_range(file, key, start, end)

    def _view_range_sync(self, key: str, path: Path, start: int, end: int) -> memoryview:
        with open(self._open_object(path), "rb") as file:
            if end - start < MAP_BYTES_MIN:
                return memoryview(_read_range(file, key, start, end))
            check_range_within(key, start, end, os.fstat(file.fileno()).st_size)
            aligned = start - start % mmap.ALLOCATIONGRANULARITY
            try:
                mapped = mmap.mmap(
                    file.fileno(),
                    end - aligned,
                    flags=mmap.MAP_SHARED | _MAP_POPULATE,
                    prot=mmap.PROT_READ,
                    offset=aligned,
                )
            except OSError:  # a file system that cannot map files: read it instead
                return memoryview(_read_range(file, key, start, end))
        return memoryview(mapped)[start - aligned :]

    def _list_sync(
        self, directory: str, name_prefix: str, floor: str | None, limit: int
    ) -> tuple[list[ObjectInfo], bool]:
        start = self._root.joinpath(*directory.split("/")) if directory else self._root
        self._refuse_symlinks(start)
        key_prefix = directory + "/" if directory else ""
        objects: list[ObjectInfo] = []
        for info in self._walk(start, key_prefix, name_prefix, floor):
            if len(objects) == limit:
                return objects, True
            objects.append(info)
        return objects, False

    def _walk(
        self, directory: Path, key_prefix: str, name_prefix: str, floor: str | None
    ) -> Iterator[ObjectInfo]:
        """Objects in key order: a directory sorts as 'name/', which is where its keys sort."""
        try:
            with os.scandir(directory) as entries:
                found = [
                    (key_prefix + entry.name + ("/" if is_dir else ""), is_dir, entry)
                    for entry in entries
                    if entry.name.startswith(name_prefix) and not entry.name.startswith(TEMP_MARKER)
                    for is_dir in (entry.is_dir(follow_symlinks=False),)
                    if is_dir or entry.is_file(follow_symlinks=False)
                ]
        except (FileNotFoundError, NotADirectoryError):
            return
        found.sort(key=lambda item: item[0])
        for name, is_dir, entry in found:
            if is_dir:
                # Skip a subtree whose keys all sort at or before the floor.
                if floor is not None and name < floor and not floor.startswith(name):
                    continue
                yield from self._walk(Path(entry.path), name, "", floor)
            elif floor is None or name > floor:
                try:
                    stat = entry.stat(follow_symlinks=False)
                except FileNotFoundError:  # deleted while we listed
                    continue
                yield ObjectInfo(
                    key=name, size=stat.st_size, last_modified_ms=stat.st_mtime_ns // 1_000_000
                )

    def _delete_sync(self, paths: list[Path]) -> None:
        for path in paths:  # all checked before any goes; unlink never follows the last name
            self._refuse_symlinks(path.parent)
        touched: set[Path] = set()
        for path in paths:
            try:
                path.unlink()
            except _ABSENT:
                continue
            touched.add(path.parent)
        if self._durable:
            for directory in touched:
                _fsync_dir(directory)
