"""A broker's settings, and the time budget its transaction leases must cover."""

from __future__ import annotations

from typing import Final

import msgspec

from diskless._limits import (
    LEASE_TTL_MS_MAX,
    CommitBounds,
    backoff_ms,
    check_commit_age_covers,
    check_object_prefix,
)
from diskless.read import (
    COALESCE_GAP_BYTES_MAX_DEFAULT,
    GETS_INFLIGHT_MAX_DEFAULT,
    OBJECT_CACHE_BLOCK_BYTES_DEFAULT,
    OBJECT_CACHE_BYTES_MAX_DEFAULT,
    VIEW_RECONCILE_MS_DEFAULT,
)
from diskless.wal import WalConfig

TXN_LEASE_TTL_FROM_WAL: Final = 0
"""`BrokerConfig.txn_lease_ttl_ms` left at this is derived from the WAL's budget."""
TXN_LEASE_MARGIN_MS: Final = 10_000
"""Beyond the upload budget: waiting for earlier segments' commits, and the commit call itself."""


def txn_lease_budget_ms(wal: WalConfig, margin_ms: int = TXN_LEASE_MARGIN_MS) -> int:
    """How long a transactional batch may take from entering a WAL segment to its commit.

    The segment fills for up to `commit_interval_ms`, then its upload takes up to
    `upload_attempts` attempts of `upload_timeout_ms` each with the doubling backoffs between
    them, then the commit waits for earlier segments and runs (`margin_ms`). A transaction lease
    must last at least this long, or a healthy broker's batch would find its lease expired.
    """
    backoffs = sum(
        backoff_ms(wal.upload_backoff_ms, retry) for retry in range(wal.upload_attempts - 1)
    )
    return (
        wal.commit_interval_ms + wal.upload_attempts * wal.upload_timeout_ms + backoffs + margin_ms
    )


class BrokerConfig(msgspec.Struct, frozen=True):
    """Settings of one broker. Byte and time limits carry their unit in the name."""

    wal: WalConfig = msgspec.field(default_factory=WalConfig)
    request_timeout_ms: int = 30_000
    """The produce timeout when a call gives none, and the least time a request's coordinator
    calls before the WAL (topic metadata, transaction leases) may take once its caller stopped
    waiting (Kafka's broker-side request.timeout.ms bounds its inter-broker calls likewise)."""
    fetch_max_bytes: int = 52_428_800
    """Kafka's fetch.max.bytes default: the whole response when a call gives none."""
    fetch_partition_max_bytes: int = 1_048_576
    """Kafka's max.partition.fetch.bytes default."""
    fetch_view_reconcile_ms: int = VIEW_RECONCILE_MS_DEFAULT
    """How often the broker's view of partition offsets is re-read whole, whatever the change
    feed said: how long a lost change notice can delay a waiting fetch at most."""
    fetch_gets_inflight_max: int = GETS_INFLIGHT_MAX_DEFAULT
    """Ranged GETs one fetch keeps in flight at most."""
    fetch_coalesce_gap_bytes_max: int = COALESCE_GAP_BYTES_MAX_DEFAULT
    """Read through gaps up to this size between needed ranges of one object (one GET instead of
    two). 0 merges only ranges that touch."""
    fetch_cache_bytes_max: int = OBJECT_CACHE_BYTES_MAX_DEFAULT
    """The object cache shared by all fetches (aligned blocks of objects, LRU); 0 disables it,
    and each fetch then reads its coalesced ranges itself."""
    fetch_cache_block_bytes: int = OBJECT_CACHE_BLOCK_BYTES_DEFAULT
    """One GET reads one aligned block of this size (up to the object's end when known)."""
    topic_metadata_ttl_ms: int = 30_000
    """How long topic configs and partition counts are trusted before asking the coordinator."""
    txn_lease_ttl_ms: int = TXN_LEASE_TTL_FROM_WAL
    """The transaction lease taken for each transactional batch before it enters the WAL (the
    commit barrier: a transaction end waits for it). Left at TXN_LEASE_TTL_FROM_WAL (0), it is set
    to `txn_lease_budget_ms(wal)` on construction. It must be at least the WAL's budget without
    the margin, and stays well below the coordinator's commit-age bound. An end may wait this long
    for the batches of a broker that died."""

    def __post_init__(self) -> None:
        chosen = self.txn_lease_ttl_ms != TXN_LEASE_TTL_FROM_WAL
        if not chosen:
            msgspec.structs.force_setattr(self, "txn_lease_ttl_ms", txn_lease_budget_ms(self.wal))
        if self.request_timeout_ms < 0:
            raise ValueError(f"request_timeout_ms must be >= 0, got {self.request_timeout_ms}")
        if self.fetch_max_bytes < 0 or self.fetch_partition_max_bytes < 0:
            raise ValueError("fetch byte limits must be >= 0")
        if self.fetch_view_reconcile_ms < 1:
            raise ValueError("fetch_view_reconcile_ms must be >= 1")
        if self.fetch_gets_inflight_max < 1:
            raise ValueError("fetch_gets_inflight_max must be >= 1")
        if self.fetch_coalesce_gap_bytes_max < 0:
            raise ValueError("fetch_coalesce_gap_bytes_max must be >= 0")
        if self.fetch_cache_block_bytes < 1:
            raise ValueError("fetch_cache_block_bytes must be >= 1")
        if 0 < self.fetch_cache_bytes_max < self.fetch_cache_block_bytes:
            raise ValueError("fetch_cache_bytes_max must be 0 or hold one fetch_cache_block_bytes")
        if self.topic_metadata_ttl_ms < 0:
            raise ValueError("topic_metadata_ttl_ms must be >= 0")
        if self.txn_lease_ttl_ms > LEASE_TTL_MS_MAX:
            raise ValueError(
                f"the transaction lease ({self.txn_lease_ttl_ms} ms) exceeds {LEASE_TTL_MS_MAX} ms:"
                " an end would wait that long for the batches of a dead broker"
            )
        if chosen:
            floor = txn_lease_budget_ms(self.wal, margin_ms=0)
            if self.txn_lease_ttl_ms < floor:
                raise ValueError(
                    f"txn_lease_ttl_ms ({self.txn_lease_ttl_ms}) must cover the WAL's upload "
                    f"budget ({floor} ms): a healthy broker's batch would outlive its lease"
                )


def check_commit_bounds(config: BrokerConfig, bounds: CommitBounds) -> None:
    """A broker with `config` fits a coordinator with `bounds`: its WAL names objects under the
    coordinator's prefix, and commits them before they are too old to commit. A broker checks
    this when it is created; a command line checks its values with it before starting one."""
    check_object_prefix("WalConfig.object_prefix", config.wal.object_prefix, bounds)
    check_commit_age_covers("the WAL's commit budget", txn_lease_budget_ms(config.wal), bounds)
