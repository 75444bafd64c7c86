"""Infrastructure failures as Kafka errors: one decision per API family, made here only.

An exception (`diskless.errors`, a timeout, a cancellation, an unexpected bug) says what broke
underneath; the Kafka error code says what a client should do about it, and each Kafka API has
its own list of codes a client understands. Every place that turns a failure into a response
asks the function of its API's family, so the same failure answers the same way everywhere.

    failure                           produce          fetch / list     txn coordinator    admin
                                                       offsets          APIs
    broker closed                     NOT_LEADER_OR_   NOT_LEADER_OR_   NOT_COORDINATOR    REQUEST_
                                      FOLLOWER         FOLLOWER                            TIMED_OUT
    storage, coordinator, timeout,    KAFKA_STORAGE_   KAFKA_STORAGE_   COORDINATOR_NOT_   REQUEST_
    unknown commit outcome, bug       ERROR            ERROR            AVAILABLE          TIMED_OUT

Every code in the table is retriable for Kafka clients: a closing broker sends them to
another broker (NOT_LEADER_OR_FOLLOWER, NOT_COORDINATOR refresh metadata or the coordinator), a
failure of the machinery is retried in place. The transaction markers of an ending transaction
are the one exception to the per-failure table: whatever stopped them, the transaction stays
prepared and EndTxn / InitProducerId answer CONCURRENT_TRANSACTIONS, Kafka's answer while markers
are pending.
"""

from __future__ import annotations

from typing import Final

from diskless._types import ErrorCode
from diskless.errors import BrokerClosedError

_GONE: Final = (BrokerClosedError,)
"""This broker can no longer serve the request: go elsewhere. (A fenced broker epoch is an
answer of the coordinator, `ErrorCode.STALE_BROKER_EPOCH`, which the produce path turns into
NOT_LEADER_OR_FOLLOWER as this table does.)"""


def produce_error(error: BaseException) -> ErrorCode:
    """Produce: a batch that was not (or may not have been) committed because of `error`.

    KAFKA_STORAGE_ERROR covers an unknown commit outcome too: the idempotent producer's retry is
    then deduplicated by the coordinator, so retrying never writes twice.
    """
    if isinstance(error, _GONE):
        return ErrorCode.NOT_LEADER_OR_FOLLOWER
    return ErrorCode.KAFKA_STORAGE_ERROR


def fetch_error(error: BaseException) -> ErrorCode:
    """Fetch: a partition whose batches could not be located or read back."""
    if isinstance(error, _GONE):
        return ErrorCode.NOT_LEADER_OR_FOLLOWER
    return ErrorCode.KAFKA_STORAGE_ERROR


def list_offsets_error(error: BaseException) -> ErrorCode:
    """ListOffsets: a partition whose offsets the coordinator could not answer."""
    if isinstance(error, _GONE):
        return ErrorCode.NOT_LEADER_OR_FOLLOWER
    return ErrorCode.KAFKA_STORAGE_ERROR


def txn_error(error: BaseException) -> ErrorCode:
    """The transaction coordinator's APIs (InitProducerId, AddPartitionsToTxn, AddOffsetsToTxn,
    EndTxn): KAFKA_STORAGE_ERROR is in none of their lists; a client finds the coordinator
    again on NOT_COORDINATOR and retries on COORDINATOR_NOT_AVAILABLE."""
    if isinstance(error, _GONE):
        return ErrorCode.NOT_COORDINATOR
    return ErrorCode.COORDINATOR_NOT_AVAILABLE


def txn_markers_error(error: BaseException) -> ErrorCode:
    """Ending a transaction whose markers could not all be placed because of `error`: it stays
    prepared (a retry or the timeout sweep finishes the same decision) and the caller retries."""
    del error  # every failure leaves the same state: markers pending
    return ErrorCode.CONCURRENT_TRANSACTIONS


def admin_error(error: BaseException) -> ErrorCode:
    """Topic and record administration (CreateTopics, CreatePartitions, DeleteTopics,
    DeleteRecords): the controller-side failure Kafka's admin APIs share, which admin clients
    retry."""
    del error  # the admin APIs have no code that tells these failures apart
    return ErrorCode.REQUEST_TIMED_OUT
