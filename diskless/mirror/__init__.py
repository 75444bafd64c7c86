"""Cluster mirroring into diskless topics (KIP-1279): a source cluster's partitions copied at
their offsets, byte for byte, with group offsets synced (clamped into the destination's range)
and a failover that makes the topics writable.

`Mirror` runs one mirror over a `SourceCluster` (any Kafka-protocol cluster) and the
destination's coordinator and object store; `python -m diskless.mirror` runs it from a shell,
with the destination's storage flags as `python -m diskless.kafka_server` takes them.
"""

from diskless.mirror._batches import SourceBatchError, mirrored_batches
from diskless.mirror._groups import GroupFilter, GroupSync, sync_groups, synced_offset
from diskless.mirror._mirror import (
    FETCH_BYTES_MAX,
    FETCHERS_MAX,
    Mirror,
    MirrorConfig,
    MirrorError,
    PartitionLag,
)
from diskless.mirror._source import FetchedPartition, SourceCluster, SourceError, SourceMetadata

__all__ = [
    # the mirror
    "FETCHERS_MAX",
    "FETCH_BYTES_MAX",
    "Mirror",
    "MirrorConfig",
    "MirrorError",
    "PartitionLag",
    # the source
    "FetchedPartition",
    "SourceCluster",
    "SourceError",
    "SourceMetadata",
    # the parts
    "SourceBatchError",
    "mirrored_batches",
    # group offsets
    "GroupFilter",
    "GroupSync",
    "sync_groups",
    "synced_offset",
]
