"""Unit: a backend is a store: it implements the store interface and no coordinator operation.

Every `BatchCoordinator` operation is written once, in the engine; the backends' coordinator
classes only construct a store. A backend therefore implements exactly the methods listed here;
beyond them, a store may run a step the engine names (`Operation`) its own way, with a `StoreStep`
of its own that has the same methods (PostgreSQL's commit).
"""

from __future__ import annotations

import inspect

import pytest

from diskless.coordinator import (
    BatchCoordinator,
    InMemoryBatchCoordinator,
    PostgresBatchCoordinator,
    SqliteBatchCoordinator,
)
from diskless.coordinator._backends.memory import MemoryStore
from diskless.coordinator._backends.postgres import NATIVE_STEPS, PostgresStore
from diskless.coordinator._backends.postgres_reads import PostgresReads
from diskless.coordinator._backends.postgres_step import PostgresStep
from diskless.coordinator._backends.sqlite import SqliteStore
from diskless.coordinator._backends.sqlite_reads import SqliteReads
from diskless.coordinator._backends.sqlite_step import SqliteStep
from diskless.coordinator._engine import CoordinatorEngine
from diskless.coordinator._store import CoordinatorStore, ReadView, StoreStep
from tests.coordinator._helpers import STORE_METHODS


def _public_methods(cls: type) -> set[str]:
    return {
        name
        for name, member in inspect.getmembers(cls)
        if not name.startswith("_") and (inspect.isfunction(member) or isinstance(member, property))
    }


def _own_methods(cls: type) -> set[str]:
    return {name for name, member in vars(cls).items() if inspect.isfunction(member)}


STEP_METHODS = {"load", "apply"}
READ_METHODS = {
    # the fetch lookups (`_rules.reads.ReadSource`)
    "partition",
    "partitions",
    "fetch_heads",
    "aborted_within",
    "batches_from",
    "max_timestamp_batch",
    "first_running_max_at_least",
    "aborted_from",
    # and the other queries
    "topics",
    "producers_of",
    "files",
    "dead_files",
    "file_totals",
    "lease_holders",
    "group_ownership",
    "group_records",
    "group_state",
    "share_states",
    "txns",
    "txns_due",
    "txns_after",
    "txn_registrations",
    "group_offsets",
    "broker_registrations",
    "scram_credentials",
    "acl_version",
    "membership_version",
    "acls",
    "resource_configs",
    "counter",
    # consolidation
    "unconsolidated_heads",
    "unconsolidated_rows",
    "metadata_stats",
}


def test_the_store_interface_is_this_narrow() -> None:
    assert _public_methods(CoordinatorStore) == STORE_METHODS
    assert _public_methods(StoreStep) == STEP_METHODS
    assert _public_methods(ReadView) == READ_METHODS


@pytest.mark.parametrize(
    "coordinator", [InMemoryBatchCoordinator, SqliteBatchCoordinator, PostgresBatchCoordinator]
)
def test_backends_only_construct_a_store(coordinator: type[BatchCoordinator]) -> None:
    assert issubclass(coordinator, CoordinatorEngine)
    assert _own_methods(coordinator) == {"__init__"}
    operations = {name for name in vars(BatchCoordinator) if not name.startswith("_")}
    for name in operations:
        owner = next(k for k in coordinator.__mro__ if name in vars(k))
        assert owner.__module__.startswith("diskless.coordinator._engine"), (name, owner)


def test_the_sqlite_adapter_is_the_store_interface_and_nothing_more() -> None:
    assert _public_methods(SqliteStore) == STORE_METHODS
    assert _public_methods(SqliteStep) == STEP_METHODS
    # Beyond the interface, the read view has two chunked lookups that the step reuses.
    assert _public_methods(SqliteReads) - READ_METHODS == {"batches_after", "batches_holding"}
    assert _public_methods(SqliteReads) >= READ_METHODS


def test_the_memory_store_is_the_store_interface_and_nothing_more() -> None:
    assert _public_methods(MemoryStore) == STORE_METHODS | STEP_METHODS | READ_METHODS


def test_the_postgres_adapter_is_the_store_interface_and_its_named_steps() -> None:
    assert _public_methods(PostgresStore) == STORE_METHODS
    assert _public_methods(PostgresStep) == STEP_METHODS
    assert _public_methods(PostgresReads) == READ_METHODS
    assert NATIVE_STEPS, "PostgreSQL runs a commit its own way"
    for native in NATIVE_STEPS.values():
        assert issubclass(native, PostgresStep)
        assert _public_methods(native) == STEP_METHODS
