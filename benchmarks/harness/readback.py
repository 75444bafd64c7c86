"""Reading partitions back through `broker.fetch`, as a Kafka consumer does: the records and
markers each fetch returns (decoded by kafka-python), and what read_committed shows of them."""

from __future__ import annotations

import functools
import struct
from typing import Any, Final, cast

from benchmarks.harness.audit import Marker, ReadRecord
from benchmarks.harness.records import (
    kafka_records,
    parse_record_key,
    record_key,
    record_value,
)
from benchmarks.harness.spec import KEY_BYTES
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
        next_offset = max(next_offset, _decode_batch(batch, out, markers))
    return out, next_offset, markers


def _decode_batch(batch: Any, out: list[ReadRecord], markers: list[Marker]) -> int:
    """One batch decoded by kafka-python into `out` and `markers`; the offset after it."""
    if not batch.validate_crc():
        raise ValueError(f"CRC mismatch in batch at offset {batch.base_offset}")
    producer_id = batch.producer_id
    if batch.is_control_batch:
        for record in batch:
            _, control_type = _CONTROL_KEY.unpack(bytes(record.key)[: _CONTROL_KEY.size])
            markers.append(Marker(record.offset, producer_id, control_type == 1))
    else:
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
    return int(batch.base_offset + batch.last_offset_delta + 1)


RecordRun = tuple[int, int, int, int, int, int, bool, bool]
"""(offset, count, batch producer id, key producer id, first key sequence, value bytes, value ok,
transactional): `count` records, the i-th at offset + i with key sequence + i."""


def decode_runs(blob: bytes) -> tuple[list[RecordRun], int, list[Marker]]:
    """What `decode_records` answers, as runs of records, at a fraction of its cost.

    A batch is taken whole when kafka-python's CRC check passes and its records section is byte
    for byte the one the harness's producers write for its header's record count, with its first
    record's key and value length: the records at offsets base .. base + count - 1, keys of
    consecutive sequences, each value its sequence's filler, no timestamp deltas, no headers. Any
    other batch (a control batch, compressed, any byte different) is decoded by kafka-python, as
    `decode_records` does, and its records joined into runs. Same records, same offsets, same
    verdicts either way; the same exceptions (ValueError on a CRC mismatch).
    """
    _, memory_records = kafka_records()
    blob = bytes(blob)  # no copy of bytes; startswith compares in place
    runs: list[list[Any]] = []
    markers: list[Marker] = []
    next_offset = -1
    view = memoryview(blob)
    size = len(blob)
    position = 0
    while size - position >= _LOG_OVERHEAD:
        (length,) = _LENGTH.unpack_from(blob, position + _LENGTH_AT)
        end = position + _LOG_OVERHEAD + length
        if end > size:
            break  # a batch cut by the fetch's size limit, as kafka-python stops there
        run = _whole_batch(blob, position, end)
        if run is not None:
            _extend_runs(runs, run)
            next_offset = max(next_offset, run[0] + run[1])
        else:
            batch = memory_records(view[position:end]).next_batch()
            if batch is None:
                break
            records: list[ReadRecord] = []
            next_offset = max(next_offset, _decode_batch(batch, records, markers))
            runs_join(runs, records)
        position = end
    return [cast(RecordRun, tuple(run)) for run in runs], next_offset, markers


def runs_join(runs: list[list[Any]], records: list[ReadRecord]) -> None:
    """Append `records` to `runs`, each joined to the run before it when everything about it
    follows on."""
    for r in records:
        _extend_runs(runs, _record_run(r))


