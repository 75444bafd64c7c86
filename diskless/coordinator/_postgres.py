"""The PostgreSQL batch coordinator: shared by broker processes on many machines (the store is
`_backends.postgres`)."""

from __future__ import annotations

from diskless._limits import COMMIT_AGE_MAX_MS_DEFAULT, CommitBounds
from diskless._object_keys import DEFAULT_OBJECT_PREFIX
from diskless.clock import Clock, SystemClock
from diskless.coordinator._backends.postgres import (
    COMMAND_TIMEOUT_MS_DEFAULT,
    CONNECT_TIMEOUT_MS_DEFAULT,
    POOL_SIZE_MAX_DEFAULT,
    RESOLVE_TIMEOUT_MS_DEFAULT,
    PostgresStore,
)
from diskless.coordinator._engine import CoordinatorEngine
from diskless.txn import PRODUCER_ID_EXPIRATION_MS_DEFAULT


class PostgresBatchCoordinator(CoordinatorEngine):
    """A batch coordinator stored in one PostgreSQL database, which brokers on many machines
    may share (the schema is created or migrated on first use)."""

    def __init__(
        self,
        dsn: str,
        clock: Clock | None = None,
        producer_id_expiration_ms: int = PRODUCER_ID_EXPIRATION_MS_DEFAULT,
        *,
        pool_size_max: int = POOL_SIZE_MAX_DEFAULT,
        connect_timeout_ms: int = CONNECT_TIMEOUT_MS_DEFAULT,
        command_timeout_ms: int = COMMAND_TIMEOUT_MS_DEFAULT,
        resolve_timeout_ms: int = RESOLVE_TIMEOUT_MS_DEFAULT,
        commit_age_max_ms: int | None = COMMIT_AGE_MAX_MS_DEFAULT,
        object_prefix: str = DEFAULT_OBJECT_PREFIX,
    ) -> None:
        """`dsn`: a libpq URI (`postgresql://user@host:port/database`), with libpq's TLS
        parameters where the server is reached over TLS (`?sslmode=verify-full&sslrootcert=
        CA.pem`, and `sslcert`/`sslkey` for a client certificate). `pool_size_max` bounds
        this process's connections. Opening a connection or waiting for a free one is bounded by
        `connect_timeout_ms`, each statement (row-lock waits included) by `command_timeout_ms`;
        past them an operation fails with the retriable CoordinatorUnavailableError. A commit
        whose answer was lost is resolved by asking the server for up to `resolve_timeout_ms`
        (then CommitOutcomeUnknownError). `commit_age_max_ms`, `object_prefix`: see
        `SqliteBatchCoordinator`."""
        super().__init__(
            PostgresStore(
                dsn, pool_size_max, connect_timeout_ms, command_timeout_ms, resolve_timeout_ms
            ),
            clock if clock is not None else SystemClock(),
            producer_id_expiration_ms,
            CommitBounds(object_prefix, commit_age_max_ms),
        )
