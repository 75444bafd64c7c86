"""Library outcomes and failures as the Kafka error codes clients see, decided in one place.

A protocol outcome arrives as an `ErrorCode` value and keeps its code (`wire`). A library
exception (`DisklessError`: storage, coordinator, a closed broker) is an infrastructure fault: the
client must see a retriable error and try again, never a silent loss or a hung request. Which
retriable error depends on the API (`failure`):
- the data APIs (Produce, Fetch, ListOffsets) answer KAFKA_STORAGE_ERROR for every partition the
  failed call concerned, as Kafka does when a log directory fails;
- the transaction APIs answer COORDINATOR_NOT_AVAILABLE, which makes clients look the
  coordinator up again and retry. The transaction coordinator also reports a failure of its
  participant as the value KAFKA_STORAGE_ERROR; `coordinator_error` turns that value into the
  same code;
- Metadata answers the topics it could not describe as LEADER_NOT_AVAILABLE: clients refresh
  metadata and try again, and keep the topic (after UNKNOWN_TOPIC_OR_PARTITION for long enough,
  librdkafka fails the messages queued for it).
- the group APIs (offsets, generations and each group's owner live in the batch coordinator)
  and FindCoordinator answer COORDINATOR_NOT_AVAILABLE, as the transaction APIs do.
- the admin APIs that change or describe topics answer REQUEST_TIMED_OUT (retriable; a retried
  create that did happen answers TOPIC_ALREADY_EXISTS, as with Kafka); DeleteRecords answers
  KAFKA_STORAGE_ERROR, as the other data APIs.
"""

from __future__ import annotations

import logging
from typing import Final

from kio.schema.errors import ErrorCode as WireError

from diskless._availability import log_failure
from diskless._types import ErrorCode
from diskless.kafka_server._protocol.apis import ApiKey
from diskless.kafka_server._protocol.fields import wire

_log = logging.getLogger(__name__)

_ON_FAILURE: Final[dict[ApiKey, WireError]] = {
    ApiKey.PRODUCE: WireError.kafka_storage_error,
    ApiKey.FETCH: WireError.kafka_storage_error,
    ApiKey.LIST_OFFSETS: WireError.kafka_storage_error,
    ApiKey.METADATA: WireError.leader_not_available,
    ApiKey.INIT_PRODUCER_ID: WireError.coordinator_not_available,
    ApiKey.ADD_PARTITIONS_TO_TXN: WireError.coordinator_not_available,
    ApiKey.END_TXN: WireError.coordinator_not_available,
    ApiKey.ADD_OFFSETS_TO_TXN: WireError.coordinator_not_available,
    ApiKey.TXN_OFFSET_COMMIT: WireError.coordinator_not_available,
    ApiKey.OFFSET_COMMIT: WireError.coordinator_not_available,
    ApiKey.OFFSET_FETCH: WireError.coordinator_not_available,
    ApiKey.FIND_COORDINATOR: WireError.coordinator_not_available,
    ApiKey.JOIN_GROUP: WireError.coordinator_not_available,
    ApiKey.SYNC_GROUP: WireError.coordinator_not_available,
    ApiKey.HEARTBEAT: WireError.coordinator_not_available,
    ApiKey.LEAVE_GROUP: WireError.coordinator_not_available,
    ApiKey.CREATE_TOPICS: WireError.request_timed_out,
    ApiKey.DELETE_TOPICS: WireError.request_timed_out,
    ApiKey.CREATE_PARTITIONS: WireError.request_timed_out,
    ApiKey.DESCRIBE_CONFIGS: WireError.request_timed_out,
    ApiKey.DELETE_RECORDS: WireError.kafka_storage_error,
}
"""The APIs whose handlers call into the library, and the code a failure of that call becomes."""


def failure(api: ApiKey, error: Exception, what: str) -> WireError:
    """The code for the entries of `api`'s response that a library failure left unanswered.

    `what` says which call failed, for the log: the exception is logged here, once (at DEBUG
    when the coordinator or the store did not answer: their availability logs the outage).
    """
    log_failure(_log, error, "%s: %s failed", api.name, what)
    return _ON_FAILURE[api]


def coordinator_error(code: ErrorCode | None) -> WireError:
    """A transaction coordinator's answer; None when the call failed and gave none."""
    if code is None or code is ErrorCode.KAFKA_STORAGE_ERROR:
        return WireError.coordinator_not_available
    return wire(code)
