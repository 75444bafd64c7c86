"""The engine's files: the state of each object the coordinator knows (`_rules.files`).

A committed object is LIVE while batches refer to it; the steps that delete batches (topic
deletion, DeleteRecords, retention) release it here. The file manager condemns the keys it found
without a commit, lists the files it may delete, and forgets them once they are deleted.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence

from diskless.coordinator._engine.base import EngineBase
from diskless.coordinator._rules.files import FileRow, condemned_file, may_forget, released_file
from diskless.coordinator._store import Changes, Needs, Operation, StoreStep
from diskless.coordinator._values import FileInfo, FileState, FileStats


class FileOperations(EngineBase):
    async def _released_files(
        self, db: StoreStep, released: Counter[str], now_ms: int
    ) -> dict[str, FileRow | None]:
        """The new rows of the files whose batches were deleted (`released`: batches per key)."""
        if not released:
            return {}
        files = (await db.load(Needs(files=set(released)))).files
        return {key: released_file(files[key], count, now_ms) for key, count in released.items()}

    async def condemn_objects(self, keys: Sequence[str]) -> list[str]:
        async def condemn(db: StoreStep) -> list[str]:
            now = self._clock.now_ms()
            files = dict((await db.load(Needs(files=set(keys)))).files)
            new: dict[str, FileRow | None] = {}
            for key in keys:
                if key not in files:
                    files[key] = new[key] = condemned_file(now)
            await db.apply(Changes(files=new))
            return [key for key in keys if files[key].state is FileState.CONDEMNED]

        return await self._write(Operation.CONDEMN_OBJECTS, condemn)

    async def files_to_delete(self, older_than_ms: int, limit: int = 1000) -> list[FileInfo]:
        rows = await self._read(lambda view: view.dead_files(older_than_ms, max(0, limit)))
        return [row.info(key) for key, row in rows]

    async def forget_files(self, keys: Sequence[str]) -> None:
        async def forget(db: StoreStep) -> None:
            files = (await db.load(Needs(files=set(keys)))).files
            gone: dict[str, FileRow | None] = {k: None for k, f in files.items() if may_forget(f)}
            await db.apply(Changes(files=gone))

        await self._write(Operation.FORGET_FILES, forget)

    async def file_info(self, keys: Sequence[str]) -> list[FileInfo | None]:
        files = await self._read(lambda view: view.files(keys))
        return [f.info(k) if (f := files.get(k)) is not None else None for k in keys]

    async def file_stats(self) -> FileStats:
        totals = await self._read(lambda view: view.file_totals())

        def of(state: FileState) -> tuple[int, int]:
            return totals.get(state, (0, 0))

        return FileStats(
            live_objects=of(FileState.LIVE)[0],
            live_bytes=of(FileState.LIVE)[1],
            unreferenced_objects=of(FileState.UNREFERENCED)[0],
            unreferenced_bytes=of(FileState.UNREFERENCED)[1],
            condemned_objects=of(FileState.CONDEMNED)[0],
            condemned_bytes=of(FileState.CONDEMNED)[1],
        )
