"""A read_committed consumer's filtering, as kafka-python's fetcher does it, over its own codec."""

from __future__ import annotations

import collections
import struct
import warnings
from collections.abc import Sequence
from dataclasses import dataclass

# kafka-python's package import warns (DeprecationWarning), which filterwarnings=error would raise.
with warnings.catch_warnings():
    warnings.simplefilter("ignore", DeprecationWarning)
    from kafka.record import MemoryRecords


@dataclass(frozen=True)
class Marker:
    offset: int
    producer_id: int
    producer_epoch: int
    commit: bool
    coordinator_epoch: int


@dataclass(frozen=True)
class Data:
    offset: int
    producer_id: int
    value: bytes | None


def decode_all(data: bytes) -> tuple[list[Data], list[Marker]]:
    """Every record and every control batch, decoded (and CRC-checked) by kafka-python."""
    records: list[Data] = []
    markers: list[Marker] = []
    memory = MemoryRecords(data)
    while (batch := memory.next_batch()) is not None:
        assert batch.validate_crc()
        if batch.is_control_batch:
            assert batch.is_transactional
            (record,) = list(batch)
            assert record.version == 0
            version, coordinator_epoch = struct.unpack(">hi", record.value)
            assert version == 0
            markers.append(
                Marker(
                    record.offset,
                    batch.producer_id,
                    batch.producer_epoch,
                    record.commit,
                    coordinator_epoch,
                )
            )
            continue
        records.extend(Data(r.offset, batch.producer_id, r.value) for r in batch)
    return records, markers


def read_committed(data: bytes, aborted: Sequence[tuple[int, int]]) -> list[Data]:
    """The records a read_committed consumer returns from one fetch response (kafka-python's
    `_consume_aborted_transactions_up_to` / `_is_batch_aborted` / `_contains_abort_marker`)."""
    queue = collections.deque(sorted(aborted, key=lambda a: a[1]))
    aborted_producers: set[int] = set()
    out: list[Data] = []
    memory = MemoryRecords(data)
    while (batch := memory.next_batch()) is not None:
        assert batch.validate_crc()
        while queue and queue[0][1] <= batch.last_offset:
            aborted_producers.add(queue.popleft()[0])
        if batch.is_control_batch:
            (record,) = list(batch)
            if record.abort:
                aborted_producers.discard(batch.producer_id)
            continue
        if batch.is_transactional and batch.producer_id in aborted_producers:
            continue
        out.extend(Data(r.offset, batch.producer_id, r.value) for r in batch)
    return out
