"""Find objects the coordinator never committed, and condemn the ones past their grace.

Listing is bounded by the time order of WAL keys. The reconciler keeps a watermark: every key
named before it has been resolved — committed (the coordinator knows it), or condemned and
deleted — so a cycle lists only from `object_key_floor(prefix, watermark)` on. The watermark
stops at the oldest unresolved key and never passes `now - orphan_grace_ms`: an object named
within the grace may still be uploading, and may appear in a listing after younger ones.

What the watermark cannot see — an object that appears after the watermark passed its key time
(a zombie's very late upload, a broker clock far behind), or a key this library did not name
that sorts before the WAL keys — is found by a rescan from the start of the prefix, every
`rescan_interval_ms`, in bounded steps below the watermark.
"""

from __future__ import annotations

import logging
from collections.abc import Collection, Sequence
from dataclasses import dataclass, field

from diskless.coordinator._api import BatchCoordinator, FileState
from diskless.lifecycle._config import FileManagerConfig
from diskless.storage._base import ObjectInfo, ObjectStore
from diskless.wal._keys import object_key_floor, object_key_time_ms

logger = logging.getLogger(__name__)


@dataclass
class ListingPass:
    """What one bounded walk over part of the prefix found and did."""

    listing_calls: int = 0
    objects_listed: int = 0
    file_info_calls: int = 0
    condemned: int = 0
    unresolved_ms: dict[str, int] = field(default_factory=dict)
    """Timed keys left unresolved (young, condemned but not deleted): key -> key time."""
    last_listed_ms: int | None = None
    """The key time of the last timed key whose page was fully processed."""
    complete: bool = False
    """The walk reached the end of the prefix (or of its range)."""


