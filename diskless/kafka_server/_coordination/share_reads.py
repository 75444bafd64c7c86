"""What a share fetch reads of a partition, seen as KIP-932 needs it: which offsets it covers,
which records a share consumer must never get, and the batches that hold what was acquired.

A share-partition acquires offsets, not batches; the records themselves come from the read path
(`DisklessBroker.fetch`) as the batches a Fetch would return. Before a step acquires new records
(`_rules.share.acquire`), the broker reads from the share-partition's end and passes what it
read: up to where it read (so nothing is acquired that this read did not see), and the offsets
never to deliver, archived at acquisition:
- control batches (transaction markers): they hold no record a consumer sees;
- under read_committed, the batches of aborted transactions, found as Kafka's consumer finds
  them (`FetchResult.aborted_transactions` opens a producer's aborted transaction at its first
  offset; its abort marker closes it). The read itself stops at the last stable offset.
After the step, the response carries every batch that overlaps an acquired range (whole batches,
as Kafka returns them; the client delivers only the acquired offsets), read again where the
first read did not cover them (records available again below the end).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import NamedTuple

from diskless._results import FetchResult
from diskless._types import ErrorCode, IsolationLevel
from diskless.coordinator import AcquiredRange
from diskless.records import CONTROL_BIT, TRANSACTIONAL_BIT, BatchHeader, split_batches


class Batch(NamedTuple):
    first: int
    last: int
    data: bytes


class ShareRead(NamedTuple):
    """One partition's read from `offset`."""

    offset: int
    result: FetchResult
    batches: tuple[Batch, ...]
    end: int
    """One past the last offset read (`offset` when nothing was)."""
    skipped: tuple[tuple[int, int], ...]
    """[first, last] offsets at or after `offset` never to deliver (see the module doc)."""


def batches_of(records: bytes) -> list[BatchHeader]:
    """The batches of a read (none when the read path returned something unframed: it never
    does, and a share consumer then gets nothing rather than a broken record set)."""
    headers = split_batches(records)
    return [] if not isinstance(headers, list) else headers


def _data(header: BatchHeader) -> bytes:
    return bytes(header.buffer[header.position : header.position + header.size])


def share_read(offset: int, result: FetchResult, isolation: IsolationLevel) -> ShareRead:
    if result.error is not ErrorCode.NONE or not result.records:
        return ShareRead(offset, result, (), offset, ())
    headers = batches_of(result.records)
    opening = sorted(result.aborted_transactions, key=lambda t: t[1])
    aborting: set[int] = set()
    opened = 0
    skipped: list[tuple[int, int]] = []
    end = offset
    for h in headers:
        last = h.last_offset
        end = max(end, last + 1)
        while opened < len(opening) and opening[opened][1] <= last:
            aborting.add(opening[opened][0])
            opened += 1
        control = bool(h.attributes & CONTROL_BIT)
        aborted = (
            isolation is IsolationLevel.READ_COMMITTED
            and bool(h.attributes & TRANSACTIONAL_BIT)
            and not control
            and h.producer_id in aborting
        )
        if control:
            aborting.discard(h.producer_id)
        if (control or aborted) and last >= offset:
            skipped.append((max(h.base_offset, offset), last))
    batches = tuple(Batch(h.base_offset, h.last_offset, _data(h)) for h in headers)
    return ShareRead(offset, result, batches, end, tuple(skipped))


def covering(batches: Iterable[Batch], acquired: Sequence[AcquiredRange]) -> list[Batch]:
    """The batches that overlap an acquired range, each once, in offset order (a span without
    data, standing for offsets no batch holds, is left out)."""
    kept: dict[int, Batch] = {}
    for b in batches:
        if b.data and any(b.first <= a.last and a.first <= b.last for a in acquired):
            kept.setdefault(b.first, b)
    return [kept[first] for first in sorted(kept)]


def first_uncovered(batches: Iterable[Batch], acquired: Sequence[AcquiredRange]) -> int | None:
    """The first acquired offset no batch holds (None: all are held). Offsets that no batch can
    hold (compacted away) are found too: the caller reads from there once and moves past."""
    spans = sorted((b.first, b.last) for b in batches)
    for a in sorted(acquired):
        position = a.first
        for first, last in spans:
            if last < position:
                continue
            if first > position:
                break
            position = last + 1
            if position > a.last:
                break
        if position <= a.last:
            return position
    return None
