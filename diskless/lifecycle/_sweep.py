"""Delete the files the coordinator no longer needs, then make it forget them.

A file qualifies once it has been UNREFERENCED (no live batch; in-progress fetches may still read
it) or CONDEMNED (never committed; its commit is rejected by name) for `unreferenced_grace_ms`.
Order matters: delete first, forget only the keys the store confirms gone. A crash in between
leaves the file in the coordinator's books, so the next cycle deletes it again (a no-op) and
forgets it; forgetting first could leak the object forever. Several managers may sweep at once:
deleting an absent key succeeds, and forgetting a forgotten key does nothing.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field

from diskless._availability import log_failure
from diskless.coordinator import BatchCoordinator, FileInfo, FileState
from diskless.errors import StorageError
from diskless.lifecycle._config import FileManagerConfig
from diskless.storage import ObjectStore

logger = logging.getLogger(__name__)

_DELETABLE = frozenset({FileState.UNREFERENCED, FileState.CONDEMNED})


@dataclass
class SweepPass:
    """What one sweep did; filled as it goes, so a failure mid-way keeps what was done."""

    deleted: dict[str, int] = field(default_factory=dict)
    """Deleted and forgotten keys -> their size in the coordinator's books (0 if unknown)."""
    failures: int = 0
    file_info_calls: int = 0


class Sweeper:
    def __init__(
        self, store: ObjectStore, coordinator: BatchCoordinator, config: FileManagerConfig
    ) -> None:
        self._store = store
        self._coordinator = coordinator
        self._config = config

    async def sweep(self, now_ms: int, done: SweepPass) -> None:
        """Delete and forget at most `deletes_per_cycle_max` files whose grace has ended."""
        config = self._config
        older_than_ms = now_ms - config.unreferenced_grace_ms
        files = await self._coordinator.files_to_delete(
            older_than_ms, limit=config.deletes_per_cycle_max
        )
        assert len(files) <= config.deletes_per_cycle_max, len(files)
        eligible = [info for info in files if _deletable(info, older_than_ms)]
        if len(eligible) < len(files):
            logger.error(
                "files_to_delete returned %d files that are live or too young; kept them",
                len(files) - len(eligible),
            )
        step = config.delete_batch_objects_max
        for start in range(0, len(eligible), step):
            await self._delete_batch(eligible[start : start + step], older_than_ms, done)

    async def _delete_batch(
        self, batch: list[FileInfo], older_than_ms: int, done: SweepPass
    ) -> None:
        # Re-validate right before deleting: no state ever moves back to LIVE, but a deleted
        # live object is lost data, so one more index lookup per batch is cheap insurance.
        current = await self._coordinator.file_info([info.key for info in batch])
        done.file_info_calls += 1
        assert len(current) == len(batch), (len(current), len(batch))
        sizes = {
            info.key: info.size
            for info, now in zip(batch, current, strict=True)
            if now is not None and _deletable(now, older_than_ms)
        }
        if not sizes:
            return  # another manager deleted and forgot them already
        keys = list(sizes)
        try:
            gone = await self._store.delete_many(keys)
        except StorageError as error:
            done.failures += len(keys)
            log_failure(logger, error, "deleting %d objects failed; retrying next cycle", len(keys))
            return
        gone_set = set(gone)
        confirmed = [key for key in keys if key in gone_set]
        done.failures += len(keys) - len(confirmed)
        if not confirmed:
            return
        await self._coordinator.forget_files(confirmed)
        done.deleted.update((key, sizes[key]) for key in confirmed)
        logger.debug("deleted and forgot %d objects", len(confirmed))


def _deletable(info: FileInfo, older_than_ms: int) -> bool:
    return info.state in _DELETABLE and info.since_ms <= older_than_ms
