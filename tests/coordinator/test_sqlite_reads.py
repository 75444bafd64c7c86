"""Reads never wait behind writes: with another process holding the SQLite write lock and a
commit of ours waiting behind it, `find_batches` and a broker fetch still answer at once.

The one latency assertion of the suite (the property is a latency one); its bound is generous
for a loaded two-core machine, while the failure it guards against is a wait of seconds.
"""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

from diskless import BrokerConfig, DisklessBroker
from diskless._types import ErrorCode, TopicPartition
from diskless.coordinator import FindBatchesRequest, SqliteBatchCoordinator
from diskless.storage import LocalObjectStore
from diskless.wal import WalConfig
from testkit.commits import batch
from testkit.lock_holder import WriteLockHolder
from testkit.wal import build_batch

TP = TopicPartition("reads", 0)
SAMPLES = 100
P99_S_MAX = 0.1
CALL_TIMEOUT_S = 10.0  # without the property a read waits for the lock: fail, do not hang


def _p99(latencies: list[float]) -> float:
    return sorted(latencies)[max(0, round(0.99 * len(latencies)) - 1)]


async def test_reads_stay_fast_while_another_process_holds_the_write_lock(
    tmp_path: Path,
) -> None:
    db = tmp_path / "coordinator.db"
    store = LocalObjectStore(tmp_path / "objects", durable=False)
    coordinator = SqliteBatchCoordinator(db)
    try:
        await coordinator.create_topic(TP.topic, 1)
        config = BrokerConfig(wal=WalConfig(commit_interval_ms=10))
        async with DisklessBroker(1, store, coordinator, config) as writer:
            produced = await writer.produce({TP: build_batch([b"a", b"b"])})
            assert produced[TP].error == ErrorCode.NONE, produced
        epoch = await coordinator.register_broker(3)
        async with DisklessBroker(2, store, coordinator, config) as reader:
            with WriteLockHolder(db) as lock:
                late = asyncio.create_task(
                    coordinator.commit_file("late-object", 3, epoch, 100, [batch(TP)])
                )
                await asyncio.sleep(0.3)
                assert not late.done(), "the commit should be waiting for the other's lock"
                find_s, fetch_s = [], []
                for _ in range(SAMPLES):
                    started = time.perf_counter()
                    [found] = await asyncio.wait_for(
                        coordinator.find_batches([FindBatchesRequest(TP, 0, 1 << 20)], 1 << 20),
                        CALL_TIMEOUT_S,
                    )
                    find_s.append(time.perf_counter() - started)
                    assert found.error == ErrorCode.NONE
                    assert found.high_watermark == 2
                    started = time.perf_counter()
                    fetched = await asyncio.wait_for(reader.fetch({TP: 0}), CALL_TIMEOUT_S)
                    fetch_s.append(time.perf_counter() - started)
                    assert fetched[TP].error == ErrorCode.NONE
                    assert fetched[TP].records
                assert not late.done(), "the lock was held throughout"
                lock.release()
            [result] = (await asyncio.wait_for(late, 30)).batches
            assert result.error == ErrorCode.NONE
            assert result.base_offset == 2
        print(f"p99 find_batches {_p99(find_s) * 1000:.1f} ms, fetch {_p99(fetch_s) * 1000:.1f} ms")
        assert _p99(find_s) < P99_S_MAX
        assert _p99(fetch_s) < P99_S_MAX
    finally:
        await coordinator.close()
