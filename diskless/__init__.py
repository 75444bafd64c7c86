"""diskless: Kafka's leaderless produce path for diskless topics, as an asyncio library.

Any broker accepts produce requests for any partition: batches from all partitions share one WAL
segment, uploaded as one object, whose batch coordinates a batch coordinator then sequences.
Start with `DisklessBroker`; the subpackages hold the pluggable parts:
`diskless.storage` (object stores), `diskless.coordinator` (batch coordinators),
`diskless.txn` (producer rules and the transaction coordinator), `diskless.wal` (the write
pipeline), `diskless.lifecycle` (garbage collection and retention), `diskless.records` (the Kafka
record batch codec), `diskless.routing` (produce representatives), `diskless.errors`.
"""

import typing

from diskless._results import (
    BrokerStats,
    FetchResult,
    FetchStats,
    ListOffsetsResult,
    ProduceResult,
    ProduceStats,
)
from diskless._types import (
    CompressionType,
    ControlType,
    ErrorCode,
    IsolationLevel,
    OffsetSpec,
    TimestampType,
    TopicPartition,
)
from diskless.broker import BrokerConfig, DisklessBroker
from diskless.clock import Clock, ManualClock, SystemClock
from diskless.coordinator import (
    BatchCoordinator,
    InMemoryBatchCoordinator,
    PostgresBatchCoordinator,
    SqliteBatchCoordinator,
    TopicConfig,
)
from diskless.errors import (
    BrokerClosedError,
    CoordinatorError,
    DisklessError,
    StorageError,
)
from diskless.lifecycle import (
    FileManager,
    FileManagerConfig,
    RetentionScheduler,
    RetentionSchedulerConfig,
)
from diskless.routing import BrokerNode, produce_assignment, produce_broker
from diskless.storage import LocalObjectStore, MemoryObjectStore, ObjectStore
from diskless.txn import TransactionCoordinator
from diskless.wal import WalConfig

if typing.TYPE_CHECKING:
    from diskless.storage import S3ObjectStore

__all__ = [
    # the broker facade
    "BrokerConfig",
    "DisklessBroker",
    "WalConfig",
    # results
    "BrokerStats",
    "FetchResult",
    "FetchStats",
    "ListOffsetsResult",
    "ProduceResult",
    "ProduceStats",
    # Kafka vocabulary
    "CompressionType",
    "ControlType",
    "ErrorCode",
    "IsolationLevel",
    "OffsetSpec",
    "TimestampType",
    "TopicPartition",
    # pluggable parts
    "BatchCoordinator",
    "InMemoryBatchCoordinator",
    "LocalObjectStore",
    "MemoryObjectStore",
    "ObjectStore",
    "PostgresBatchCoordinator",
    "S3ObjectStore",
    "SqliteBatchCoordinator",
    "TopicConfig",
    # transactions
    "TransactionCoordinator",
    # routing
    "BrokerNode",
    "produce_assignment",
    "produce_broker",
    # object lifecycle
    "FileManager",
    "FileManagerConfig",
    "RetentionScheduler",
    "RetentionSchedulerConfig",
    # time
    "Clock",
    "ManualClock",
    "SystemClock",
    # infrastructure errors
    "BrokerClosedError",
    "CoordinatorError",
    "DisklessError",
    "StorageError",
]


def __getattr__(name: str) -> object:
    """`S3ObjectStore` on first use (see `diskless.storage`)."""
    if name == "S3ObjectStore":
        from diskless.storage import S3ObjectStore

        globals()[name] = S3ObjectStore  # asked once
        return S3ObjectStore
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