_LENGTH_AT: Final = 8
_LENGTH: Final = struct.Struct(">i")
_LOG_OVERHEAD: Final = 12
_HEADER: Final = struct.Struct(">qiibIhiqqqhii")
"""A v2 batch's header: base offset, length, leader epoch, magic, CRC, attributes, last offset
delta, base and max timestamps, producer id and epoch, base sequence, record count."""
_CRC_FROM: Final = 21
"""The CRC covers the batch from its attributes on."""
_COMPRESSION: Final = 0x07
_TRANSACTIONAL: Final = 0x10
_CONTROL: Final = 0x20
_VARINTS_CACHED_MAX: Final = 65_536
"""Encoded varints kept: offset deltas, lengths of keys, values and records."""
_NO_ATTRIBUTES_NOR_DELTA: Final = b"\x00\x00"
_KEY_LENGTH: Final = bytes([2 * KEY_BYTES])
"""KEY_BYTES as a varint (zigzag: twice it, in one byte)."""
_NO_HEADERS: Final = b"\x00"
_FIRST_FIELDS: Final = _NO_ATTRIBUTES_NOR_DELTA + b"\x00" + _KEY_LENGTH
"""A harness record after its length: attributes 0, timestamp delta 0, offset delta 0, key
length."""


def _whole_batch(blob: bytes, start: int, end: int) -> RecordRun | None:
    """The run that the batch at `blob[start:end]` holds, when it is exactly a harness
    producer's batch (see `decode_runs`); None otherwise."""
    from kafka.record.util import calc_crc32c, decode_varint  # loaded by kafka_records()

    records_at = start + _HEADER.size
    if end < records_at:
        return None
    (base, _, _, magic, crc, attributes, last_delta, _, _, producer_id, _, _, count) = (
        _HEADER.unpack_from(blob, start)
    )
    if magic != 2 or attributes & (_COMPRESSION | _CONTROL) or count < 1:
        return None
    if last_delta != count - 1 or calc_crc32c(memoryview(blob)[start + _CRC_FROM : end]) != crc:
        return None
    try:
        _, at = decode_varint(blob, records_at)
        if not blob.startswith(_FIRST_FIELDS, at):
            return None
        at += len(_FIRST_FIELDS)
        key_producer, seq = parse_record_key(blob[at : at + KEY_BYTES])
        value_bytes, _ = decode_varint(blob, at + KEY_BYTES)
    except (IndexError, ValueError, struct.error):
        return None
    if value_bytes < 0:
        return None
    # Each record: length, attributes and timestamp delta (0, 0), offset delta, key length and
    # key, value length and value, header count (0).
    value_length = _varint(value_bytes)
    fixed = len(_NO_ATTRIBUTES_NOR_DELTA) + len(_KEY_LENGTH) + KEY_BYTES
    fixed += len(value_length) + value_bytes + len(_NO_HEADERS)
    parts: list[bytes] = []
    for i in range(count):
        delta = _varint(i)
        parts += (
            _varint(fixed + len(delta)),
            _NO_ATTRIBUTES_NOR_DELTA,
            delta,
            _KEY_LENGTH,
            record_key(key_producer, seq + i),
            value_length,
            record_value(value_bytes, seq + i),
            _NO_HEADERS,
        )
    expected = b"".join(parts)
    if records_at + len(expected) != end or not blob.startswith(expected, records_at):
        return None
    return (
        base,
        count,
        producer_id,
        key_producer,
        seq,
        value_bytes,
        True,
        bool(attributes & _TRANSACTIONAL),
    )


@functools.lru_cache(maxsize=_VARINTS_CACHED_MAX)
def _varint(value: int) -> bytes:
    """Kafka's zigzag varint, by kafka-python's encoder."""
    from kafka.record.util import encode_varint  # loaded by kafka_records()

    out = bytearray()
    encode_varint(value, out.append)
    return bytes(out)


def _record_run(r: ReadRecord) -> RecordRun:
    return (
        r.offset,
        1,
        r.batch_producer_id,
        r.key_producer_id,
        r.key_seq,
        r.value_bytes,
        r.value_ok,
        r.transactional,
    )


def _extend_runs(runs: list[list[Any]], run: RecordRun) -> None:
    """Append `run`, joined to the last one when everything about it follows on."""
    if runs:
        last = runs[-1]
        offset, count, batch_pid, key_pid, seq, value_bytes, ok, txn = last
        if (
            run[0] == offset + count
            and run[2] == batch_pid
            and run[3] == key_pid
            and run[4] == seq + count
            and run[5:] == (value_bytes, ok, txn)
        ):
            last[1] += run[1]
            return
    runs.append(list(run))


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
