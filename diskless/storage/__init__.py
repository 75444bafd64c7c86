"""Object stores: the interface, its backends, and wrappers for retries and fault injection.

`S3ObjectStore` is imported on first use: its client (aiobotocore, aiohttp) takes longer to
import than the rest of the library, and a process on local files never needs it.
"""

import typing

from diskless.storage._base import (
    DELETE_KEYS_MAX,
    LIST_PAGE_LIMIT_MAX,
    ListPage,
    ObjectInfo,
    ObjectStore,
)
from diskless.storage._faulty import Fault, FaultyObjectStore, StoreOp
from diskless.storage._forwarding import ForwardingObjectStore
from diskless.storage._local import LocalObjectStore
from diskless.storage._memory import MemoryObjectStore
from diskless.storage._retry import RetryingObjectStore
from diskless.storage._stats import StoreStats

if typing.TYPE_CHECKING:
    from diskless.storage._s3 import S3ObjectStore

__all__ = [
    # the interface
    "DELETE_KEYS_MAX",
    "LIST_PAGE_LIMIT_MAX",
    "ListPage",
    "ObjectInfo",
    "ObjectStore",
    "StoreStats",
    # backends
    "LocalObjectStore",
    "MemoryObjectStore",
    "S3ObjectStore",
    # wrappers
    "Fault",
    "FaultyObjectStore",
    "ForwardingObjectStore",
    "RetryingObjectStore",
    "StoreOp",
]


def __getattr__(name: str) -> object:
    if name == "S3ObjectStore":
        from diskless.storage._s3 import S3ObjectStore

        globals()[name] = S3ObjectStore  # asked once
        return S3ObjectStore
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
