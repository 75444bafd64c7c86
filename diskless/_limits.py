"""The time budgets that bound how late a commit can land, and the checks that chain them.

Four settings in four packages protect one invariant, that an object is either committed or
reclaimed, never both: a WAL's commit budget (how long a segment may take from being named to its
last commit attempt), the transaction lease (how long an end waits for a batch on its way), the
coordinator's commit-age bound (the oldest object a commit may still name) and the file manager's
orphan grace (how old an unknown object must be before it is condemned). They must nest:

    wal commit budget <= txn lease ttl <= LEASE_TTL_MS_MAX
    wal commit budget <  commit_age_max_ms < orphan_grace_ms - clock_skew_max_ms

Each link is checked here, once, where its two sides meet: a broker checks its WAL and lease
against the coordinator's bounds when it starts, the file manager checks its grace against them
when it is created. Every error names both settings.
"""

from __future__ import annotations

from typing import Final

import msgspec

LEASE_TTL_MS_MAX: Final = 60 * 60 * 1000
"""A longer lease is a configuration error: an end may wait that long for a dead broker."""
COMMIT_AGE_MAX_MS_DEFAULT: Final = 240_000
"""The oldest object (by the creation time in its key) that a commit may still name."""
BACKOFF_EXPONENT_MAX: Final = 10
"""Retry backoffs double up to 2**10 times their base, then stay there."""


def backoff_ms(base_ms: int, retry: int) -> int:
    """The sleep before retry number `retry` (0 for the first): `base_ms`, doubling each time."""
    return base_ms * (1 << min(retry, BACKOFF_EXPONENT_MAX))


class CommitBounds(msgspec.Struct, frozen=True):
    """What a coordinator guarantees about the objects it commits.

    `commit_age_max_ms` None means no bound: only a writer's own budget limits a late commit.
    """

    object_prefix: str
    commit_age_max_ms: int | None


def check_object_prefix(setting: str, prefix: str, bounds: CommitBounds) -> None:
    """Objects named under another prefix escape the coordinator's commit-age bound."""
    if prefix != bounds.object_prefix:
        raise ValueError(
            f"{setting} ({prefix!r}) differs from the coordinator's object_prefix "
            f"({bounds.object_prefix!r}): its commit-age bound would not cover these objects"
        )


def check_commit_age_covers(setting: str, budget_ms: int, bounds: CommitBounds) -> None:
    """A healthy writer must commit before its objects become too old to commit."""
    if bounds.commit_age_max_ms is not None and budget_ms >= bounds.commit_age_max_ms:
        raise ValueError(
            f"{setting} ({budget_ms} ms) must stay below the coordinator's commit_age_max_ms "
            f"({bounds.commit_age_max_ms} ms): a healthy broker's commit would be refused"
        )


def check_orphan_grace(orphan_grace_ms: int, clock_skew_max_ms: int, bounds: CommitBounds) -> None:
    """An unknown object is condemned only once no commit of it can land any more."""
    if (
        bounds.commit_age_max_ms is not None
        and orphan_grace_ms <= bounds.commit_age_max_ms + clock_skew_max_ms
    ):
        raise ValueError(
            f"orphan_grace_ms ({orphan_grace_ms}) must exceed the coordinator's "
            f"commit_age_max_ms ({bounds.commit_age_max_ms}) + clock_skew_max_ms "
            f"({clock_skew_max_ms}): a commit may land that late"
        )
