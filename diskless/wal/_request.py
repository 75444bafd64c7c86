"""One produce request's batches on their way through the WAL, and the answers it waits for."""

from __future__ import annotations

import asyncio
import copy
import math
from typing import Final, Protocol

from diskless._types import ErrorCode
from diskless.coordinator import CommitBatchResult
from diskless.wal._format import WalEntry


class Parts(Protocol):
    """Where a request's batches were placed (a segment), by reference to the caller's buffers."""

    def own_parts_of(self, request: PendingWrite, first: int) -> None:
        """Copy the parts `request` placed, from part `first` on, out of its caller's buffers."""


def error_result(code: ErrorCode, message: str) -> CommitBatchResult:
    return CommitBatchResult(error=code, error_message=message)


CLOSING: Final = error_result(ErrorCode.NOT_LEADER_OR_FOLLOWER, "the broker is shutting down")
TIMED_OUT: Final = error_result(ErrorCode.REQUEST_TIMED_OUT, "the produce request timed out")


class PendingWrite:
    """One `submit`: its results fill in as its entries' segments resolve."""

    __slots__ = (
        "admit_by",
        "deadline",
        "entries",
        "first_part",
        "future",
        "last_placed",
        "pending",
        "placed_count",
        "placing",
        "results",
        "waiter",
    )

    def __init__(
        self, entries: list[WalEntry], admit_by: float, future: asyncio.Future[None]
    ) -> None:
        self.entries = entries
        self.admit_by = admit_by
        """Monotonic seconds after which entries still queued for admission are refused."""
        self.placing = False
        """A task is appending its remaining entries (it had to queue for admission)."""
        self.waiter: asyncio.Future[CommitBatchResult | None] | None = None
        """Its place in the admission queue, while it waits there."""
        self.results: list[CommitBatchResult | None] = [None] * len(entries)
        self.pending = len(entries)
        self.deadline = math.inf
        """Monotonic seconds at which `wait` gives up; set by `wait`."""
        self.future = future
        """Done once every entry is answered, or when the waiter gave up."""
        self.placed_count = 0
        """Entries appended (or refused) so far, in order."""
        self.last_placed: Parts | None = None
        """The segment its last appended entry went to: the only one that can still be open when
        it returns, since entries are appended in order and segments rotate in order."""
        self.first_part = 0
        """The part number of its first entry in `last_placed`."""

    @property
    def settled(self) -> bool:
        """Neither waited for nor appending: its deadlines no longer matter."""
        return self.future.done() and not self.placing

    def answer(self, index: int, result: CommitBatchResult) -> None:
        if self.future.done():
            return  # timed out or abandoned: the result arrives too late for anyone
        assert self.results[index] is None, index
        self.results[index] = result
        self.pending -= 1
        if self.pending == 0:
            self.future.set_result(None)

    def refuse_rest(self, result: CommitBatchResult) -> None:
        """Answer every entry not yet placed with `result`; none of them will be."""
        for index in range(self.placed_count, len(self.entries)):
            self.answer(index, result)
        self.placed_count = len(self.entries)

    def expire(self) -> None:
        """Answer what is not yet answered with REQUEST_TIMED_OUT; the entries carry on."""
        results = self.results
        for index, result in enumerate(results):
            if result is None:
                results[index] = TIMED_OUT
        self.pending = 0
        self.future.set_result(None)

    def detach(self, active: Parts | None) -> None:
        """Copy the request's batches out of the caller's buffers: those in the open segment,
        and those not yet appended.

        Only a request that returns early (timeout, cancellation) can leave batches in the active
        segment, where its last appended entry went: the common case costs one comparison.
        """
        if active is not None and self.last_placed is active:
            active.own_parts_of(self, self.first_part)
        self.last_placed = None
        entries = self.entries
        for index in range(self.placed_count, len(entries)):
            entries[index] = _owned(entries[index])


def _owned(entry: WalEntry) -> WalEntry:
    """`entry` with its batch copied out of the caller's buffer (which the caller may reuse)."""
    header = copy.copy(entry.header)
    header.buffer = memoryview(bytes(entry.header.bytes_view()))
    header.position = 0
    return entry._replace(header=header)
