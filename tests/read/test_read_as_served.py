"""Unit: consolidation's read of one partition's batches, scattered among other partitions' in a
WAL object, costs one GET per cache block, not one per batch."""

from __future__ import annotations

from diskless._types import TimestampType
from diskless.coordinator import BatchInfo
from diskless.read import ObjectCache, read_as_served
from diskless.records import BatchHeader, parse_batch
from diskless.storage import MemoryObjectStore
from testkit.batches import build_batch

BATCHES_PER_PARTITION = 20


async def test_scattered_batches_of_a_partition_cost_one_get_per_block() -> None:
    """A WAL object of unknown size holding batches of partitions A and B in turn: reading A's
    through a cache whose block holds the object is one GET, and every batch comes back whole
    with its assigned base offset."""
    wal = bytearray()
    ours: list[BatchInfo] = []
    for i in range(BATCHES_PER_PARTITION):
        for partition in ("a", "b"):
            batch = build_batch([f"{partition}{i}-{r}".encode() * 50 for r in range(3)])
            if partition == "a":
                ours.append(
                    BatchInfo(
                        "wal", len(wal), len(batch), 3 * i, 3 * i + 2, TimestampType.CREATE_TIME,
                        -1, -1,
                    )
                )  # fmt: skip
            wal += batch
    store = MemoryObjectStore()
    await store.put("wal", bytes(wal))
    cache = ObjectCache(store, block_bytes=1 << 20, bytes_max=1 << 22)

    served = await read_as_served(cache, ours)

    assert store.stats().ranged_gets == 1
    assert len(served) == BATCHES_PER_PARTITION
    for info, batch in zip(ours, served, strict=True):
        header = parse_batch(batch)
        assert isinstance(header, BatchHeader) and header.base_offset == info.base_offset
        stored = wal[info.byte_offset : info.byte_offset + info.size]
        assert batch[12:] == stored[12:]  # only the base offset differs
