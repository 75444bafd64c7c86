"""The in-memory batch coordinator: for tests and single-process brokers."""

from __future__ import annotations

from diskless._limits import COMMIT_AGE_MAX_MS_DEFAULT, CommitBounds
from diskless._object_keys import DEFAULT_OBJECT_PREFIX
from diskless.clock import Clock, SystemClock
from diskless.coordinator._backends.memory import MemoryStore
from diskless.coordinator._engine import CoordinatorEngine
from diskless.txn import PRODUCER_ID_EXPIRATION_MS_DEFAULT


class InMemoryBatchCoordinator(CoordinatorEngine):
    """A batch coordinator whose state lives in this process's memory."""

    def __init__(
        self,
        clock: Clock | None = None,
        producer_id_expiration_ms: int = PRODUCER_ID_EXPIRATION_MS_DEFAULT,
        *,
        commit_age_max_ms: int | None = COMMIT_AGE_MAX_MS_DEFAULT,
        object_prefix: str = DEFAULT_OBJECT_PREFIX,
    ) -> None:
        """`commit_age_max_ms`: see `SqliteBatchCoordinator` (None: no bound)."""
        super().__init__(
            MemoryStore(),
            clock if clock is not None else SystemClock(),
            producer_id_expiration_ms,
            CommitBounds(object_prefix, commit_age_max_ms),
        )
