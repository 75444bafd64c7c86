"""Unit: every infrastructure failure maps, per API family, to a code of that API's Kafka error
list that Kafka clients retry.

The lists below are Kafka's (the codes each response may carry, `org.apache.kafka.common.requests`
and the protocol guide), restricted to the retriable ones; they are written out here on purpose,
independently of `ErrorCode.retriable`, so that the mapping is checked against Kafka and not
against itself.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable

import pytest

import diskless
import diskless.read
import diskless.storage
import diskless.txn
import diskless.wal
from diskless import _kafka_errors, errors
from diskless._kafka_errors import (
    admin_error,
    delete_records_error,
    describe_producers_error,
    fetch_error,
    find_coordinator_error,
    group_error,
    list_offsets_error,
    metadata_error,
    produce_error,
    txn_error,
    txn_markers_error,
)
from diskless._types import ErrorCode
from diskless.read._batches import CorruptBatch

# Kafka's retriable error codes (subclasses of RetriableException), by number.
LEADER_NOT_AVAILABLE = 5
COORDINATOR_LOAD_IN_PROGRESS = 14
NETWORK_EXCEPTION = 13
NOT_ENOUGH_REPLICAS = 19
NOT_ENOUGH_REPLICAS_AFTER_APPEND = 20
NOT_CONTROLLER = 41
KAFKA_RETRIABLE = {
    2,  # CORRUPT_MESSAGE
    3,  # UNKNOWN_TOPIC_OR_PARTITION
    LEADER_NOT_AVAILABLE,
    6,  # NOT_LEADER_OR_FOLLOWER
    7,  # REQUEST_TIMED_OUT
    NETWORK_EXCEPTION,
    COORDINATOR_LOAD_IN_PROGRESS,
    15,  # COORDINATOR_NOT_AVAILABLE
    16,  # NOT_COORDINATOR
    NOT_ENOUGH_REPLICAS,
    NOT_ENOUGH_REPLICAS_AFTER_APPEND,
    51,  # CONCURRENT_TRANSACTIONS
    56,  # KAFKA_STORAGE_ERROR
}

# The retriable codes each API's response may carry in Kafka.
PRODUCE = {3, 6, 7, NOT_ENOUGH_REPLICAS, NOT_ENOUGH_REPLICAS_AFTER_APPEND, 56}
FETCH = {3, 6, LEADER_NOT_AVAILABLE, 56}
LIST_OFFSETS = {3, 6, LEADER_NOT_AVAILABLE, 56}
DELETE_RECORDS = {3, 6, 7, 56}
"""56: Kafka's ReplicaManager answers it for a partition in a failed log directory."""
TXN_COORDINATOR = {COORDINATOR_LOAD_IN_PROGRESS, 15, 16, 51}
"""InitProducerId, AddPartitionsToTxn, AddOffsetsToTxn and EndTxn share these."""
GROUP_COORDINATOR = {COORDINATOR_LOAD_IN_PROGRESS, 15, 16}
"""JoinGroup, SyncGroup, Heartbeat, LeaveGroup, OffsetCommit, OffsetFetch, TxnOffsetCommit."""
FIND_COORDINATOR = {COORDINATOR_LOAD_IN_PROGRESS, 15}
METADATA = {3, LEADER_NOT_AVAILABLE}
"""A topic's entry; its partitions' entries take 5 and REPLICA_NOT_AVAILABLE (9)."""
ADMIN = {7, NOT_CONTROLLER}
"""CreateTopics, DeleteTopics, CreatePartitions, DescribeConfigs."""
DESCRIBE_PRODUCERS = {3, 6}
"""Per partition, served at its leader: admin clients look the leader up again on 6."""

FAMILIES: dict[str, tuple[Callable[[BaseException], ErrorCode], set[int]]] = {
    "produce": (produce_error, PRODUCE),
    "fetch": (fetch_error, FETCH),
    "list_offsets": (list_offsets_error, LIST_OFFSETS),
    "delete_records": (delete_records_error, DELETE_RECORDS),
    "txn": (txn_error, TXN_COORDINATOR),
    "txn_markers": (txn_markers_error, TXN_COORDINATOR),
    "group": (group_error, GROUP_COORDINATOR),
    "find_coordinator": (find_coordinator_error, FIND_COORDINATOR),
    "metadata": (metadata_error, METADATA),
    "admin": (admin_error, ADMIN),
    "describe_producers": (describe_producers_error, DESCRIBE_PRODUCERS),
}


