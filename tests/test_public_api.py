"""The public surface is exactly what `diskless/__init__.py` re-exports, and all of it resolves."""

from __future__ import annotations

import importlib

import pytest

import diskless

EXPECTED_TOP_LEVEL = {
    "BatchCoordinator",
    "BrokerClosedError",
    "BrokerConfig",
    "BrokerNode",
    "BrokerStats",
    "Clock",
    "CompressionType",
    "ControlType",
    "CoordinatorError",
    "DisklessBroker",
    "DisklessError",
    "ErrorCode",
    "FetchResult",
    "FetchStats",
    "FileManager",
    "FileManagerConfig",
    "InMemoryBatchCoordinator",
    "IsolationLevel",
    "ListOffsetsResult",
    "LocalObjectStore",
    "ManualClock",
    "MemoryObjectStore",
    "ObjectStore",
    "OffsetSpec",
    "PostgresBatchCoordinator",
    "ProduceResult",
    "ProduceStats",
    "RetentionScheduler",
    "RetentionSchedulerConfig",
    "S3ObjectStore",
    "SqliteBatchCoordinator",
    "StorageError",
    "SystemClock",
    "TimestampType",
    "TopicConfig",
    "TopicPartition",
    "TransactionCoordinator",
    "WalConfig",
    "produce_assignment",
    "produce_broker",
}


def test_all_is_exactly_the_public_surface() -> None:
    assert set(diskless.__all__) == EXPECTED_TOP_LEVEL
    assert len(diskless.__all__) == len(set(diskless.__all__)), "duplicates in __all__"
    for name in diskless.__all__:  # those imported on first use, too
        getattr(diskless, name)
    public_attributes = {
        name
        for name in vars(diskless)
        if not name.startswith("_")
        and not isinstance(getattr(diskless, name), type(diskless))  # subpackages
    }
    assert public_attributes == EXPECTED_TOP_LEVEL


@pytest.mark.parametrize(
    "module_name",
    [
        "diskless",
        "diskless.broker",
        "diskless.compaction",
        "diskless.coordinator",
        "diskless.lifecycle",
        "diskless.mirror",
        "diskless.read",
        "diskless.records",
        "diskless.storage",
        "diskless.txn",
        "diskless.wal",
    ],
)
def test_every_exported_name_resolves(module_name: str) -> None:
    module = importlib.import_module(module_name)
    for name in module.__all__:
        assert getattr(module, name) is not None, f"{module_name}.{name}"


def test_package_is_typed() -> None:
    from importlib import resources

    assert resources.files("diskless").joinpath("py.typed").is_file()


def test_records_exports_the_transaction_version_bridge_rewrite() -> None:
    import diskless.records

    assert "rewrite_producer_state" in diskless.records.__all__
    assert diskless.records.rewrite_producer_state.__module__ == "diskless.records._rewrite"


def test_consolidation_is_exported_where_its_layers_are() -> None:
    import diskless.lifecycle
    import diskless.read
    import diskless.wal

    assert {"Consolidator", "ConsolidatorConfig", "ConsolidatorStats", "ConsolidationRun"} <= set(
        diskless.lifecycle.__all__
    )
    assert {"ObjectCache", "ExtentReader", "read_as_served"} <= set(diskless.read.__all__)
    assert {"encode_extent", "decode_extent_footer", "ExtentFooter"} <= set(diskless.wal.__all__)
