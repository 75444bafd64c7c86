"""The broker: `DisklessBroker`, the facade over the write and read paths, with its settings,
produce's checks, its cache of topic descriptions and its transaction leases."""

from diskless.broker._config import (
    TXN_LEASE_TTL_FROM_WAL,
    BrokerConfig,
    check_commit_bounds,
    txn_lease_budget_ms,
)
from diskless.broker._facade import DisklessBroker
from diskless.broker._produce_path import Rewrite

__all__ = [
    # the facade
    "BrokerConfig",
    "DisklessBroker",
    "Rewrite",
    # the budgets a command line checks before it starts a broker
    "TXN_LEASE_TTL_FROM_WAL",
    "check_commit_bounds",
    "txn_lease_budget_ms",
]
