"""The file state machine, which every backend stores the same way.

A committed object is LIVE while any batch refers to it and UNREFERENCED from the moment its
last batch is deleted; a key the file manager found without a commit is CONDEMNED, so that a
late commit of it fails. Only files that are not LIVE may be forgotten (after their deletion).
"""

from __future__ import annotations

import msgspec

from diskless.coordinator._values import FileInfo, FileState


class FileRow(msgspec.Struct, frozen=True, gc=False):
    state: FileState
    size: int
    since_ms: int
    """When the file entered its state."""
    live_batches: int = 0

    def info(self, key: str) -> FileInfo:
        return FileInfo(key, self.state, self.size, self.since_ms)


def committed_file(size: int, live_batches: int, now_ms: int) -> FileRow:
    """A new object's row: LIVE if any of its batches was appended, else born unreferenced."""
    state = FileState.LIVE if live_batches else FileState.UNREFERENCED
    return FileRow(state, size, now_ms, live_batches)


def condemned_file(now_ms: int) -> FileRow:
    return FileRow(FileState.CONDEMNED, 0, now_ms)


def released_file(file: FileRow, batches: int, now_ms: int) -> FileRow:
    """`batches` of the file's batches were deleted."""
    assert file.state is FileState.LIVE and 0 < batches <= file.live_batches, (file, batches)
    left = file.live_batches - batches
    if left:
        return FileRow(FileState.LIVE, file.size, file.since_ms, left)
    return FileRow(FileState.UNREFERENCED, file.size, now_ms, 0)


def may_forget(file: FileRow) -> bool:
    return file.state is not FileState.LIVE
