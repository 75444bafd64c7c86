"""The SQLite batch coordinator: durable, and shared safely by several processes on one machine
(the store is `_backends.sqlite`)."""

from __future__ import annotations

import os

from diskless._limits import COMMIT_AGE_MAX_MS_DEFAULT, CommitBounds
from diskless._object_keys import DEFAULT_OBJECT_PREFIX
from diskless.clock import Clock, SystemClock
from diskless.coordinator._backends.sqlite import (
    BUSY_RETRY_S_MAX,
    BUSY_TIMEOUT_MS_DEFAULT,
    SqliteStore,
)
from diskless.coordinator._backends.sqlite_feed import CHANGE_CHECK_MS_DEFAULT
from diskless.coordinator._engine import CoordinatorEngine
from diskless.txn import PRODUCER_ID_EXPIRATION_MS_DEFAULT


class SqliteBatchCoordinator(CoordinatorEngine):
    """A batch coordinator stored in one SQLite file, which several processes may share."""

    def __init__(
        self,
        path: str | os.PathLike[str],
        clock: Clock | None = None,
        producer_id_expiration_ms: int = PRODUCER_ID_EXPIRATION_MS_DEFAULT,
        busy_timeout_ms: int = BUSY_TIMEOUT_MS_DEFAULT,
        busy_retry_s: float = BUSY_RETRY_S_MAX,
        *,
        change_check_ms: int = CHANGE_CHECK_MS_DEFAULT,
        commit_age_max_ms: int | None = COMMIT_AGE_MAX_MS_DEFAULT,
        object_prefix: str = DEFAULT_OBJECT_PREFIX,
    ) -> None:
        """`commit_age_max_ms` bounds how late a commit may land: `commit_file` refuses a key
        (named `{object_prefix}{created_ms}-b…`, as `diskless.wal` names them) created more than
        that long ago by this coordinator's clock (OBJECT_KEY_CONFLICT), so the file manager
        may condemn an unknown object once `orphan_grace_ms > commit_age_max_ms + clock skew`.
        `change_check_ms`: how often this process looks for other processes' commits, for its
        change feed (`watch_changes`).
        The WAL writer's budget from naming an object to its commit (upload attempts, timeouts,
        backoffs, the commit) must fit inside it. None disables the bound."""
        super().__init__(
            SqliteStore(path, busy_timeout_ms, busy_retry_s, change_check_ms),
            clock if clock is not None else SystemClock(),
            producer_id_expiration_ms,
            CommitBounds(object_prefix, commit_age_max_ms),
        )
