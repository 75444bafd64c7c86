"""One cleaning pass over a partition: the map of its dirty range, then the filter of its log,
as Kafka's `Cleaner.buildOffsetMap` and `cleanInto` (through `MemoryRecords.filterTo`) do.

`build_offset_map` reads the dirty range [start, end) in offset order and maps each key to its
greatest offset, skipping aborted transactions' batches. When the map is full it stops at the
last batch it mapped whole: the pass covers the log up to `MapOutcome.mapped_end` and the next
pass starts there (a partition with more distinct keys than the map holds is cleaned in several
passes, each within the map's bytes).

`clean` then reads the log from its start up to `mapped_end` and yields the batches to store in
place of those read, each record judged as Kafka's cleaner judges it:
- a data record above the map's latest offset stays (the map cannot judge it);
- a data record without a key goes (Kafka refuses them on compacted topics);
- otherwise it stays when no later offset of its key is mapped, and, for a tombstone (a null
  value), while its batch has no delete horizon or the horizon is still ahead;
- records of aborted transactions go; a marker goes once its transaction has no batch left and
  its own horizon has passed (`_transactions`);
- a batch holding the last entry of a producer (`LastRecord`), or ending exactly at the round's
  upper bound, stays even when emptied.
A batch keeping all its records and needing no horizon is yielded as read (the same bytes);
another is rebuilt (`_records.rebuilt`), gaining the horizon now + `delete.retention.ms` when it
keeps a tombstone, or is a marker found alone, for the first time.

Both read one batch at a time from any iterable (the read path's batches, or a stream of them)
and hold nothing of it once past it: memory is the map plus one batch, decompressed, and the
batch written for it.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import NamedTuple

from diskless.compaction import _native
from diskless.compaction._offset_map import OffsetMap, key_hash
from diskless.compaction._records import (
    NO_TIMESTAMP,
    UncleanableBatch,
    control_type,
    empty_batch,
    rebuilt,
    rebuilt_native,
    records_of,
    records_section,
)
from diskless.compaction._transactions import (
    AbortedRange,
    LastRecord,
    TransactionTracker,
    is_last_of_producer,
)
from diskless.records import DELETE_HORIZON_BIT, BatchHeader, InvalidBatch, parse_batch

Buffer = bytes | bytearray | memoryview


class MapOutcome(NamedTuple):
    """How far one map reached over the dirty range."""

    mapped_end: int
    """The first offset the map does not cover: the pass cleans the log below it."""
    full: bool
    """Whether the map filled before the end of the dirty range (another pass must follow)."""
    records: int
    """Records read into the map."""


@dataclass(slots=True)
class CleanStats:
    """What one `clean` read and wrote."""

    batches_read: int = 0
    bytes_read: int = 0
    records_read: int = 0
    batches_written: int = 0
    bytes_written: int = 0
    records_kept: int = 0
    batches_rebuilt: int = 0
    aborted_kept: list[AbortedRange] = field(default_factory=list)
    """The aborted index's entries this clean read the marker of and still needs: the range's
    new index is these and the entries whose marker lies past the range."""


def _header(data: Buffer) -> BatchHeader:
    parsed = parse_batch(data)
    if isinstance(parsed, InvalidBatch):
        raise UncleanableBatch(parsed.message)
    if parsed.size != len(parsed.buffer):
        raise UncleanableBatch(f"batch at {parsed.base_offset} is followed by other bytes")
    return parsed


def _delete_horizon(header: BatchHeader) -> int:
    return header.base_timestamp if header.attributes & DELETE_HORIZON_BIT else NO_TIMESTAMP


def build_offset_map(
    batches: Iterable[Buffer],
    *,
    start: int,
    end: int,
    offset_map: OffsetMap,
    aborted: Iterable[AbortedRange],
) -> MapOutcome:
    """Clear `offset_map` and map the keys of the dirty range [start, end) of `batches` (one
    batch each, in offset order, those ending before `start` skipped); aborted transactions'
    records are not mapped. Raises `UncleanableBatch` when a batch does not decode."""
    assert start <= end
    offset_map.clear()
    transactions = TransactionTracker(aborted)
    records = 0
    for data in batches:
        header = _header(data)
        if header.base_offset >= end:
            break
        if header.is_control:
            transactions.on_marker(header, control_type(header))
        elif not transactions.on_data_batch(header):
            mapped, stopped = _map_batch(header, offset_map, start, end)
            records += mapped
            if stopped >= 0:
                return MapOutcome(max(offset_map.latest_offset + 1, start), True, records)
        if header.last_offset >= start:
            offset_map.set_latest_offset(min(header.last_offset, end - 1))
    offset_map.set_latest_offset(end - 1)
    return MapOutcome(end, False, records)


def _map_batch(header: BatchHeader, offset_map: OffsetMap, start: int, end: int) -> tuple[int, int]:
    """Map the keyed records of [start, end) of a data batch: (records mapped, the offset of
    the first key that did not fit, -1 when all did); by the C walk when it is built."""
    section = records_section(header)
    base = header.base_offset
    if _native.NATIVE is not None:
        try:
            return offset_map.put_section(section, header.records_count, base, start, end)
        except ValueError as e:
            raise UncleanableBatch(str(e)) from None
    mapped = 0
    for record in records_of(header, section):
        offset = base + record.offset_delta
        if record.key is None or offset < start:
            continue
        if offset >= end:
            break
        if not offset_map.put(key_hash(record.key), offset):
            return mapped, offset
        mapped += 1
    return mapped, -1


class _Kept(NamedTuple):
    """What a batch keeps of its records."""

    records: int
    everything: bool
    tombstones: bool
    rebuild: Callable[[int], bytes]
    """The batch of the kept records (some), given its delete horizon (NO_TIMESTAMP: none)."""


def _kept(
    header: BatchHeader,
    section: bytes | memoryview,
    offset_map: OffsetMap,
    tombstones_stay: bool,
    discard_records: bool,
) -> _Kept:
    """Each record judged in Python: the rule for every batch when the C walk is not built,
    and for markers and discarded batches always."""
    kept = []
    tombstones = False
    everything = True
    base = header.base_offset
    latest = offset_map.latest_offset
    for record in records_of(header, section):
        if discard_records:
            keep = False
        elif header.is_control or base + record.offset_delta > latest:
            keep = True
        elif record.key is None:
            keep = False
        else:
            keep = base + record.offset_delta >= offset_map.get(key_hash(record.key)) and (
                record.has_value or tombstones_stay
            )
        if keep:
            kept.append(record)
            tombstones = tombstones or not record.has_value
        else:
            everything = False
    return _Kept(
        len(kept), everything, tombstones, lambda horizon: rebuilt(header, section, kept, horizon)
    )


def _kept_native(
    header: BatchHeader, section: bytes | memoryview, offset_map: OffsetMap, tombstones_stay: bool
) -> _Kept:
    """A data batch's records judged by the C walk (`_native`), as `_kept` judges them."""
    assert _native.NATIVE is not None
    try:
        spans, everything, tombstones, max_delta = _native.NATIVE.filter_records(
            section,
            header.records_count,
            header.base_offset,
            offset_map.latest_offset,
            offset_map.table,
            offset_map.slots,
            tombstones_stay,
        )
    except ValueError as e:
        raise UncleanableBatch(str(e)) from None
    return _Kept(
        len(spans) // _native.SPAN_BYTES,
        everything,
        tombstones,
        lambda horizon: rebuilt_native(header, section, spans, max_delta, horizon),
    )


