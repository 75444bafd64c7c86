"""Find objects the coordinator never committed, and condemn the ones past their grace.

Listing is bounded by the time order of WAL keys. Two positions move forward in key time:
- the listing cursor: every key named before it was listed and either found committed or
  condemned, so a cycle lists only from `object_key_floor(prefix, cursor)` on. It stops at the
  oldest key that is unknown and still within its grace, and never passes `now - orphan_grace_ms`:
  an object named within the grace may still be uploading, and may appear after younger ones;
- the watermark: every key named before it is resolved — committed, or condemned *and deleted*.
  It is the cursor held back by the condemned orphans not yet deleted. Those are kept in memory
  (`pending`, bounded) and re-checked by name each cycle rather than listed again, so one orphan
  waiting out its grace does not make every cycle list all the objects named after it.

What the cursor cannot see — an object that appears after the cursor passed its key time (a
zombie's very late upload, a broker clock far behind), or a key this library did not name that
sorts before the WAL keys — is found by a rescan from the start of the prefix, every
`rescan_interval_ms`, in bounded steps below the cursor.
"""

from __future__ import annotations

import logging
from collections.abc import Collection, Sequence
from dataclasses import dataclass, field

from diskless._object_keys import is_probe_key, object_key_floor, object_key_time_ms
from diskless.coordinator import BatchCoordinator, FileState
from diskless.lifecycle._config import FileManagerConfig
from diskless.storage import ObjectInfo, ObjectStore

logger = logging.getLogger(__name__)


@dataclass
class ListingPass:
    """What one bounded walk over part of the prefix found and did."""

    listing_calls: int = 0
    objects_listed: int = 0
    file_info_calls: int = 0
    condemned: int = 0
    condemned_ms: dict[str, tuple[int, int]] = field(default_factory=dict)
    """Timed keys found or made CONDEMNED: key -> (key time, listed size)."""
    last_listed_ms: int | None = None
    """The key time of the last timed key whose page was fully processed."""
    complete: bool = False
    """The walk reached the end of the prefix (or of its range)."""