class Reconciler:
    """One manager's reconciliation state: the watermark, a rescan cursor, and known commits."""

    def __init__(
        self, store: ObjectStore, coordinator: BatchCoordinator, config: FileManagerConfig
    ) -> None:
        self._store = store
        self._coordinator = coordinator
        self._config = config
        self._watermark_ms = 0
        # Keys at or above the watermark already seen committed: skipped by file_info until the
        # watermark passes them (a committed key never becomes an orphan). Bounded by the window.
        self._committed: set[str] = set()
        self._rescan_after: str | None = None
        self._rescan_active = False
        self._next_rescan_ms: int | None = None

    @property
    def watermark_ms(self) -> int:
        return self._watermark_ms

    # --- the frontier: from the watermark on --------------------------------------------------
    async def scan_frontier(self, now_ms: int, found: ListingPass) -> None:
        """List from the watermark, at most `list_objects_per_cycle_max` objects, into `found`.

        `found` is filled as pages are processed, so a failure mid-way keeps what was done.
        """
        config = self._config
        start_after = (
            object_key_floor(config.prefix, self._watermark_ms) if self._watermark_ms > 0 else None
        )
        budget = config.list_objects_per_cycle_max
        token: str | None = None
        while budget > 0:
            page = await self._store.list_page(
                config.prefix,
                token=token,
                limit=min(config.list_page_objects_max, budget),
                start_after=start_after,
            )
            found.listing_calls += 1
            found.objects_listed += len(page.objects)
            assert len(page.objects) <= budget, (len(page.objects), budget)
            budget -= len(page.objects)
            await self._reconcile(page.objects, now_ms, found)
            if page.next_token is None:
                found.complete = True
                return
            token = page.next_token

    def advance_watermark(self, found: ListingPass, now_ms: int, deleted: Collection[str]) -> int:
        """Move the watermark past what `found` resolved (`deleted`: keys deleted since)."""
        horizon = now_ms - self._config.orphan_grace_ms
        if found.complete:
            limit = horizon
        elif found.last_listed_ms is not None:
            limit = found.last_listed_ms  # keys of that same ms may be unlisted yet
        else:
            return self._watermark_ms
        pending = [ms for key, ms in found.unresolved_ms.items() if key not in deleted]
        if pending:
            limit = min(limit, min(pending))
        limit = min(limit, horizon)
        if limit > self._watermark_ms:
            self._watermark_ms = limit
            floor = object_key_floor(self._config.prefix, limit)
            self._committed = {key for key in self._committed if key > floor}
        return self._watermark_ms

    # --- the rescan: below the watermark ------------------------------------------------------
    async def rescan_step(self, now_ms: int, found: ListingPass) -> None:
        """Continue (or start, when due) a bounded rescan of the keys below the watermark."""
        config = self._config
        if config.rescan_interval_ms is None:
            return
        if not self._rescan_active:
            if self._next_rescan_ms is None:
                # A new manager's first frontier pass starts at the watermark 0: a full scan.
                self._next_rescan_ms = now_ms + config.rescan_interval_ms
            if now_ms < self._next_rescan_ms:
                return
            logger.info("rescan of %r below the watermark starts", config.prefix)
            self._rescan_active = True
            self._rescan_after = None
        ceiling = object_key_floor(config.prefix, self._watermark_ms)
        budget = config.rescan_objects_per_cycle_max
        while budget > 0:
            page = await self._store.list_page(
                config.prefix,
                limit=min(config.list_page_objects_max, budget),
                start_after=self._rescan_after,
            )
            found.listing_calls += 1
            found.objects_listed += len(page.objects)
            budget -= len(page.objects)
            below = [info for info in page.objects if info.key < ceiling]
            await self._reconcile(below, now_ms, found)
            if below:
                self._rescan_after = below[-1].key
            if page.next_token is None or len(below) < len(page.objects):
                found.complete = True
                self._rescan_active = False
                self._next_rescan_ms = now_ms + config.rescan_interval_ms
                logger.info("rescan of %r finished", config.prefix)
                return

    # --- one page -----------------------------------------------------------------------------
    async def _reconcile(
        self, objects: Sequence[ObjectInfo], now_ms: int, found: ListingPass
    ) -> None:
        """Classify listed objects; condemn the unknown ones older than the grace."""
        config = self._config
        horizon = now_ms - config.orphan_grace_ms
        key_ms = {info.key: object_key_time_ms(info.key, config.prefix) for info in objects}
        unknown = [info for info in objects if info.key not in self._committed]
        to_condemn: list[str] = []
        if unknown:
            infos = await self._coordinator.file_info([info.key for info in unknown])
            found.file_info_calls += 1
            assert len(infos) == len(unknown), (len(infos), len(unknown))
            for listed, known in zip(unknown, infos, strict=True):
                key = listed.key
                if known is not None:
                    assert known.key == key, (known.key, key)
                    if known.state is FileState.CONDEMNED:
                        self._unresolved(key, key_ms[key], found)  # the sweep deletes it
                    elif len(self._committed) < config.list_objects_per_cycle_max:
                        self._committed.add(key)
                    continue
                created_ms = key_ms[key]
                born_ms = created_ms if created_ms is not None else listed.last_modified_ms
                if born_ms < horizon:
                    to_condemn.append(key)
                self._unresolved(key, created_ms, found)
        if to_condemn:
            condemned = await self._coordinator.condemn_objects(to_condemn)
            unexpected = set(condemned) - set(to_condemn)
            assert not unexpected, f"condemn_objects returned keys not asked for: {unexpected}"
            found.condemned += len(condemned)
            for key in condemned:
                logger.info("condemned orphan object %s (never committed)", key)
            # A key not returned was committed since file_info: re-checked next cycle.
        for info in objects:
            created_ms = key_ms[info.key]
            if created_ms is not None:
                found.last_listed_ms = (
                    created_ms
                    if found.last_listed_ms is None
                    else max(found.last_listed_ms, created_ms)
                )

    @staticmethod
    def _unresolved(key: str, created_ms: int | None, found: ListingPass) -> None:
        if created_ms is not None:
            found.unresolved_ms[key] = created_ms
