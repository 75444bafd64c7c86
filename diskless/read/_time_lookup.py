"""ListOffsets answers that lie in records (`TimeLookup`): the read path reads the batch the
coordinator names and walks its records, as Kafka reads the batch that holds the answer.

One batch is read per answer: the coordinator names the first row whose largest timestamp
reaches the target, and that row's first batch reaching it holds a record that does (its
maxTimestamp is its largest record timestamp). Only when the log start cuts that batch may its
kept records all be earlier, and the next batch reaching the target is read too. Rows whose
records the metadata already gives are not read: a marker (one record, synthesized) and a batch
of a LogAppendTime topic (every record carries the append time).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable

from diskless._types import ErrorCode, TimestampType
from diskless.coordinator import BatchInfo, ListOffsetsResponse, TimeLookup
from diskless.read._batches import CorruptBatch, as_served
from diskless.read._extents import ExtentReader
from diskless.records import InvalidBatch, first_record_reaching, parse_batch

ReadBatch = Callable[[BatchInfo], Awaitable[memoryview]]
"""The stored bytes of a batch row (raises StorageError)."""


class TimeLookups:
    """Resolves `TimeLookup`s through the reader's own reads (caches included)."""

    def __init__(self, read_batch: ReadBatch, extents: ExtentReader) -> None:
        self._read_batch = read_batch
        self._extents = extents
        self._batches_read = 0

    @property
    def batches_read(self) -> int:
        """Batches whose records a lookup walked, inside extents too (markers and LogAppendTime
        rows need none)."""
        return self._batches_read + self._extents.lookup_batches_read

    async def resolve(self, response: ListOffsetsResponse) -> ListOffsetsResponse:
        """The answer `response.lookup` describes. Raises CorruptBatch or StorageError."""
        lookup = response.lookup
        assert lookup is not None, response
        for i, info in enumerate(lookup.batches):
            found = await self._in_row(info, lookup)
            if found is None:
                if i == 0 and info.base_offset >= lookup.start_offset:
                    # Its largest timestamp reaches the target, so one of its records must.
                    raise CorruptBatch(f"no record of {info} reaches timestamp {lookup.target}")
                continue
            offset, timestamp = found
            if offset >= lookup.end_offset:
                return ListOffsetsResponse(ErrorCode.NONE)  # Kafka filters what it found
            return ListOffsetsResponse(ErrorCode.NONE, offset, timestamp)
        return ListOffsetsResponse(response.error, response.offset, response.timestamp)

    async def _in_row(self, info: BatchInfo, lookup: TimeLookup) -> tuple[int, int] | None:
        start, target = lookup.start_offset, lookup.target
        if info.extent is not None:
            return await self._extents.find_record(info, start, target)
        if info.control is None and info.timestamp_type == TimestampType.LOG_APPEND_TIME:
            if info.log_append_time < target or info.last_offset < start:
                return None
            return max(start, info.base_offset), info.log_append_time
        stored: memoryview | None = None
        if info.control is None:
            stored = await self._read_batch(info)
            self._batches_read += 1
        served = as_served(info, stored)  # checked; a marker synthesized
        header = parse_batch(served)
        assert not isinstance(header, InvalidBatch), header  # as_served checked it
        found = first_record_reaching(header, offset=start, timestamp=target)
        if isinstance(found, InvalidBatch):
            where = f"{info.object_key} [{info.byte_offset}, {info.byte_offset + info.size})"
            raise CorruptBatch(f"{where}: {found.message}")
        return found
