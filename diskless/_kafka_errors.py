"""Infrastructure failures as Kafka errors: one decision per API family, made here only.

An exception (`diskless.errors`, a timeout, a cancellation, an unexpected bug) says what broke
underneath; the Kafka error code says what a client should do about it, and each Kafka API has
its own list of codes a client understands. Every place that turns a failure into a response
asks the function of its API's family, the library (a failed partition inside a produce or a
fetch) and the Kafka front end (a call that raised) alike, so the same failure answers the same
way whichever layer meets it.

    family                  its APIs                        broker closed      storage, coordinator,
                                                                               timeout, unknown
                                                                               outcome, bug
    produce_error           Produce                         NOT_LEADER_OR_     KAFKA_STORAGE_ERROR
    fetch_error             Fetch                           FOLLOWER
    list_offsets_error      ListOffsets
    delete_records_error    DeleteRecords
    txn_error               InitProducerId, AddPartitions-  NOT_COORDINATOR    COORDINATOR_NOT_
                            ToTxn, AddOffsetsToTxn, EndTxn                     AVAILABLE
    group_error             JoinGroup, SyncGroup,
                            Heartbeat, LeaveGroup,
                            OffsetCommit, OffsetFetch,
                            TxnOffsetCommit,
                            DescribeGroups, ListGroups,
                            DeleteGroups, OffsetDelete
    find_coordinator_error  FindCoordinator                 COORDINATOR_NOT_AVAILABLE
    metadata_error          Metadata (per topic)            LEADER_NOT_AVAILABLE
    admin_error             CreateTopics, DeleteTopics,     REQUEST_TIMED_OUT
                            CreatePartitions,
                            DescribeConfigs,
                            DescribeUserScramCredentials,
                            AlterUserScramCredentials

Every code in the table is retriable for Kafka clients: a closing broker sends them to
another broker (NOT_LEADER_OR_FOLLOWER, NOT_COORDINATOR refresh metadata or the coordinator), a
failure of the machinery is retried in place. Where an API's list has no code that tells the two
kinds apart (FindCoordinator, Metadata, the admin APIs), both get its one retriable code. The
transaction markers of an ending transaction are the one exception to the per-failure table:
whatever stopped them, the transaction stays prepared and EndTxn / InitProducerId answer
CONCURRENT_TRANSACTIONS, Kafka's answer while markers are pending.
"""

from __future__ import annotations

from typing import Final

from diskless._types import ErrorCode
from diskless.errors import BrokerClosedError

_GONE: Final = (BrokerClosedError,)
"""This broker can no longer serve the request: go elsewhere. (A fenced broker epoch is an
answer of the coordinator, `ErrorCode.STALE_BROKER_EPOCH`, which the produce path turns into
NOT_LEADER_OR_FOLLOWER as this table does.)"""


def _partition_data(error: BaseException) -> ErrorCode:
    """The APIs a partition's leader serves in Kafka: a log directory that failed."""
    if isinstance(error, _GONE):
        return ErrorCode.NOT_LEADER_OR_FOLLOWER
    return ErrorCode.KAFKA_STORAGE_ERROR


def _coordinator(error: BaseException) -> ErrorCode:
    """The APIs a group or transaction coordinator serves in Kafka: a client finds the
    coordinator again on NOT_COORDINATOR and retries on COORDINATOR_NOT_AVAILABLE."""
    if isinstance(error, _GONE):
        return ErrorCode.NOT_COORDINATOR
    return ErrorCode.COORDINATOR_NOT_AVAILABLE


def produce_error(error: BaseException) -> ErrorCode:
    """Produce: a batch that was not (or may not have been) committed because of `error`.

    KAFKA_STORAGE_ERROR covers an unknown commit outcome too: the idempotent producer's retry is
    then deduplicated by the coordinator, so retrying never writes twice.
    """
    return _partition_data(error)


def fetch_error(error: BaseException) -> ErrorCode:
    """Fetch: a partition whose batches could not be located or read back."""
    return _partition_data(error)


def list_offsets_error(error: BaseException) -> ErrorCode:
    """ListOffsets: a partition whose offsets the coordinator could not answer."""
    return _partition_data(error)


def delete_records_error(error: BaseException) -> ErrorCode:
    """DeleteRecords: a partition whose log start offset could not be advanced. Kafka serves
    it at the partition's leader, as Produce; admin clients retry both codes."""
    return _partition_data(error)


def txn_error(error: BaseException) -> ErrorCode:
    """The transaction coordinator's APIs (InitProducerId, AddPartitionsToTxn, AddOffsetsToTxn,
    EndTxn): KAFKA_STORAGE_ERROR is in none of their lists."""
    return _coordinator(error)


def group_error(error: BaseException) -> ErrorCode:
    """The group coordinator's APIs (JoinGroup, SyncGroup, Heartbeat, LeaveGroup, OffsetCommit,
    OffsetFetch, and TxnOffsetCommit, which the group's coordinator serves; the group admin
    APIs DescribeGroups, ListGroups, DeleteGroups and OffsetDelete)."""
    return _coordinator(error)


def find_coordinator_error(error: BaseException) -> ErrorCode:
    """FindCoordinator: no coordinator can be named now; its list has no NOT_COORDINATOR."""
    del error  # the one retriable code of its list
    return ErrorCode.COORDINATOR_NOT_AVAILABLE


def metadata_error(error: BaseException) -> ErrorCode:
    """Metadata, for a topic that could not be described: clients refresh metadata and try
    again, and keep the topic (after UNKNOWN_TOPIC_OR_PARTITION for long enough, librdkafka fails
    the messages queued for it)."""
    del error  # the one retriable code of a topic's list
    return ErrorCode.LEADER_NOT_AVAILABLE


def txn_markers_error(error: BaseException) -> ErrorCode:
    """Ending a transaction whose markers could not all be placed because of `error`: it stays
    prepared (a retry or the timeout sweep finishes the same decision) and the caller retries."""
    del error  # every failure leaves the same state: markers pending
    return ErrorCode.CONCURRENT_TRANSACTIONS


def admin_error(error: BaseException) -> ErrorCode:
    """Topic administration (CreateTopics, DeleteTopics, CreatePartitions, DescribeConfigs): the
    controller-side failure Kafka's admin APIs share, which admin clients retry (a retried
    create that did happen answers TOPIC_ALREADY_EXISTS, as with Kafka)."""
    del error  # the admin APIs have no code that tells these failures apart
    return ErrorCode.REQUEST_TIMED_OUT


def describe_producers_error(error: BaseException) -> ErrorCode:
    """DescribeProducers, for a partition whose producer state could not be read: Kafka serves
    it at the partition's leader, and admin clients look the leader up again and retry on
    NOT_LEADER_OR_FOLLOWER (a KAFKA_STORAGE_ERROR would fail the call)."""
    del error  # the one code of its list that admin clients retry elsewhere
    return ErrorCode.NOT_LEADER_OR_FOLLOWER
