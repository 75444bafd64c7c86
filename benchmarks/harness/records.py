"""The harness's records: keys that name their producer and sequence, deterministic values.

Batches are built by kafka-python, an independent codec, so that verification never checks the
library's own encoder against itself. Execution builds with these helpers and verification parses
with them; neither imports the other for it.
"""

from __future__ import annotations

import struct
import warnings
from typing import Any, Final

from benchmarks.harness.workload import WorkloadRow
from testkit.batches import batch_builder

_KEY: Final = struct.Struct(">qq")
_FILLER: Final = bytes(range(256)) * 1024


def record_key(producer_id: int, producer_seq: int) -> bytes:
    return _KEY.pack(producer_id, producer_seq)


def parse_record_key(key: bytes) -> tuple[int, int]:
    producer_id, producer_seq = _KEY.unpack(key)
    return producer_id, producer_seq


def record_value(value_bytes: int, producer_seq: int) -> bytes:
    """Deterministic filler: a record's value starts at its sequence's place in a 256-cycle."""
    start = producer_seq % 256
    return _FILLER[start : start + value_bytes]


def kafka_records() -> tuple[Any, Any]:
    """kafka-python's (DefaultRecordBatchBuilder, MemoryRecords): the independent codec.

    Importing `kafka` the first time loads its protocol schemas through a deprecated
    `importlib.resources` call; that one warning is silenced here.
    """
    with warnings.catch_warnings():
        warnings.filterwarnings(
            "ignore", message=r"(read|open)_text is deprecated", category=DeprecationWarning
        )
        from kafka.record import MemoryRecords
        from kafka.record.default_records import DefaultRecordBatchBuilder
    return DefaultRecordBatchBuilder, MemoryRecords


def build_batch(row: WorkloadRow, timestamp_ms: int, wire: tuple[int, int] | None = None) -> bytes:
    """The record batch of a workload row, built by kafka-python (an independent codec).

    `wire` is the (producer id, epoch) to put in the header when it is not the row's own (a
    transactional producer's come from InitProducerId); keys always carry the row's producer id.
    """
    producer_id, producer_epoch = (
        wire if wire is not None else (row.producer_id, row.producer_epoch)
    )
    builder = batch_builder(
        transactional=row.txn_index >= 0,
        producer_id=producer_id,
        producer_epoch=producer_epoch,
        base_sequence=row.base_sequence,
    )
    for i in range(row.records):
        seq = row.producer_seq + i
        builder.append(
            i,
            timestamp=timestamp_ms,
            key=record_key(row.producer_id, seq),
            value=record_value(row.value_bytes, seq),
            headers=[],
        )
    return bytes(builder.build())
