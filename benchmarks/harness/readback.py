"""Reading partitions back through `broker.fetch`, as a Kafka consumer does: the records and
markers each fetch returns (decoded by kafka-python), and what read_committed shows of them."""

from __future__ import annotations

import struct
from typing import Any, Final

from benchmarks.harness.audit import Marker, ReadRecord
from benchmarks.harness.records import kafka_records, parse_record_key, record_value
from diskless import ErrorCode, IsolationLevel, TopicPartition

FETCH_BYTES_MAX: Final = 52_428_800
PARTITION_FETCH_BYTES_MAX: Final = 1_048_576
"""Kafka's consumer defaults (fetch.max.bytes, max.partition.fetch.bytes)."""
EMPTY_FETCHES_MAX: Final = 3
_CONTROL_KEY: Final = struct.Struct(">hh")
"""A control record's key: version, type (0 abort, 1 commit)."""


def decode_records(blob: bytes) -> tuple[list[ReadRecord], int, list[Marker]]:
    """Records of fetched bytes (kafka-python decodes them), the next offset to fetch, and the
    transaction markers met."""
    _, memory_records = kafka_records()
    out: list[ReadRecord] = []
    markers: list[Marker] = []
    next_offset = -1
    records = memory_records(blob)
    while True:
        batch = records.next_batch()
        if batch is None:
            break
        if not batch.validate_crc():
            raise ValueError(f"CRC mismatch in batch at offset {batch.base_offset}")
        next_offset = max(next_offset, batch.base_offset + batch.last_offset_delta + 1)
        producer_id = batch.producer_id
        if batch.is_control_batch:
            for record in batch:
                _, control_type = _CONTROL_KEY.unpack(bytes(record.key)[: _CONTROL_KEY.size])
                markers.append(Marker(record.offset, producer_id, control_type == 1))
            continue
        transactional = bool(batch.is_transactional)
        for record in batch:
            key_producer, seq = parse_record_key(bytes(record.key))
            value = bytes(record.value) if record.value is not None else b""
            out.append(
                ReadRecord(
                    record.offset,
                    producer_id,
                    key_producer,
                    seq,
                    len(value),
                    value == record_value(len(value), seq),
                    transactional,
                )
            )
    return out, next_offset, markers


def committed_view(
    records: list[ReadRecord], markers: list[Marker], aborted: list[tuple[int, int]]
) -> list[ReadRecord]:
    """What a Kafka consumer delivers under read_committed: records of a producer are dropped
    from an aborted transaction's first offset up to that producer's ABORT marker."""
    starts = sorted((first, producer) for producer, first in aborted)
    events = sorted(
        [(r.offset, 0, r) for r in records] + [(m.offset, 1, m) for m in markers],
        key=lambda event: event[0],
    )
    active: set[int] = set()
    shown: list[ReadRecord] = []
    next_start = 0
    for offset, kind, item in events:
        while next_start < len(starts) and starts[next_start][0] <= offset:
            active.add(starts[next_start][1])
            next_start += 1
        if kind == 1:
            assert isinstance(item, Marker)
            if not item.commit:
                active.discard(item.producer_id)
            continue
        assert isinstance(item, ReadRecord)
        if item.transactional and item.batch_producer_id in active:
            continue
        shown.append(item)
    return shown


class Cursor:
    """Where a partition's read-back stands."""

    __slots__ = (
        "aborted",
        "empty",
        "high_watermark",
        "last_stable",
        "log_start",
        "markers",
        "offset",
        "read_bytes",
        "records",
    )

    def __init__(self) -> None:
        self.offset = 0
        self.high_watermark = -1
        self.last_stable = -1
        self.log_start = 0
        self.read_bytes = 0
        self.records: list[ReadRecord] = []
        self.markers: list[Marker] = []
        self.aborted: list[tuple[int, int]] = []
        self.empty = 0


async def read_partitions(
    broker: Any,
    partitions: list[TopicPartition],
    isolation: IsolationLevel = IsolationLevel.READ_UNCOMMITTED,
) -> dict[TopicPartition, Cursor | str]:
    """Read partitions from their start to their high watermark (read_committed: to their last
    stable offset), all in each fetch, as one consumer does (FETCH_BYTES_MAX per fetch,
    PARTITION_FETCH_BYTES_MAX per partition).

    A partition's answer is its cursor, or an error message when it could not be read. Records
    below the requested offset (a batch may start earlier) are dropped, as a client does.
    """
    cursors = {tp: Cursor() for tp in partitions}
    out: dict[TopicPartition, Cursor | str] = {}
    while cursors:
        answers = await broker.fetch(
            {tp: c.offset for tp, c in cursors.items()},
            max_bytes=FETCH_BYTES_MAX,
            partition_max_bytes=PARTITION_FETCH_BYTES_MAX,
            isolation_level=isolation,
        )
        for tp, cursor in list(cursors.items()):
            answer = answers[tp]
            if answer.error != ErrorCode.NONE:
                out[tp] = f"fetch at {cursor.offset}: {ErrorCode(answer.error).name}"
                del cursors[tp]
                continue
            cursor.high_watermark = answer.high_watermark
            cursor.last_stable = answer.last_stable_offset
            cursor.log_start = answer.log_start_offset
            end = (
                answer.last_stable_offset
                if isolation == IsolationLevel.READ_COMMITTED
                else answer.high_watermark
            )
            if cursor.offset >= end:
                out[tp] = cursors.pop(tp)
                continue
            cursor.read_bytes += len(answer.records)
            cursor.aborted.extend(tuple(a) for a in answer.aborted_transactions)
            try:
                records, next_offset, markers = decode_records(answer.records)
            except ValueError as exc:
                out[tp] = f"fetch at {cursor.offset}: {exc}"
                del cursors[tp]
                continue
            cursor.records.extend(r for r in records if r.offset >= cursor.offset)
            cursor.markers.extend(m for m in markers if m.offset >= cursor.offset)
            if next_offset > cursor.offset:
                cursor.offset = next_offset
                cursor.empty = 0
            elif not answer.records:
                cursor.empty += 1
                if cursor.empty >= EMPTY_FETCHES_MAX:
                    out[tp] = f"fetch at {cursor.offset} < end {end}: no data"
                    del cursors[tp]
    return out
