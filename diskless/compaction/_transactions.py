"""What the cleaner tracks of transactions while it walks a range: Kafka's
`CleanedTransactionMetadata`, and the producers whose last batch must stay.

Walking batches in offset order with the partition's aborted index (`AbortedRange`s sorted by
first offset), a transactional batch belongs to an aborted transaction when an aborted entry of
its producer has begun at or before it and its marker has not been read yet; such batches are
dropped. A marker may go once no batch of its transaction was read in this walk (they were
removed by earlier cleanings), and then only after its own delete horizon: the first cleaning
that finds it alone gives its batch one.

Kafka keeps, whatever their records, the batch that holds each active producer's last data
offset (its last sequence), or the marker at its last epoch when its last entry is a marker, so
that producer state can be rebuilt from the log (`LastRecord`, `last_records_of`).
"""

from __future__ import annotations

import heapq
from collections.abc import Iterable, Mapping
from typing import NamedTuple, Protocol

from diskless._types import ControlType
from diskless.records import BatchHeader


class AbortedRange(Protocol):
    """An entry of the partition's aborted index (the coordinator's `AbortedTxn` is one)."""

    @property
    def producer_id(self) -> int: ...

    @property
    def first_offset(self) -> int: ...

    @property
    def last_offset(self) -> int: ...


class LastRecord(NamedTuple):
    """An active producer's last entry in the log (Kafka's `LastRecord`)."""

    last_data_offset: int | None
    """The last offset of its last data batch at its current epoch; None when it has none
    (its last entry is a marker that began the epoch)."""
    producer_epoch: int


def last_records_of(headers: Iterable[BatchHeader]) -> dict[int, LastRecord]:
    """Each producer's `LastRecord` after the batches of a whole log, in offset order, as
    Kafka's producer state holds it: a data batch sets the last data offset, a batch at a new
    epoch (a marker of transaction version 2 bumps it) clears what the older epoch left."""
    last: dict[int, LastRecord] = {}
    for header in headers:
        if header.producer_id < 0:
            continue
        known = last.get(header.producer_id)
        data_offset = known.last_data_offset if known else None
        if known is not None and known.producer_epoch != header.producer_epoch:
            data_offset = None
        if not header.is_control:
            data_offset = header.last_offset
        last[header.producer_id] = LastRecord(data_offset, header.producer_epoch)
    return last


def is_last_of_producer(header: BatchHeader, last: Mapping[int, LastRecord]) -> bool:
    """Whether `header`'s batch is its producer's last entry (`isBatchLastRecordOfProducer`)."""
    record = last.get(header.producer_id)
    if record is None or header.producer_id < 0:
        return False
    if record.last_data_offset is not None:
        return header.last_offset == record.last_data_offset
    return header.is_control and header.producer_epoch == record.producer_epoch


class _Aborted:
    __slots__ = ("entry", "last_seen")

    def __init__(self, entry: AbortedRange) -> None:
        self.entry = entry
        self.last_seen = -1


class TransactionTracker:
    """Kafka's `CleanedTransactionMetadata` over one walk of batches in offset order.

    `kept` lists the aborted index's entries whose marker the walk read while their batches
    were still there: with the entries whose marker lies past the walk, they are the cleaned
    range's index (Kafka writes only those to the cleaned segment's transaction index)."""

    def __init__(self, aborted: Iterable[AbortedRange]) -> None:
        self._pending = [(entry.first_offset, index, entry) for index, entry in enumerate(aborted)]
        heapq.heapify(self._pending)
        self._ongoing_aborted: dict[int, _Aborted] = {}
        self._ongoing_committed: set[int] = set()
        self.kept: list[AbortedRange] = []

    def _begin_up_to(self, header: BatchHeader) -> None:
        """Begin the aborted transactions that began by `header`'s last offset; one whose
        marker lies before `header` ended before the walk began, and is not begun."""
        pending = self._pending
        ongoing = self._ongoing_aborted
        while pending and pending[0][0] <= header.last_offset:
            _first, _index, entry = heapq.heappop(pending)
            if entry.last_offset < header.base_offset:
                continue
            known = ongoing.get(entry.producer_id)
            if known is None or known.entry.last_offset < header.base_offset:
                ongoing[entry.producer_id] = _Aborted(entry)

    def on_data_batch(self, header: BatchHeader) -> bool:
        """Read a data batch; whether it belongs to an aborted transaction (then it goes)."""
        self._begin_up_to(header)
        if not header.is_transactional:
            return False
        aborted = self._ongoing_aborted.get(header.producer_id)
        if aborted is not None and aborted.entry.last_offset < header.base_offset:
            del self._ongoing_aborted[header.producer_id]  # its marker was not in the walk
            aborted = None
        if aborted is not None:
            aborted.last_seen = header.last_offset
            return True
        self._ongoing_committed.add(header.producer_id)
        return False

    def on_marker(self, header: BatchHeader, kind: int | None) -> bool:
        """Read a control batch of marker type `kind` (None: emptied by an earlier cleaning);
        whether it may be discarded (its transaction has no batch left in this walk)."""
        self._begin_up_to(header)
        if kind is None:
            return True
        if kind == ControlType.ABORT:
            aborted = self._ongoing_aborted.pop(header.producer_id, None)
            if aborted is None or aborted.last_seen < 0:
                return True
            self.kept.append(aborted.entry)
            return False
        if kind == ControlType.COMMIT:
            if header.producer_id in self._ongoing_committed:
                self._ongoing_committed.discard(header.producer_id)
                return False
            return True
        return False
