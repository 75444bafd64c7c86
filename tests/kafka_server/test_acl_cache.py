"""Unit: a process's copy of the ACLs only moves forward, and a failed refresh is retried
promptly.

- A snapshot read at an older version than the one held (a read answered from an older state
  than the process already loaded) never replaces it, nor does a version poll that answers an
  older version: what was refused stays refused.
- A background refresh whose read started before a change made through this process and ended
  after it does not undo the change: the change is answered only once it is loaded, and nothing
  older is loaded after it.
- A revoke made while refreshing fails takes effect at the first refresh that works, a short
  retry after the coordinator answers again (`refresher.RETRY_MS_MAX`), not a whole
  `acl_refresh_ms` later; the retries are bounded and not logged one by one.
"""

from __future__ import annotations

import asyncio
import logging
import random
from collections.abc import AsyncIterator
from typing import Final

import pytest

from diskless.clock import ManualClock
from diskless.coordinator import (
    AclBinding,
    AclBindingFilter,
    AclOperation,
    AclPermissionType,
    AclSnapshot,
    CallFaults,
    FaultyBatchCoordinator,
    InMemoryBatchCoordinator,
    PatternType,
    ResourceType,
)
from diskless.kafka_server._coordination.acl_cache import AclCache
from diskless.kafka_server._coordination.authorizer import AuthorizerSettings
from diskless.kafka_server._coordination.refresher import RETRY_MS_MAX, retry_delays_ms

USER: Final = "User:alice"
REFRESH_MS: Final = 60_000
"""Long: in these tests a change reaches the cache only through the refreshes they drive."""
GRANT: Final = AclBinding(
    ResourceType.TOPIC,
    "orders",
    PatternType.LITERAL,
    USER,
    "*",
    AclOperation.WRITE,
    AclPermissionType.ALLOW,
)
OTHER: Final = GRANT._replace(resource_name="elsewhere")
REVOKE: Final = AclBindingFilter(*GRANT)


def _writes(cache: AclCache) -> bool:
    return cache.authorize(USER, "10.0.0.1", AclOperation.WRITE, ResourceType.TOPIC, "orders")


class LaggingReads(InMemoryBatchCoordinator):
    """An in-memory coordinator whose ACL reads can answer from an older state than the last
    change (`old_version`, `old_snapshot`), and whose snapshot reads can be held once their
    state is read (`hold`)."""

    def __init__(self) -> None:
        super().__init__()
        self.old_version: int | None = None
        self.old_snapshot: AclSnapshot | None = None
        self.hold: asyncio.Event | None = None
        self.held = asyncio.Event()

    async def acl_version(self) -> int:
        if self.old_version is not None:
            return self.old_version
        return await super().acl_version()

    async def acl_snapshot(self) -> AclSnapshot:
        if self.old_snapshot is not None:
            return self.old_snapshot
        snapshot = await super().acl_snapshot()
        hold = self.hold
        if hold is not None:
            self.held.set()
            await hold.wait()
        return snapshot


@pytest.fixture
async def lagging() -> AsyncIterator[LaggingReads]:
    coordinator = LaggingReads()
    yield coordinator
    await coordinator.close()


async def test_an_older_read_never_replaces_a_newer_snapshot(lagging: LaggingReads) -> None:
    cache = AclCache(lagging, AuthorizerSettings(), REFRESH_MS)
    await cache.start()
    await cache.create([GRANT])
    granted = await lagging.acl_snapshot()
    assert _writes(cache)
    await cache.delete([REVOKE])
    revoked = granted.version + 1
    assert not _writes(cache) and cache.version == revoked
    # Another process changes something else: this one's next refresh polls the new version,
    # but its snapshot read answers from the state before the revoke.
    await lagging.create_acls([OTHER])
    newest = await lagging.acl_version()
    lagging.old_snapshot = granted
    await cache.refresh()
    assert not _writes(cache), "the revoked grant came back from an older read"
    assert cache.version == revoked
    # A version poll that answers an older version loads nothing either.
    lagging.old_snapshot = None
    lagging.old_version = granted.version
    await cache.refresh()
    assert not _writes(cache) and cache.version == revoked
    # Once the reads are current again, the newest state is loaded.
    lagging.old_version = None
    await cache.refresh()
    assert cache.version == newest and not _writes(cache)
    await cache.close()


async def test_a_refresh_read_across_a_local_change_does_not_undo_it(
    lagging: LaggingReads,
) -> None:
    cache = AclCache(lagging, AuthorizerSettings(), REFRESH_MS)
    await cache.start()
    await lagging.create_acls([GRANT])  # through another process
    hold = lagging.hold = asyncio.Event()
    refreshing = asyncio.create_task(cache.refresh())
    await lagging.held.wait()  # its read of the grant is done, its answer not yet in
    lagging.hold = None
    revoking = asyncio.create_task(cache.delete([REVOKE]))
    granted = (await lagging.acl_snapshot()).version
    while await lagging.acl_version() == granted:  # until the revoke is stored
        await asyncio.sleep(0)
    for _ in range(10):
        await asyncio.sleep(0)
    assert not revoking.done(), "a change is answered only once it is loaded here"
    hold.set()
    await refreshing
    (deletion,) = await revoking
    assert deletion.deleted == [GRANT]
    assert not _writes(cache) and cache.version == granted + 1
    await cache.close()


def _attempts_within(delays_ms: list[int], span_ms: float) -> int:
    """How many retries after a first failure fall within `span_ms` of it."""
    count, at = 0, 0
    while True:
        at += delays_ms[min(count, len(delays_ms) - 1)]
        if at > span_ms:
            return count
        count += 1


async def test_a_revoke_takes_effect_a_short_retry_after_the_coordinator_is_back(
    caplog: pytest.LogCaptureFixture,
) -> None:
    clock = ManualClock()
    inner = InMemoryBatchCoordinator(clock)
    faulty = FaultyBatchCoordinator(inner, random.Random(1), reads=CallFaults(fail_rate=1.0))
    faulty.enabled = False
    cache = AclCache(faulty, AuthorizerSettings(), REFRESH_MS, clock=clock)
    await cache.start()
    await cache.create([GRANT])
    assert _writes(cache)
    # The revoke is answered through another process; then this one's reads fail for a while.
    await inner.delete_acls([REVOKE])
    faulty.enabled = True
    outage_ms = 10_000
    delays = retry_delays_ms(REFRESH_MS)
    assert delays[-1] == RETRY_MS_MAX
    with caplog.at_level(logging.DEBUG, logger="diskless.kafka_server._coordination.refresher"):
        await clock.advance(REFRESH_MS / 1000)
        assert cache.failed_refreshes == 1
        await clock.advance(outage_ms / 1000)
        # Retried promptly, never a whole interval apart, and at a bounded rate.
        assert cache.failed_refreshes == 1 + _attempts_within(delays, outage_ms)
        assert cache.failed_refreshes <= 1 + outage_ms // delays[0]
        assert _writes(cache), "the last snapshot decides while the coordinator is away"
        # The coordinator answers again: the revoke is loaded at the next retry.
        faulty.enabled = False
        await clock.advance(RETRY_MS_MAX / 1000)
    assert not _writes(cache), "the revoke is loaded a retry after the coordinator is back"
    assert cache.failed_refreshes == 0
    lines = [r.getMessage() for r in caplog.records if "ACLs: refreshing" in r.getMessage()]
    assert len(lines) == 2, lines  # one when the failures start, one when they end
    await cache.close()
    await faulty.close()