class Reconciler:
    """One manager's reconciliation state: cursor, pending orphans, rescan, known commits."""

    def __init__(
        self, store: ObjectStore, coordinator: BatchCoordinator, config: FileManagerConfig
    ) -> None:
        self._store = store
        self._coordinator = coordinator
        self._config = config
        self._cursor_ms = 0
        # Condemned orphans the cursor passed but nobody has deleted yet: key -> (key time,
        # size). The sweep deletes them (files_to_delete); they hold the watermark back.
        self._pending: dict[str, tuple[int, int]] = {}
        # Keys at or above the cursor already seen committed: skipped by file_info until the
        # cursor passes them (a committed key never becomes an orphan). Bounded.
        self._committed: set[str] = set()
        self._rescan_after: str | None = None
        self._rescan_active = False
        self._next_rescan_ms: int | None = None

    @property
    def watermark_ms(self) -> int:
        if not self._pending:
            return self._cursor_ms
        return min(self._cursor_ms, min(created for created, _ in self._pending.values()))

    @property
    def orphan_bytes(self) -> int:
        """Bytes of the orphans this manager condemned and nobody has deleted yet."""
        return sum(size for _, size in self._pending.values())

    def orphan_deleted(self, key: str) -> int:
        """Note that `key` was deleted; its listed size if this manager condemned it, else 0."""
        entry = self._pending.pop(key, None)
        return 0 if entry is None else entry[1]

    # --- the frontier: from the cursor on -----------------------------------------------------
    async def recheck_pending(self, found: ListingPass) -> None:
        """Drop pending orphans another manager deleted and forgot (the coordinator no longer
        knows them: it forgets a file only after its deletion), one page of keys per cycle."""
        keys = sorted(self._pending)[: self._config.list_page_objects_max]
        if not keys:
            return
        infos = await self._coordinator.file_info(keys)
        found.file_info_calls += 1
        assert len(infos) == len(keys), (len(infos), len(keys))
        for key, info in zip(keys, infos, strict=True):
            if info is None:
                del self._pending[key]
            elif info.state is not FileState.CONDEMNED:
                # A condemned key is never committed; this is a coordinator bug. Keep the object.
                logger.error("condemned object %s is now %s", key, info.state.value)
                del self._pending[key]

    async def scan_frontier(self, now_ms: int, found: ListingPass) -> None:
        """List from the cursor, at most `list_objects_per_cycle_max` objects, into `found`.

        `found` is filled as pages are processed, so a failure mid-way keeps what was done.
        """
        config = self._config
        start_after = (
            object_key_floor(config.prefix, self._cursor_ms) if self._cursor_ms > 0 else None
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

    def advance(self, found: ListingPass, now_ms: int, deleted: Collection[str]) -> int:
        """Move the cursor past what `found` settled; return the new watermark.

        `deleted`: keys deleted (and forgotten) since the listing, e.g. by this cycle's sweep.
        """
        config = self._config
        horizon = now_ms - config.orphan_grace_ms
        for key, entry in found.condemned_ms.items():
            if key not in deleted:
                self._pending[key] = entry
        for key in deleted:
            self._pending.pop(key, None)
        if found.complete:
            limit = horizon
        elif found.last_listed_ms is not None:
            limit = found.last_listed_ms  # keys of that same ms may be unlisted yet
        else:
            return self.watermark_ms
        if len(self._pending) > config.pending_orphans_max:
            # Too many to track by name: hold the cursor at the oldest so that they are listed
            # (and so re-checked) again, rather than grow this set without bound.
            limit = min(limit, min(created for created, _ in self._pending.values()))
        limit = min(limit, horizon)
        if limit > self._cursor_ms:
            self._cursor_ms = limit
            floor = object_key_floor(config.prefix, limit)
            self._committed = {key for key in self._committed if key > floor}
        return self.watermark_ms

    # --- the rescan: below the cursor ---------------------------------------------------------
    async def rescan_step(self, now_ms: int, found: ListingPass) -> None:
        """Continue (or start, when due) a bounded rescan of the keys below the cursor."""
        config = self._config
        if config.rescan_interval_ms is None:
            return
        if not self._rescan_active:
            if self._next_rescan_ms is None:
                # A new manager's first frontier pass starts at the cursor 0: a full scan.
                self._next_rescan_ms = now_ms + config.rescan_interval_ms
            if now_ms < self._next_rescan_ms:
                return
            logger.info("rescan of %r below the cursor starts", config.prefix)
            self._rescan_active = True
            self._rescan_after = None
        ceiling = object_key_floor(config.prefix, self._cursor_ms)
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
        objects = [info for info in objects if not is_probe_key(info.key, config.prefix)]
        key_ms = {info.key: object_key_time_ms(info.key, config.prefix) for info in objects}
        sizes = {info.key: info.size for info in objects}
        unknown = [info for info in objects if info.key not in self._committed]
        to_condemn: list[str] = []
        if unknown:
            infos = await self._coordinator.file_info([info.key for info in unknown])
            found.file_info_calls += 1
            assert len(infos) == len(unknown), (len(infos), len(unknown))
            for listed, known in zip(unknown, infos, strict=True):
                key, created_ms = listed.key, key_ms[listed.key]
                if known is not None:
                    assert known.key == key, (known.key, key)
                    if known.state is not FileState.CONDEMNED:
                        if len(self._committed) < config.list_objects_per_cycle_max:
                            self._committed.add(key)
                    elif created_ms is not None:  # condemned earlier: the sweep deletes it
                        found.condemned_ms[key] = (created_ms, sizes[key])
                    continue
                born_ms = created_ms if created_ms is not None else listed.last_modified_ms
                if born_ms < horizon:
                    to_condemn.append(key)
                # else: within its grace. Its key time is >= now - grace, and the cursor never
                # passes that, so the next cycles list it again.
        if to_condemn:
            condemned = await self._coordinator.condemn_objects(to_condemn)
            unexpected = set(condemned) - set(to_condemn)
            assert not unexpected, f"condemn_objects returned keys not asked for: {unexpected}"
            found.condemned += len(condemned)
            for key in condemned:
                logger.info("condemned orphan object %s (never committed)", key)
                created_ms = key_ms[key]
                if created_ms is not None:
                    found.condemned_ms[key] = (created_ms, sizes[key])
            for key in set(to_condemn) - set(condemned):
                # Committed since file_info: settled. Re-checked if listed again, never deleted.
                logger.debug("object %s was committed while being condemned", key)
        for info in objects:
            created_ms = key_ms[info.key]
            if created_ms is not None:
                found.last_listed_ms = (
                    created_ms
                    if found.last_listed_ms is None
                    else max(found.last_listed_ms, created_ms)
                )
