"""Exceptions for infrastructure failures.

Protocol outcomes (a duplicate, an out-of-order sequence, a corrupt batch, a fenced broker
epoch) are *values*: an `ErrorCode` in a per-partition result. Exceptions are reserved for
failures of the machinery underneath, which callers turn into retriable Kafka errors.
Third-party errors (botocore, sqlite3, OSError) are translated at the boundary where they occur
and never leak.

    DisklessError
    ├── StorageError                  object storage failed; retriable
    │   ├── ObjectNotFoundError       the key does not exist
    │   ├── InvalidRangeError         a ranged read outside the object
    │   ├── StorageTimeoutError       an operation exceeded its deadline
    │   └── StorageRefusedError       the store answered but refuses this process's writes
    │       ├── StorageBucketMissingError     no such bucket (or objects directory)
    │       ├── StorageCredentialsError       credentials missing, unknown or denied access
    │       ├── StorageTlsError               the endpoint's certificate failed verification
    │       └── StorageNotWritableError       the objects directory cannot be written
    ├── CoordinatorError              the batch coordinator failed; retriable
    │   ├── CoordinatorUnavailableError   the backing store is busy, locked or broken
    │   │   ├── CoordinatorAuthenticationError  the server refused the credentials
    │   │   ├── CoordinatorPrivilegeError       the role lacks a privilege the schema needs
    │   │   ├── CoordinatorTlsError             the TLS handshake or certificate check failed
    │   │   └── CoordinatorTimeoutError         the server did not answer in time
    │   └── CommitOutcomeUnknownError     a commit may or may not have been applied
    ├── BrokerIdInUseError            another live incarnation holds the broker id
    └── BrokerClosedError             the broker is shut down and takes no more work
"""

from __future__ import annotations


class DisklessError(Exception):
    """Base of every exception this library raises on purpose."""

    retriable: bool = False


class StorageError(DisklessError):
    """Object storage failed; the operation may succeed if retried."""

    retriable = True


class ObjectNotFoundError(StorageError):
    """The requested object key does not exist."""

    retriable = False


class InvalidRangeError(StorageError):
    """A ranged read asked for bytes outside the object."""

    retriable = False


class StorageTimeoutError(StorageError):
    """An object-storage operation did not finish before its deadline."""


class StorageRefusedError(StorageError):
    """The store answered, and refuses what this process asks of it: its configuration (bucket,
    credentials, certificate authority, directory permissions) needs an operator.

    Still retriable, as a running broker sees it: an operator may fix it while the broker keeps
    retrying. A start-up check stops on it instead (`kafka_server`'s start-up failures)."""


class StorageBucketMissingError(StorageRefusedError):
    """The bucket (or the objects directory) does not exist."""


class StorageCredentialsError(StorageRefusedError):
    """No credentials, credentials the store does not know, or access denied to them."""


class StorageTlsError(StorageRefusedError):
    """The endpoint's TLS certificate did not verify against the trusted authorities."""


class StorageNotWritableError(StorageRefusedError):
    """The objects directory cannot be written (permissions, a read-only file system, not a
    directory)."""


class CoordinatorError(DisklessError):
    """The batch coordinator failed; nothing was committed unless stated otherwise."""

    retriable = True


class CoordinatorUnavailableError(CoordinatorError):
    """The coordinator's backing store is busy, locked or failing."""


class CoordinatorAuthenticationError(CoordinatorUnavailableError):
    """The coordinator's server refused this process's credentials (a wrong password, an
    unknown role, no rule admitting it)."""


class CoordinatorPrivilegeError(CoordinatorUnavailableError):
    """The coordinator's role lacks a privilege its schema needs (e.g. `CREATE` on the
    schema when the tables are made, or access to them)."""


class CoordinatorTlsError(CoordinatorUnavailableError):
    """The TLS connection to the coordinator's server failed: its certificate did not verify,
    or it does not speak TLS where the connection requires it."""


class CoordinatorTimeoutError(CoordinatorUnavailableError):
    """The coordinator's server did not answer within the connection's timeout."""


class CommitOutcomeUnknownError(CoordinatorError):
    """A commit's result was lost: it may or may not have been applied."""


class BrokerIdInUseError(DisklessError):
    """Registering a broker id refused: another incarnation's registration of it is live.

    Kafka's controller refuses a duplicate broker registration while the old session lives;
    registering anyway would fence a process that is still serving. Once that registration
    expires (its process died), the same call succeeds.
    """

    def __init__(self, broker_id: int, holder_epoch: int = -1, expires_in_ms: int = 0) -> None:
        super().__init__(
            f"broker id {broker_id} is registered by a live process (epoch {holder_epoch}, "
            f"for {expires_in_ms} ms more unless renewed)"
        )
        self.broker_id = broker_id
        self.holder_epoch = holder_epoch
        self.expires_in_ms = expires_in_ms


class BrokerClosedError(DisklessError):
    """The broker was closed; the request was not accepted."""
