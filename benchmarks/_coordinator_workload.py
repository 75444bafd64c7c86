"""The workload of `bench_coordinator`: the same objects for every backend, and the rows the
coordinator writes for them (what the raw baselines write)."""

from __future__ import annotations

import gc
import random
from collections.abc import Sequence
from typing import Any, NamedTuple, TypeVar

import msgspec

from diskless import TopicPartition
from diskless.coordinator import CommitBatch
from diskless.txn import RetainedBatch
from diskless.wal import WalConfig

T = TypeVar("T")

PARTITIONS = 1000
BATCHES_PER_CASE_MAX = 200_000
TOPIC = "bench"


class Case(NamedTuple):
    batches_per_object: int
    objects_per_commit: int = 1
    """Objects committed in one step (`commit_files`), as a broker's pipeline groups the
    uploaded objects waiting for their turn; the raw baselines write as many per transaction."""

    @property
    def label(self) -> str:
        if self.objects_per_commit == 1:
            return str(self.batches_per_object)
        return f"{self.batches_per_object} x{self.objects_per_commit}"


CASES = (
    Case(1),
    Case(100),
    Case(100, WalConfig().commit_group_max),
    Case(1000),
)
"""Objects of 1, 100 and 1000 batches, one per commit; and objects of 100 batches grouped as
the WAL pipeline groups them when they queue (`WalConfig.commit_group_max`)."""


def frozen_out_of_gc() -> None:
    """Take what was built before the clock starts (the workload) out of the cyclic GC's sight,
    as a server freezes its start-up heap (`gc.freeze`): a broker holds no prepared workload,
    and its objects would otherwise be scanned by every full collection in the measured loop,
    on either side of a ratio. (Frozen objects are still freed when no longer referenced; only
    cyclic garbage among them would stay.)"""
    gc.collect()
    gc.freeze()


def in_groups(items: Sequence[T], size: int) -> list[Sequence[T]]:
    """`items` cut into consecutive runs of `size` (the last one may be shorter)."""
    return [items[i : i + size] for i in range(0, len(items), size)]


class Workload:
    """Objects of batches with valid producer sequences, the same for every backend."""

    def __init__(self, batches_per_object: int, seed: int = 1, producer_base: int = 0) -> None:
        """Partition p is written by producer `producer_base + p`."""
        self.batches_per_object = batches_per_object
        self.producer_base = producer_base
        self.rng = random.Random(seed)
        self.sequences = [0] * PARTITIONS

    def objects(self) -> list[list[CommitBatch]]:
        """Enough objects for a whole case, built before the clock starts."""
        return [self.next_object() for _ in range(BATCHES_PER_CASE_MAX // self.batches_per_object)]

    def next_object(self) -> list[CommitBatch]:
        batches = []
        for i in range(self.batches_per_object):
            partition = self.rng.randrange(PARTITIONS)
            seq = self.sequences[partition]
            self.sequences[partition] = seq + 10
            batches.append(
                CommitBatch(
                    topic_partition=TopicPartition(TOPIC, partition),
                    byte_offset=i * 1000,
                    size=1000,
                    record_count=10,
                    base_timestamp=1_700_000_000_000,
                    max_timestamp=1_700_000_000_000 + i,
                    producer_id=self.producer_base + partition,
                    producer_epoch=0,
                    base_sequence=seq,
                )
            )
        return batches


class BaselineRows(NamedTuple):
    """Everything one SQLite commit writes, computed before the clock starts."""

    file: tuple[int, str, int, int]
    batches: Sequence[tuple[int, ...]]
    producers: Sequence[tuple[Any, ...]]
    partitions: Sequence[tuple[int, int, int, int]]


def baseline_rows(batches_per_object: int) -> list[BaselineRows]:
    """The rows the SQLite coordinator writes for the workload (same values, same shapes)."""
    high_watermarks = [0] * PARTITIONS
    sizes = [0] * PARTITIONS
    retained: list[tuple[RetainedBatch, ...]] = [()] * PARTITIONS
    encoder = msgspec.msgpack.Encoder()
    out = []
    for index, batches in enumerate(Workload(batches_per_object).objects()):
        file_id = index + 1
        rows, producers, partitions = [], {}, {}
        for b in batches:
            partition = b.topic_partition.partition
            base = high_watermarks[partition]
            last = base + b.record_count - 1
            high_watermarks[partition] = last + 1
            sizes[partition] += b.size
            ts = b.max_timestamp
            rows.append(
                (
                    partition + 1,
                    base,
                    last,
                    file_id,
                    b.byte_offset,
                    b.size,
                    ts,
                    -1,
                    ts,
                    ts,
                    b.producer_id,
                    b.producer_epoch,
                )
            )
            last_seq = b.base_sequence + b.record_count - 1
            kept = (
                *retained[partition][-4:],
                RetainedBatch(b.base_sequence, last_seq, base, last, ts),
            )
            retained[partition] = kept
            producers[partition] = (
                partition + 1,
                b.producer_id,
                0,
                ts,
                0,
                -1,
                None,
                encoder.encode(kept),
            )
            partitions[partition] = (last + 1, sizes[partition], ts, partition + 1)
        out.append(
            BaselineRows(
                (file_id, f"obj/{index:09d}", 1000 * len(batches), len(batches)),
                rows,
                list(producers.values()),
                list(partitions.values()),
            )
        )
    return out
