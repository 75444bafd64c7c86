"""A compacted partition in memory, for the cleaner's tests and benchmark: a seeded keyed workload
of batches (built by kafka-python), the passes that clean it, and its records read back by
kafka-python.

`workload` writes updates, tombstones, idempotent batches and transactions that commit or abort
(transaction versions 1 and 2) in every codec, assigning offsets as a broker would, and keeps
what it wrote (`Written`) for the model. `clean_log` runs passes of `build_offset_map` and
`clean` as a cleaner would, one map at a time, until the dirty range is done, and keeps the
aborted index as the coordinator's swap would.
"""

from __future__ import annotations

import random
import struct
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, NamedTuple

from diskless._types import ControlType
from diskless.compaction import (
    CleanStats,
    LastRecord,
    OffsetMap,
    build_offset_map,
    clean,
    last_records_of,
)
from diskless.records import BatchHeader, build_control_batch, parse_batch
from testkit.oracle import CODECS, build_batch, oracle

T0 = 1_700_000_000_000


class Aborted(NamedTuple):
    """An aborted index entry, as the coordinator's."""

    producer_id: int
    first_offset: int
    last_offset: int
    last_stable_offset: int


class Written(NamedTuple):
    """One data record as written."""

    offset: int
    timestamp: int
    key: bytes
    value: bytes | None
    headers: tuple[tuple[str, bytes | None], ...]
    producer_id: int
    aborted: bool


@dataclass
class Log:
    """A partition's batches in offset order, its aborted index and what was written."""

    batches: list[bytes] = field(default_factory=list)
    aborted: list[Aborted] = field(default_factory=list)
    written: list[Written] = field(default_factory=list)
    codec_of: dict[int, int] = field(default_factory=dict)
    """Base offset → the codec its batch was written in."""
    next_offset: int = 0

    def append(self, batch: bytes, codec: int = 0) -> tuple[int, int]:
        data = bytearray(batch)
        struct.pack_into(">q", data, 0, self.next_offset)  # outside the CRC
        header = parse_batch(data)
        assert isinstance(header, BatchHeader)
        first = self.next_offset
        self.codec_of[first] = header.compression  # kafka-python skips a codec that does not shrink
        self.batches.append(bytes(data))
        self.next_offset = header.last_offset + 1
        return first, header.last_offset


class _Producer:
    def __init__(self, producer_id: int, bump: bool) -> None:
        self.producer_id = producer_id
        self.epoch = 0
        self.sequence = 0
        self.bump = bump
        self.open: tuple[int, list[int]] | None = None
        """(first offset, indexes of its records in `written`) of the ongoing transaction."""


def workload(
    seed: int,
    *,
    operations: int = 60,
    keys: int = 12,
    records_max: int = 5,
    codec: int | None = None,
) -> Log:
    """A seeded mix of keyed writes, each batch in `codec` (None: any codec, drawn); every
    transaction ends before the workload does."""
    rng = random.Random(seed)
    log = Log()
    codecs = [code for code, available in CODECS.values() if available()]
    if codec is not None:
        codecs = [codec]
    pool = [f"key-{i}".encode() for i in range(keys)]
    transactional = [_Producer(2000 + i, bump=rng.random() < 0.5) for i in range(3)]
    idempotent = _Producer(1000, bump=False)
    clock = T0

    def records(producer_id: int, aborted: bool) -> list[Any]:
        nonlocal clock
        out = []
        for _ in range(rng.randint(1, records_max)):
            clock += rng.randint(0, 5)
            key = rng.choice(pool)
            value = None if rng.random() < 0.2 else rng.randbytes(4) * rng.randint(0, 10)
            headers = [("h", rng.randbytes(3))] if rng.random() < 0.2 else []
            out.append((clock, key, value, headers))
        return out

    def write(chosen: list[Any], producer: _Producer | None, txn: bool) -> list[int]:
        chosen_codec = rng.choice(codecs)
        fields: dict[str, Any] = {}
        if producer is not None:
            fields = {
                "producer_id": producer.producer_id,
                "producer_epoch": producer.epoch,
                "base_sequence": producer.sequence,
                "transactional": txn,
            }
            producer.sequence += len(chosen)
        first, _last = log.append(
            build_batch(chosen, compression=chosen_codec, **fields), chosen_codec
        )
        indexes = []
        for delta, (timestamp, key, value, headers) in enumerate(chosen):
            indexes.append(len(log.written))
            log.written.append(
                Written(
                    first + delta,
                    timestamp,
                    key,
                    value,
                    tuple(headers),
                    producer.producer_id if producer else -1,
                    False,
                )
            )
        return indexes

    def end(producer: _Producer, commit: bool) -> None:
        assert producer.open is not None
        first, indexes = producer.open
        epoch = producer.epoch + 1 if producer.bump else producer.epoch
        marker = build_control_batch(
            base_offset=0,
            producer_id=producer.producer_id,
            producer_epoch=epoch,
            control_type=ControlType.COMMIT if commit else ControlType.ABORT,
            coordinator_epoch=0,
            timestamp=clock,
        )
        offset, _ = log.append(marker)
        if not commit:
            for index in indexes:
                log.written[index] = log.written[index]._replace(aborted=True)
            log.aborted.append(Aborted(producer.producer_id, first, offset, offset))
        if producer.bump:
            producer.epoch, producer.sequence = epoch, 0
        producer.open = None

    for _ in range(operations):
        choice = rng.random()
        if choice < 0.35:
            write(records(-1, False), None, False)
        elif choice < 0.5:
            write(records(idempotent.producer_id, False), idempotent, False)
        else:
            producer = rng.choice(transactional)
            if producer.open is not None and rng.random() < 0.3:
                end(producer, commit=rng.random() < 0.6)
                continue
            indexes = write(records(producer.producer_id, True), producer, True)
            if producer.open is None:
                producer.open = (log.written[indexes[0]].offset, indexes)
            else:
                producer.open[1].extend(indexes)
    for producer in transactional:
        if producer.open is not None:
            end(producer, commit=rng.random() < 0.6)
    return log


