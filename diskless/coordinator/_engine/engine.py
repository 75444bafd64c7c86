"""The coordinator engine: every `BatchCoordinator` operation, written once over a store.

Each write is one step run atomically by the store (`_store.CoordinatorStore.write`): read the
clock, check the preconditions, load what the rules need, decide with the rules (`_rules`), apply
what they decided. The clock is read inside the step, so a step that waited for the store's lock
decides on the time at which it lands. Reads go through the store's read view and never wait
behind writes. A backend is only a store: see `_backends`.

The operations live in the modules named as the rules they apply (`commit`, `reads`,
`retention`, `files`, `ownership`, `txn`...); `CoordinatorEngine` assembles them.
"""

from __future__ import annotations

from diskless.coordinator._engine.acls import AclOperations
from diskless.coordinator._engine.commit import CommitOperations
from diskless.coordinator._engine.configs import ConfigOperations
from diskless.coordinator._engine.consumer_groups import GroupOperations
from diskless.coordinator._engine.extents import ConsolidationOperations
from diskless.coordinator._engine.files import FileOperations
from diskless.coordinator._engine.mirror import MirrorOperations
from diskless.coordinator._engine.ownership import BrokerOperations
from diskless.coordinator._engine.reads import ReadOperations
from diskless.coordinator._engine.retention import RetentionOperations
from diskless.coordinator._engine.scram import ScramOperations
from diskless.coordinator._engine.share import ShareOperations
from diskless.coordinator._engine.topics import TopicOperations
from diskless.coordinator._engine.txn import TransactionOperations
from diskless.coordinator._engine.txn_records import TxnRecordOperations


class CoordinatorEngine(
    TopicOperations,
    BrokerOperations,
    CommitOperations,
    ReadOperations,
    RetentionOperations,
    TxnRecordOperations,
    TransactionOperations,
    ConsolidationOperations,
    FileOperations,
    GroupOperations,
    ShareOperations,
    ScramOperations,
    AclOperations,
    ConfigOperations,
    MirrorOperations,
):
    """A batch coordinator over any `CoordinatorStore`: the rules here, the state there."""
