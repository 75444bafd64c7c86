"""Producer-state and transaction rules, shared by every coordinator backend, and the
transaction coordinator that drives the partitions' side (`TransactionParticipant`, which both
batch coordinators implement)."""

from diskless.records import SEQUENCE_MAX
from diskless.txn._coordinator import (
    EndTxnResult,
    InitProducerIdResult,
    TransactionCoordinator,
    TxnState,
)
from diskless.txn._participant import TransactionParticipant
from diskless.txn._producer_state import (
    PRODUCER_BATCHES_RETAINED_MAX,
    PRODUCER_ID_EXPIRATION_MS_DEFAULT,
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
    # the transaction coordinator
    "EndTxnResult",
    "InitProducerIdResult",
    "TransactionCoordinator",
    "TransactionParticipant",
    "TxnState",
    # producer rules
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