def test_every_family_of_the_table_is_checked_here() -> None:
    families = {
        name
        for name, value in vars(_kafka_errors).items()
        if name.endswith("_error") and callable(value)
    }
    assert families == {to_code.__name__ for to_code, _ in FAMILIES.values()}


def _subclasses(base: type[BaseException]) -> set[type[BaseException]]:
    found = {base}
    for sub in base.__subclasses__():
        found |= _subclasses(sub)
    return found


def failures() -> list[BaseException]:
    """One instance of every failure the library raises, plus the ones it catches from below."""
    assert diskless.read and diskless.storage and diskless.txn and diskless.wal  # all loaded
    library = sorted(_subclasses(errors.DisklessError), key=lambda cls: cls.__qualname__)
    others: list[type[BaseException]] = [
        CorruptBatch,
        TimeoutError,
        OSError,
        asyncio.CancelledError,
        RuntimeError,
    ]
    return [cls("failure") for cls in [*library, *others]]


def test_the_failures_cover_every_library_exception() -> None:
    names = {type(failure).__name__ for failure in failures()}
    assert {
        "StorageError",
        "ObjectNotFoundError",
        "InvalidRangeError",
        "StorageTimeoutError",
        "CoordinatorError",
        "CoordinatorUnavailableError",
        "CommitOutcomeUnknownError",
        "BrokerClosedError",
        "WalFormatError",
    } <= names


@pytest.mark.parametrize("family", sorted(FAMILIES))
@pytest.mark.parametrize("failure", failures(), ids=lambda f: type(f).__name__)
def test_every_failure_is_a_retriable_code_of_its_api(family: str, failure: BaseException) -> None:
    to_code, allowed = FAMILIES[family]
    code = to_code(failure)
    assert code in allowed, f"{family}: {failure!r} -> {code.name}, not in Kafka's list"
    assert code in KAFKA_RETRIABLE, f"{family}: {failure!r} -> {code.name}"
    assert code.retriable, f"ErrorCode.retriable disagrees with Kafka for {code.name}"


@pytest.mark.parametrize(
    "failure", [errors.BrokerClosedError("closed")], ids=lambda f: type(f).__name__
)
def test_a_broker_that_must_not_serve_sends_the_client_elsewhere(failure: Exception) -> None:
    assert produce_error(failure) is ErrorCode.NOT_LEADER_OR_FOLLOWER
    assert fetch_error(failure) is ErrorCode.NOT_LEADER_OR_FOLLOWER
    assert list_offsets_error(failure) is ErrorCode.NOT_LEADER_OR_FOLLOWER
    assert delete_records_error(failure) is ErrorCode.NOT_LEADER_OR_FOLLOWER
    assert txn_error(failure) is ErrorCode.NOT_COORDINATOR
    assert group_error(failure) is ErrorCode.NOT_COORDINATOR


@pytest.mark.parametrize(
    "failure",
    [
        errors.StorageError("put failed"),
        errors.StorageTimeoutError("slow"),
        errors.CoordinatorUnavailableError("database is locked"),
        errors.CommitOutcomeUnknownError("lost"),
        asyncio.CancelledError(),
        RuntimeError("a bug"),
    ],
    ids=lambda f: type(f).__name__,
)
def test_a_failure_underneath_is_retried_in_place(failure: BaseException) -> None:
    assert produce_error(failure) is ErrorCode.KAFKA_STORAGE_ERROR
    assert fetch_error(failure) is ErrorCode.KAFKA_STORAGE_ERROR
    assert list_offsets_error(failure) is ErrorCode.KAFKA_STORAGE_ERROR
    assert delete_records_error(failure) is ErrorCode.KAFKA_STORAGE_ERROR
    assert txn_error(failure) is ErrorCode.COORDINATOR_NOT_AVAILABLE
    assert group_error(failure) is ErrorCode.COORDINATOR_NOT_AVAILABLE
    assert admin_error(failure) is ErrorCode.REQUEST_TIMED_OUT


def test_markers_that_did_not_land_leave_the_transaction_pending() -> None:
    for failure in failures():
        assert txn_markers_error(failure) is ErrorCode.CONCURRENT_TRANSACTIONS
