"""The read-back audit: one partition's records against its acknowledged batches.

For each partition, every acknowledged record must be present exactly once at its acknowledged
offset (same producer, same producer sequence, same value), offsets must run contiguously from
the log start to the high watermark, no (producer, sequence) may appear twice, and each producer's
records must appear in its sequence order. Records present but never acknowledged (a request
that timed out after its batch was committed) are counted, not failed: Kafka allows them.

`check_partition` is a pure function so that tests can tamper with its inputs.
"""

from __future__ import annotations

import itertools
from collections import Counter
from collections.abc import Iterable, Sequence
from typing import Final, NamedTuple

import msgspec

from diskless import TopicPartition

PROBLEMS_KEPT_MAX: Final = 5


class ExpectedBatch(NamedTuple):
    """An acknowledged batch: its records sit at base_offset .. base_offset + records - 1."""

    base_offset: int
    records: int
    producer_id: int
    producer_seq: int
    value_bytes: int
    wire_producer_id: int = -1
    """The producer id in the batch header (-1: the same as `producer_id`)."""
    visible: bool = True
    """Whether read_committed must show it: idempotent, or its transaction committed."""
    transactional: bool = False
    outcome_known: bool = True
    """False when ending its transaction failed: read_committed may then show it or not."""


class ReadRecord(NamedTuple):
    """One record read back: its offset, its batch's producer id, and its key and value."""

    offset: int
    batch_producer_id: int
    key_producer_id: int
    key_seq: int
    value_bytes: int
    value_ok: bool
    """Whether the value is the deterministic filler of its sequence."""
    transactional: bool = False


class Marker(NamedTuple):
    """A transaction marker (control batch) read back."""

    offset: int
    producer_id: int
    commit: bool


class PartitionVerdict(msgspec.Struct, kw_only=True):
    topic: str
    partition: int
    expected_records: int
    read_records: int
    read_bytes: int
    log_start_offset: int
    high_watermark: int
    missing: int = 0
    mismatched: int = 0
    duplicate_offsets: int = 0
    duplicate_records: int = 0
    gaps: int = 0
    order_violations: int = 0
    overlapping_acks: int = 0
    unacknowledged_present: int = 0
    markers: int = 0
    committed_expected: int = 0
    committed_read: int = 0
    committed_missing: int = 0
    committed_extra: int = 0
    """read_committed showed a record of an aborted transaction or one never acknowledged."""
    read_errors: int = 0
    problems: list[str] = msgspec.field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not (
            self.missing
            or self.mismatched
            or self.duplicate_offsets
            or self.duplicate_records
            or self.gaps
            or self.order_violations
            or self.overlapping_acks
            or self.committed_missing
            or self.committed_extra
            or self.read_errors
        )

    def note(self, problem: str) -> None:
        if len(self.problems) < PROBLEMS_KEPT_MAX:
            self.problems.append(problem)


