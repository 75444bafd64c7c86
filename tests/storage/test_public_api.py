"""Unit: the storage package exports exactly its public names, all of them importable."""

from __future__ import annotations

import diskless.storage


def test_all_is_exactly_the_public_surface() -> None:
    assert sorted(diskless.storage.__all__) == [
        "DELETE_KEYS_MAX",
        "Fault",
        "FaultyObjectStore",
        "ForwardingObjectStore",
        "LIST_PAGE_LIMIT_MAX",
        "ListPage",
        "LocalObjectStore",
        "MemoryObjectStore",
        "ObjectInfo",
        "ObjectStore",
        "RetryingObjectStore",
        "S3ObjectStore",
        "StoreOp",
        "StoreStats",
    ]
    public = {name for name in vars(diskless.storage) if not name.startswith("_")}
    assert public == set(diskless.storage.__all__)
