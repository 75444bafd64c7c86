"""Producer-state and transaction rules, shared by every coordinator backend, and the
transaction coordinator that drives the partitions' side (`TransactionParticipant`, which both
batch coordinators implement)."""

from diskless.records import SEQUENCE_MAX
from diskless.txn._coordinator import (
    EndTxnResult,
    InitProducerIdResult,
    TransactionCoordinator,
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
from diskless.txn._txn_state import (
    PREPARED_STATES,
    PRODUCER_EPOCH_MAX,
    TRANSACTION_TIMEOUT_MS_MAX,
    PendingOffset,
    TxnRecord,
    TxnState,
    TxnStep,
    add_offsets_to_record,
    add_to_record,
    commit_offsets_to_record,
    complete_record,
    end_record,
    expire_record,
    init_record,
    needs_new_producer_id,
    new_record,
)

__all__ = [
    # the transaction coordinator
    "EndTxnResult",
    "InitProducerIdResult",
    "TransactionCoordinator",
    "TransactionParticipant",
    "TxnState",
    # the transactional-id state machine, applied by the batch coordinator
    "PRODUCER_EPOCH_MAX",
    "TRANSACTION_TIMEOUT_MS_MAX",
    "PREPARED_STATES",
    "PendingOffset",
    "TxnRecord",
    "TxnStep",
    "add_offsets_to_record",
    "add_to_record",
    "commit_offsets_to_record",
    "complete_record",
    "end_record",
    "expire_record",
    "init_record",
    "needs_new_producer_id",
    "new_record",
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