def clean(
    batches: Iterable[Buffer],
    *,
    offset_map: OffsetMap,
    now_ms: int,
    delete_retention_ms: int,
    aborted: Iterable[AbortedRange],
    last_records: Mapping[int, LastRecord],
    upper_bound: int,
    stats: CleanStats | None = None,
) -> Iterator[bytes]:
    """The batches that replace `batches` (the log from its start up to the map's
    `mapped_end`, in offset order), one at a time. `aborted` is the aborted index over that
    range, `last_records` each active producer's last entry in the whole log, `upper_bound`
    the first uncleanable offset of the round. Raises `UncleanableBatch` when a batch does not
    decode: nothing yielded before must then be stored."""
    counts = stats if stats is not None else CleanStats()
    transactions = TransactionTracker(aborted)
    for data in batches:
        header = _header(data)
        counts.batches_read += 1
        counts.bytes_read += header.size
        horizon = _delete_horizon(header)
        if header.is_control:
            kind = control_type(header)
            can_discard = transactions.on_marker(header, kind)
            discard_records = can_discard and NO_TIMESTAMP != horizon <= now_ms
        else:
            can_discard = discard_records = transactions.on_data_batch(header)
        retain_empty = (header.producer_id >= 0 and is_last_of_producer(header, last_records)) or (
            header.last_offset + 1 == upper_bound
        )
        if discard_records and not retain_empty:
            continue
        section = records_section(header)
        stay = horizon == NO_TIMESTAMP or now_ms < horizon
        if _native.NATIVE is not None and not header.is_control and not discard_records:
            kept = _kept_native(header, section, offset_map, stay)
        else:
            kept = _kept(header, section, offset_map, stay, discard_records)
        counts.records_read += header.records_count
        if kept.records:
            set_horizon = (kept.tombstones or (can_discard and header.is_control)) and (
                horizon == NO_TIMESTAMP
            )
            if kept.everything and not set_horizon:
                out = bytes(header.bytes_view())
            else:
                counts.batches_rebuilt += 1
                out = kept.rebuild(now_ms + delete_retention_ms if set_horizon else horizon)
        elif retain_empty:
            out = empty_batch(header)
        else:
            continue
        counts.records_kept += kept.records
        counts.batches_written += 1
        counts.bytes_written += len(out)
        yield out
    counts.aborted_kept.extend(transactions.kept)
