"""The broker's cache of topic descriptions: produce validates against it without a
coordinator call per request, and refreshes in one call what it cannot answer.

An entry goes as soon as the coordinator's change feed names its topic (created, grown,
reconfigured, deleted: `changed`), so a config altered through any process applies to this
one's produce checks at its next request where the feed names topics (this process's own steps,
PostgreSQL's NOTIFY). Where the feed only says "everything may have changed" (another SQLite
process committed something), the cache reads the coordinator's config version (one cheap read,
one at a time) and drops every entry when it grew: a topic reconfigured through another process
applies here once that notice has come, not only once the entry's time to live runs out.
(Growth and deletion need no such check: a produce to a partition beyond the cached count
refreshes its topic, and the coordinator refuses what a deleted topic no longer takes.)"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Iterable, Mapping

import msgspec

from diskless._types import TopicPartition
from diskless.clock import Clock
from diskless.coordinator import BatchCoordinator, PartitionChanges, TopicDescription
from diskless.errors import CoordinatorError

_log = logging.getLogger(__name__)


class _CachedTopic(msgspec.Struct):
    description: TopicDescription
    expires_at: float
    """Monotonic seconds after which the entry is refreshed before use."""


class TopicCache:
    """Descriptions trusted for `ttl_s`; a topic the coordinator does not know is never cached,
    so its creation shows at once."""

    def __init__(self, coordinator: BatchCoordinator, clock: Clock, ttl_s: float) -> None:
        self._coordinator = coordinator
        self._clock = clock
        self._ttl_s = ttl_s
        self._topics: dict[str, _CachedTopic] = {}
        self._config_version: int | None = None
        """The coordinator's config version when the entries were last checked against it."""
        self._checking: asyncio.Task[None] | None = None

    def forget(self, names: Iterable[str]) -> None:
        """Drop entries this broker knows to be stale (it created, grew or deleted them)."""
        for name in names:
            self._topics.pop(name, None)

    def changed(self, changes: PartitionChanges) -> None:
        """The change feed's listener (`BatchCoordinator.watch_changes`): the topics it names
        are read again; "everything" has the config version checked."""
        self.forget(changes.topics)
        if changes.everything and (self._checking is None or self._checking.done()):
            self._checking = asyncio.get_running_loop().create_task(self._check_version())

    async def _check_version(self) -> None:
        try:
            version = await self._coordinator.config_version()
        except CoordinatorError as e:  # the entries' time to live still bounds them
            _log.debug("topic cache: cannot read the config version: %r", e)
            return
        if version != self._config_version:
            self._topics.clear()  # (the first check too: the entries' version was not known)
            self._config_version = version

    async def close(self) -> None:
        """Stop a version check under way."""
        task, self._checking = self._checking, None
        if task is not None:
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)

    def cached(self, partitions: Iterable[TopicPartition]) -> dict[str, TopicDescription] | None:
        """The descriptions of `partitions`' topics if the cache answers for all of them (each
        fresh and covering the partition), else None: `describe` must refresh some."""
        now = self._clock.monotonic()
        topics = self._topics
        found: dict[str, TopicDescription] = {}
        for tp in partitions:
            cached = topics.get(tp.topic)
            if cached is None or cached.expires_at <= now:
                return None
            description = cached.description
            if tp.partition >= description.partitions:
                return None
            found[tp.topic] = description
        return found

    async def describe(
        self, names: set[str], partitions: Mapping[TopicPartition, object]
    ) -> tuple[dict[str, TopicDescription], dict[str, CoordinatorError]]:
        """Topic descriptions from the cache, refreshed (one call) for the names it cannot answer.

        A name is refreshed when it is not cached, its entry expired, or a requested partition is
        beyond its cached partition count (the topic may have grown). Returns the descriptions
        found and, when the coordinator failed, its failure for each name left without one.
        """
        now = self._clock.monotonic()
        found: dict[str, TopicDescription] = {}
        refresh: set[str] = set()
        for name in names:
            cached = self._topics.get(name)
            if cached is None or cached.expires_at <= now:
                refresh.add(name)
            else:
                found[name] = cached.description
        for tp in partitions:
            known = found.get(tp.topic)
            if known is not None and tp.partition >= known.partitions:
                refresh.add(tp.topic)
        if not refresh:
            return found, {}
        try:
            descriptions = await self._coordinator.describe_topics(sorted(refresh))
        except CoordinatorError as e:
            # Serve what is cached, even expired; the rest fail retriably.
            unavailable: dict[str, CoordinatorError] = {}
            for name in refresh:
                cached = self._topics.get(name)
                if cached is not None:
                    found[name] = cached.description
                else:
                    unavailable[name] = e
            return found, unavailable
        for name, description in self.store(refresh, descriptions).items():
            if description is None:
                found.pop(name, None)
            else:
                found[name] = description
        return found, {}

    def store(
        self, names: Iterable[str], descriptions: Iterable[TopicDescription]
    ) -> dict[str, TopicDescription | None]:
        """Take what the coordinator just answered for `names`: each one's description, or None
        for a name it does not know (or no longer: never cached, so a creation shows at once)."""
        expires_at = self._clock.monotonic() + self._ttl_s
        returned = {d.name: d for d in descriptions}
        stored: dict[str, TopicDescription | None] = {}
        for name in names:
            description = returned.get(name)
            if description is None:
                self._topics.pop(name, None)
            else:
                self._topics[name] = _CachedTopic(description, expires_at)
            stored[name] = description
        return stored

    def last_known(self, names: Iterable[str]) -> dict[str, TopicDescription]:
        """The descriptions last taken of those of `names` that have one, expired or not."""
        return {n: cached.description for n in names if (cached := self._topics.get(n))}
