"""Producer-state and transaction rules, shared by every coordinator backend."""

from diskless.txn._producer_state import (
    PRODUCER_BATCHES_RETAINED_MAX,
    PRODUCER_ID_EXPIRATION_MS_DEFAULT,
    SEQUENCE_MAX,
    Duplicate,
    ProducerEntry,
    Rejected,
    RetainedBatch,
    check_append,
    in_sequence,
    is_expired,
    last_sequence_of,
    record_append,
)

__all__ = [
    "PRODUCER_BATCHES_RETAINED_MAX",
    "PRODUCER_ID_EXPIRATION_MS_DEFAULT",
    "SEQUENCE_MAX",
    "Duplicate",
    "ProducerEntry",
    "Rejected",
    "RetainedBatch",
    "check_append",
    "in_sequence",
    "is_expired",
    "last_sequence_of",
    "record_append",
]
