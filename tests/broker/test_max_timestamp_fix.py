"""A client batch whose maxTimestamp is wrong (-1 from Sarama before 2025, or larger than any of
its records) is accepted and stored fixed, as Kafka stores it, on every coordinator backend: the
stored bytes read back from the object store by another broker carry the largest record timestamp
under a valid CRC, and the coordinator's time index answers MAX_TIMESTAMP and lookups by time
from it."""

from __future__ import annotations

import warnings
from pathlib import Path

import pytest

from diskless import BrokerConfig, DisklessBroker, TopicPartition
from diskless._types import ErrorCode, OffsetSpec
from diskless.clock import SystemClock
from diskless.storage import MemoryObjectStore
from diskless.wal import WalConfig
from testkit.backends import BACKENDS, open_coordinator
from testkit.oracle import MAX_TIMESTAMP_AT, build_batch, patch

with warnings.catch_warnings():
    warnings.simplefilter("ignore", DeprecationWarning)
    from kafka.record import MemoryRecords

FAST = BrokerConfig(wal=WalConfig(commit_interval_ms=5, upload_attempts=1, upload_backoff_ms=0))
TP = TopicPartition("t", 0)


def _batch(timestamps: list[int], codec: int, *, claimed: int | None = None) -> bytes:
    """kafka-python's batch of one record per timestamp; `claimed` patched in as maxTimestamp
    with the CRC recomputed (CRC-32C over bytes 21..end)."""
    records = [(ts, None, f"at {ts}".encode() * 20, []) for ts in timestamps]
    batch = build_batch(records, compression=codec)
    return batch if claimed is None else patch(batch, ">q", MAX_TIMESTAMP_AT, claimed)


@pytest.mark.parametrize("codec", [0, 1], ids=["none", "gzip"])
@pytest.mark.parametrize("backend", BACKENDS)
async def test_a_wrong_max_timestamp_is_stored_fixed_and_indexed(
    backend: str, codec: int, tmp_path: Path
) -> None:
    clock = SystemClock()
    now = clock.now_ms()
    sent = {
        "right": [now - 100_000, now - 90_000, now - 80_000],  # offsets 0..2
        "minus one": [now - 50_000, now - 20_000, now - 60_000],  # 3..5, largest in the middle
        "too large": [now - 10_000, now - 15_000],  # 6..7
    }
    batches = {
        "right": _batch(sent["right"], codec),
        "minus one": _batch(sent["minus one"], codec, claimed=-1),
        "too large": _batch(sent["too large"], codec, claimed=now + 600_000),
    }
    store = MemoryObjectStore()
    coordinator = open_coordinator(backend, tmp_path, clock)
    try:
        await coordinator.create_topic("t", 1)
        async with DisklessBroker(1, store, coordinator, FAST, clock=clock) as broker:
            for name, batch in batches.items():
                result = (await broker.produce({TP: batch}))[TP]
                assert result.error == ErrorCode.NONE, (name, result)
        async with DisklessBroker(2, store, coordinator, FAST, clock=clock) as reader:  # cold
            fetched = (await reader.fetch({TP: 0}, max_bytes=1 << 20))[TP]
            assert fetched.error == ErrorCode.NONE, fetched
            memory = MemoryRecords(fetched.records)
            stored = []
            while (batch := memory.next_batch()) is not None:
                assert batch.validate_crc()
                timestamps = [record.timestamp for record in batch]
                assert batch.max_timestamp == max(timestamps)
                stored.append(timestamps)
            assert stored == list(sent.values())

            found = (await reader.list_offsets({TP: OffsetSpec.MAX_TIMESTAMP}))[TP]
            assert (found.error, found.offset, found.timestamp) == (
                ErrorCode.NONE,
                6,
                now - 10_000,  # not the now + 10 min its batch claimed
            )
            # By time: the batch that claimed -1 is found, none past the largest record
            for target, offset in ((now - 55_000, 3), (now - 12_000, 6), (now - 9_000, -1)):
                found = (await reader.list_offsets({TP: target}))[TP]
                assert (found.error, found.offset) == (ErrorCode.NONE, offset), (target, found)
                assert offset == -1 or target <= found.timestamp <= now - 10_000, (target, found)
    finally:
        await coordinator.close()
