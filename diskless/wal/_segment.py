"""A segment: the batches of one future WAL object, and the one place its footer rows are made."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence

from diskless.coordinator import CommitBatch, CommitBatchResult
from diskless.records import TRANSACTIONAL_BIT
from diskless.wal._format import IndexRow, SegmentIndexEntry, WalEntry, encode_footer
from diskless.wal._request import PendingWrite


class Segment:
    """Batches by reference to the callers' buffers until `seal` joins them, with their footer,
    into the object's bytes: one copy per batch, and the same object is uploaded and cached."""

    __slots__ = (
        "batch_bytes",
        "batches",
        "data",
        "done",
        "key",
        "last_write_at",
        "number",
        "opened_at",
        "parts",
        "resolved",
        "uploaded",
        "waiter_indexes",
        "waiters",
    )

    def __init__(self, opened_at: float) -> None:
        self.opened_at = opened_at
        self.last_write_at = opened_at
        """When its latest batch was added (the writer sets it): it rotates a linger after."""
        self.parts: list[memoryview | bytes] = []
        self.data = b""
        """The whole object (batches + footer), built once by `seal`."""
        self.batches: list[CommitBatch] = []
        self.waiters: list[PendingWrite | None] = []
        self.waiter_indexes: list[int] = []
        """Who waits for each batch: the request, and the batch's entry index in it (two lists
        rather than a pair per batch: no object per batch for the garbage collector to walk)."""
        self.batch_bytes = 0
        self.number = -1
        self.key = ""
        self.done: asyncio.Future[None] | None = None
        """Set when the segment resolved (committed or failed): the next commit may go."""
        self.resolved = False
        """Answered (committed or failed): nothing may answer its batches again."""
        self.uploaded = False
        """Stored in the object store: it may commit with the segments before it."""

    def add(
        self, entry: WalEntry, size: int, waiter: PendingWrite | None = None, index: int = -1
    ) -> int:
        """Place `entry`'s batch (of `size` bytes) at the end, answered to entry `index` of
        `waiter` (None: nobody waits); returns its part number."""
        header = entry.header
        position = header.position
        buffer = header.buffer
        # header.bytes_view(), inlined; the buffer itself when it is the batch (produce's case)
        self.parts.append(
            buffer if position == 0 and len(buffer) == size else buffer[position : position + size]
        )
        self.batches.append(  # positional: half the cost of keywords, once per batch
            CommitBatch(
                entry.topic_partition,
                self.batch_bytes,  # byte_offset
                size,
                header.records_count,
                header.base_timestamp,
                header.max_timestamp,
                header.producer_id,
                header.producer_epoch,
                header.base_sequence,
                bool(header.attributes & TRANSACTIONAL_BIT),
                entry.lease_id,
            )
        )
        self.waiters.append(waiter)
        self.waiter_indexes.append(index)
        self.batch_bytes += size
        return len(self.parts) - 1

    def own_part(self, at: int) -> None:
        """Copy part `at` out of its caller's buffer, which the caller is about to reuse."""
        self.parts[at] = bytes(self.parts[at])

    def own_parts_of(self, request: PendingWrite, first: int) -> None:
        """Copy every part `request` waits for, from part `first` on, out of its caller's
        buffers (it returns early)."""
        waiters = self.waiters
        for at in range(first, len(waiters)):
            if waiters[at] is request:
                self.own_part(at)

    def index_rows(self) -> list[IndexRow]:
        """The footer's rows: every batch with its partition and producer fields."""
        return [
            (
                batch.topic_partition.topic,
                batch.topic_partition.partition,
                batch.byte_offset,
                batch.size,
                batch.record_count,
                batch.producer_id,
                batch.producer_epoch,
                batch.base_sequence,
            )
            for batch in self.batches
        ]

    def seal(self) -> None:
        """Join the batches and the footer into the object's bytes."""
        assert not self.data
        self.parts.append(encode_footer(self.index_rows()))
        self.data = b"".join(self.parts)
        self.parts = []
        assert len(self.data) > self.batch_bytes

    def fail(self, result: CommitBatchResult) -> None:
        """Answer every waiting batch with `result`, once."""
        if self.resolved:
            return
        self.resolved = True
        for request, index in zip(self.waiters, self.waiter_indexes, strict=True):
            if request is not None:
                request.answer(index, result)

    def answer(self, results: Sequence[CommitBatchResult]) -> None:
        """Hand the coordinator's results to their waiters; `results[i]` answers batch i."""
        assert len(results) == len(self.waiters), (len(results), len(self.waiters))
        if self.resolved:
            return
        self.resolved = True
        for request, index, result in zip(self.waiters, self.waiter_indexes, results, strict=True):
            if request is not None:
                request.answer(index, result)


def encode_segment(entries: Sequence[WalEntry]) -> tuple[bytes, list[SegmentIndexEntry]]:
    """A whole WAL object for `entries`, in order, and its index (what `read_footer` returns),
    built as the writer builds one; for tools and tests."""
    segment = Segment(0.0)
    for entry in entries:
        segment.add(entry, entry.header.size)
    segment.seal()
    return segment.data, [SegmentIndexEntry(*row) for row in segment.index_rows()]
