"""The batch coordinator: its contract and its backends."""

from diskless._types import GroupOwnership
from diskless.coordinator._api import BatchCoordinator, ChangeListener
from diskless.coordinator._faulty import (
    CallFaults,
    FaultyBatchCoordinator,
    FaultyCoordinatorStore,
    StepFault,
    StoreCall,
)
from diskless.coordinator._memory import InMemoryBatchCoordinator
from diskless.coordinator._postgres import PostgresBatchCoordinator
from diskless.coordinator._rules.checks import check_topic_name
from diskless.coordinator._rules.reads import FetchBudget, at_visible_end
from diskless.coordinator._sqlite import SqliteBatchCoordinator
from diskless.coordinator._values import (
    BatchInfo,
    BrokerRegistration,
    CommitBatch,
    CommitBatchResult,
    CommitFileResult,
    CommitRefusal,
    ConsolidationCandidate,
    DeleteRecordsRequest,
    DeleteRecordsResponse,
    ExtentIndex,
    ExtentSwap,
    ExtentSwapResult,
    FileCommit,
    FileInfo,
    FileState,
    FileStats,
    FindBatchesRequest,
    FindBatchesResponse,
    LeaseRequest,
    LeaseResult,
    ListOffsetsRequest,
    ListOffsetsResponse,
    MetadataStats,
    PartitionChanges,
    PartitionOffsets,
    ProducerSnapshot,
    RegisteredTxn,
    RetentionResult,
    TimeLookup,
    TopicConfig,
    TopicDescription,
)

__all__ = [
    # the contract
    "BatchCoordinator",
    "BatchInfo",
    "BrokerRegistration",
    "CommitBatch",
    "CommitBatchResult",
    "CommitFileResult",
    "CommitRefusal",
    "DeleteRecordsRequest",
    "DeleteRecordsResponse",
    "FileCommit",
    "FileInfo",
    "FileState",
    "FileStats",
    "FindBatchesRequest",
    "FindBatchesResponse",
    "GroupOwnership",
    "LeaseRequest",
    "LeaseResult",
    "ListOffsetsRequest",
    "ListOffsetsResponse",
    "TimeLookup",
    "ProducerSnapshot",
    "RegisteredTxn",
    "RetentionResult",
    "TopicConfig",
    "TopicDescription",
    "check_topic_name",
    # the change feed
    "ChangeListener",
    "PartitionChanges",
    "PartitionOffsets",
    "at_visible_end",
    # consolidation
    "ConsolidationCandidate",
    "ExtentIndex",
    "ExtentSwap",
    "ExtentSwapResult",
    "MetadataStats",
    "FetchBudget",
    # backends
    "InMemoryBatchCoordinator",
    "SqliteBatchCoordinator",
    "PostgresBatchCoordinator",
    # fault injection, for failure tests
    "CallFaults",
    "FaultyBatchCoordinator",
    "FaultyCoordinatorStore",
    "StepFault",
    "StoreCall",
]