def headers_of(batches: Sequence[bytes]) -> list[BatchHeader]:
    out = []
    for batch in batches:
        header = parse_batch(batch)
        assert isinstance(header, BatchHeader)
        out.append(header)
    return out


class Outcome(NamedTuple):
    batches: list[bytes]
    aborted: list[Aborted]
    passes: int
    stats: list[CleanStats]


def clean_log(
    batches: Sequence[bytes],
    aborted: Sequence[Aborted],
    *,
    dirty_start: int,
    end: int,
    map_bytes: int,
    now_ms: int,
    delete_retention_ms: int,
    last_records: dict[int, LastRecord] | None = None,
) -> Outcome:
    """The log after cleaning its dirty range [dirty_start, end) in as many passes as the map
    needs, and its aborted index after them."""
    log = list(batches)
    index = list(aborted)
    producers = last_records if last_records is not None else last_records_of(headers_of(log))
    offset_map = OffsetMap(map_bytes)
    start = dirty_start
    passes = 0
    all_stats = []
    while True:
        headers = headers_of(log)
        dirty = [b for b, h in zip(log, headers, strict=True) if h.last_offset >= start]
        outcome = build_offset_map(
            dirty, start=start, end=end, offset_map=offset_map, aborted=index
        )
        if outcome.full and outcome.mapped_end <= start:
            raise AssertionError(f"the map holds no whole batch from {start}")
        head = [b for b, h in zip(log, headers, strict=True) if h.base_offset < outcome.mapped_end]
        tail = log[len(head) :]
        stats = CleanStats()
        cleaned = list(
            clean(
                head,
                offset_map=offset_map,
                now_ms=now_ms,
                delete_retention_ms=delete_retention_ms,
                aborted=index,
                last_records=producers,
                upper_bound=end,
                stats=stats,
            )
        )
        kept = [entry for entry in stats.aborted_kept if isinstance(entry, Aborted)]
        assert len(kept) == len(stats.aborted_kept)
        index = sorted(
            [entry for entry in index if entry.last_offset >= outcome.mapped_end] + kept,
            key=lambda entry: entry.first_offset,
        )
        log = cleaned + tail
        passes += 1
        all_stats.append(stats)
        start = outcome.mapped_end
        if not outcome.full:
            return Outcome(log, index, passes, all_stats)


class Read(NamedTuple):
    offset: int
    timestamp: int
    key: bytes | None
    value: bytes | None
    headers: tuple[tuple[str, bytes | None], ...]


def read_data(batches: Sequence[bytes]) -> list[Read]:
    """Every data record of `batches`, decoded by kafka-python (CRCs checked)."""
    out = []
    for data in batches:
        batch = oracle(data)
        assert batch.validate_crc()
        if batch.is_control_batch:
            continue
        for record in batch:
            out.append(
                Read(
                    record.offset,
                    record.timestamp,
                    record.key,
                    record.value,
                    tuple(record.headers),
                )
            )
    return out