def check_partition(
    tp: TopicPartition,
    expected: Iterable[ExpectedBatch],
    records: list[ReadRecord],
    log_start_offset: int,
    high_watermark: int,
    read_bytes: int = 0,
    read_errors: int = 0,
    markers: Sequence[Marker] = (),
    committed: list[ReadRecord] | None = None,
) -> PartitionVerdict:
    """Audit one partition's read-back records against its acknowledged batches.

    `records` and `markers` come from a read_uncommitted read; `committed`, when given, is what
    a read_committed read showed after Kafka's client-side filtering of aborted transactions.
    """
    verdict = PartitionVerdict(
        topic=tp.topic,
        partition=tp.partition,
        expected_records=0,
        read_records=len(records),
        read_bytes=read_bytes,
        log_start_offset=log_start_offset,
        high_watermark=high_watermark,
        read_errors=read_errors,
    )
    if read_errors:
        verdict.note(f"{read_errors} fetch errors")
    # What the acks promise, offset by offset.
    promised: dict[int, tuple[int, int, int, int]] = {}
    visible: set[int] = set()
    unknown: set[int] = set()
    for batch in expected:
        wire = batch.wire_producer_id if batch.wire_producer_id >= 0 else batch.producer_id
        for i in range(batch.records):
            offset = batch.base_offset + i
            if offset in promised:
                verdict.overlapping_acks += 1
                verdict.note(f"offset {offset} acknowledged twice")
            promised[offset] = (batch.producer_id, batch.producer_seq + i, batch.value_bytes, wire)
            if not batch.outcome_known:
                unknown.add(offset)
            elif batch.visible:
                visible.add(offset)
    verdict.expected_records = len(promised)
    verdict.markers = len(markers)

    by_offset: dict[int, ReadRecord] = {}
    for record in records:
        if record.offset in by_offset:
            verdict.duplicate_offsets += 1
            verdict.note(f"offset {record.offset} read twice")
        by_offset[record.offset] = record
    # Contiguity: exactly the offsets [log start, high watermark), each once (markers included).
    for marker in markers:
        if marker.offset in by_offset:
            verdict.duplicate_offsets += 1
            verdict.note(f"offset {marker.offset} holds a record and a marker")
    present = sorted(set(by_offset) | {m.offset for m in markers})
    if present and (present[0] != log_start_offset or present[-1] != high_watermark - 1):
        verdict.gaps += 1
        verdict.note(
            f"read offsets {present[0]}..{present[-1]}, log is "
            f"{log_start_offset}..{high_watermark - 1}"
        )
    if not present and high_watermark > log_start_offset:
        verdict.gaps += 1
        verdict.note(f"nothing read, log is {log_start_offset}..{high_watermark - 1}")
    for previous, current in itertools.pairwise(present):
        if current != previous + 1:
            verdict.gaps += 1
            verdict.note(f"gap between offsets {previous} and {current}")

    for offset, (producer_id, seq, value_bytes, wire) in promised.items():
        found = by_offset.get(offset)
        if found is None:
            verdict.missing += 1
            verdict.note(f"acknowledged offset {offset} (producer {producer_id} #{seq}) missing")
        elif (
            found.batch_producer_id != wire
            or found.key_producer_id != producer_id
            or found.key_seq != seq
            or found.value_bytes != value_bytes
            or not found.value_ok
        ):
            verdict.mismatched += 1
            verdict.note(
                f"offset {offset}: expected producer {producer_id} #{seq}, read producer "
                f"{found.key_producer_id} #{found.key_seq} (value ok: {found.value_ok})"
            )
    verdict.unacknowledged_present = sum(1 for offset in by_offset if offset not in promised)

    identities = Counter((r.key_producer_id, r.key_seq) for r in by_offset.values())
    for (producer_id, seq), count in identities.items():
        if count > 1:
            verdict.duplicate_records += count - 1
            verdict.note(f"producer {producer_id} #{seq} stored {count} times")
    last_seq: dict[int, int] = {}
    for offset in sorted(by_offset):
        record = by_offset[offset]
        previous_seq = last_seq.get(record.key_producer_id)
        if previous_seq is not None and record.key_seq <= previous_seq:
            verdict.order_violations += 1
            verdict.note(
                f"offset {offset}: producer {record.key_producer_id} #{record.key_seq} "
                f"after #{previous_seq}"
            )
        last_seq[record.key_producer_id] = record.key_seq
    if committed is not None:
        _check_committed(
            verdict, [r for r in committed if r.offset not in unknown], visible, by_offset
        )
    return verdict


def _check_committed(
    verdict: PartitionVerdict,
    committed: list[ReadRecord],
    visible: set[int],
    uncommitted: dict[int, ReadRecord],
) -> None:
    """read_committed must show exactly the acknowledged idempotent and committed records."""
    shown = {r.offset: r for r in committed}
    verdict.committed_expected = len(visible)
    verdict.committed_read = len(shown)
    for offset in sorted(visible - shown.keys()):
        verdict.committed_missing += 1
        verdict.note(f"read_committed misses acknowledged committed offset {offset}")
    for offset in sorted(shown.keys() - visible):
        record = uncommitted.get(offset)
        if record is not None and not record.transactional and offset not in visible:
            # an unacknowledged idempotent record (a timed-out request that did commit)
            continue
        verdict.committed_extra += 1
        verdict.note(f"read_committed shows offset {offset}, aborted or never acknowledged")
