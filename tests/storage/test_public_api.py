"""Unit: the storage package exports exactly its public names, all of them importable."""

from __future__ import annotations

import subprocess
import sys
import types

import diskless.storage


def test_all_is_exactly_the_public_surface() -> None:
    assert diskless.storage.S3ObjectStore.__name__ == "S3ObjectStore"  # imported on first use
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
    public = {
        name
        for name, value in vars(diskless.storage).items()
        if not name.startswith("_") and not isinstance(value, types.ModuleType)
    }
    assert public == set(diskless.storage.__all__)


def test_the_s3_client_is_imported_only_when_s3_is_used() -> None:
    """aiobotocore and aiohttp take longer to import than the rest of the library: a process on
    local files (the broker's default) does without them."""
    script = (
        "import sys, diskless, diskless.kafka_server.__main__\n"
        "clients = ('aiobotocore', 'aiohttp', 'botocore')\n"
        "print(sorted(m for m in clients if m in sys.modules))\n"
        "diskless.S3ObjectStore\n"
        "print(sorted(m for m in clients if m in sys.modules))\n"
    )
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    assert out.stdout.splitlines() == ["[]", "['aiobotocore', 'aiohttp', 'botocore']"]
