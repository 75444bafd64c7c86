"""Property: a cleaned partition, read back by kafka-python, equals the model of Kafka's cleaner.

Seeded keyed workloads (updates, tombstones, idempotent batches, transactions of versions 1 and 2
that commit or abort, every codec) are cleaned up to a cleanable point, then cleaned again as
time passes, and each time kafka-python decodes the log (every CRC checked):
- below the cleanable point, exactly the latest committed record of each key is left, at its
  own offset, with its own timestamp, key, value and headers; no aborted record is left;
- from the cleanable point on, every batch is the bytes it was;
- a tombstone stays, in a batch carrying KIP-534's delete horizon (attribute bit 6, the horizon
  in baseTimestamp, set at the first cleaning to now + delete.retention.ms), until a cleaning at
  or past its horizon, and then goes;
- every batch keeps its base and last offset, producer id, epoch, base sequence and flags, and
  its codec while it has records; each producer's last batch stays, emptied if need be;
- every transactional batch left is followed by its marker, every marker left has a batch of its
  transaction before it (or is its producer's last entry, or ends the cleaned range) once the
  markers' own horizons have passed, and every aborted index entry left has its marker.
A map smaller than the keys cleans in several passes to the same records, and the map and one
batch are all the memory a pass holds.
"""

from __future__ import annotations

import tracemalloc
from collections.abc import Sequence

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from diskless.compaction import (
    MAP_BYTES_MIN,
    LastRecord,
    OffsetMap,
    build_offset_map,
    clean,
    last_records_of,
)
from diskless.records import DELETE_HORIZON_BIT
from testkit.compaction import (
    T0,
    Aborted,
    Log,
    Read,
    Written,
    clean_log,
    headers_of,
    read_data,
    workload,
)
from testkit.oracle import CODECS, oracle

PROPERTY = settings(
    max_examples=30,
    deadline=None,
    print_blob=True,
    suppress_health_check=[HealthCheck.too_slow],
)
RETENTION_MS = 86_400_000
NOW = T0 + 3_600_000
MAP_BYTES = 1 << 20
CODEC_IDS = {name: code for name, (code, available) in CODECS.items() if available()}
assert len(CODEC_IDS) == 5, "every codec must be available to kafka-python here"


def _as_read(written: Written) -> Read:
    return Read(written.offset, written.timestamp, written.key, written.value, written.headers)


def _expected(log: Log, end: int, *, tombstones: bool) -> list[Read]:
    """The model: below `end`, the latest committed record of each key (tombstones only while
    within their horizon); from `end` on, every record written."""
    latest: dict[bytes, int] = {}
    for written in log.written:
        if written.offset < end and not written.aborted:
            latest[written.key] = written.offset
    return [
        _as_read(w)
        for w in log.written
        if w.offset >= end
        or (not w.aborted and latest[w.key] == w.offset and (tombstones or w.value is not None))
    ]


def _cut(log: Log, fraction: float) -> int:
    """A batch boundary about `fraction` of the way through the log."""
    headers = headers_of(log.batches)
    index = min(len(headers) - 1, int(len(headers) * fraction))
    return headers[index].last_offset + 1


def _check_batches(original: Log, batches: Sequence[bytes], end: int) -> None:
    """Offsets, producer fields, codecs and the bytes past `end` are the original's."""
    before = {h.base_offset: h for h in headers_of(original.batches)}
    raw = {
        h.base_offset: b
        for h, b in zip(headers_of(original.batches), original.batches, strict=True)
    }
    previous = -1
    for data, header in zip(batches, headers_of(batches), strict=True):
        first = before[header.base_offset]
        assert oracle(data).validate_crc()
        assert header.base_offset > previous
        previous = header.last_offset
        assert header.last_offset == first.last_offset
        assert (header.producer_id, header.producer_epoch, header.base_sequence) == (
            first.producer_id,
            first.producer_epoch,
            first.base_sequence,
        )
        assert (header.is_transactional, header.is_control) == (
            first.is_transactional,
            first.is_control,
        )
        assert header.compression == (
            original.codec_of[header.base_offset] if header.records_count else 0
        )
        if header.base_offset >= end:
            assert data == raw[header.base_offset]


def _check_horizons(batches: Sequence[bytes], end: int, horizon: int) -> None:
    """A cleaned data batch holding a tombstone carries `horizon`, the only horizon set."""
    for data, header in zip(batches, headers_of(batches), strict=True):
        if header.base_offset >= end or header.is_control:
            continue
        if any(record.value is None for record in oracle(data)):
            assert header.attributes & DELETE_HORIZON_BIT
        if header.attributes & DELETE_HORIZON_BIT:  # it held a tombstone at a first cleaning
            assert header.base_timestamp == horizon


def _check_producers(batches: Sequence[bytes], last: dict[int, LastRecord]) -> None:
    headers = headers_of(batches)
    for producer_id, record in last.items():
        if record.last_data_offset is not None:
            assert any(
                h.producer_id == producer_id and h.last_offset == record.last_data_offset
                for h in headers
            ), producer_id
        else:
            assert any(
                h.producer_id == producer_id
                and h.is_control
                and h.producer_epoch == record.producer_epoch
                for h in headers
            ), producer_id


def _check_transactions(
    batches: Sequence[bytes],
    aborted: Sequence[Aborted],
    now: int,
    end: int,
    *,
    settled: bool = False,
) -> None:
    """Each transactional batch left meets its marker; a marker left alone carries a horizon
    still ahead of `now` (once past it, its record goes); when `settled` (every horizon has
    passed), no marker below `end` is left alone; each aborted index entry left has its marker."""
    headers = headers_of(batches)
    open_batches: dict[int, int] = {}
    markers = {h.last_offset for h in headers if h.is_control and h.records_count}
    for header in headers:
        if header.is_control:
            had_batches = open_batches.pop(header.producer_id, 0)
            if header.records_count and header.attributes & DELETE_HORIZON_BIT:
                assert header.base_timestamp > now and not had_batches, header
            if settled and header.records_count and header.base_offset < end:
                assert had_batches, header
        elif header.is_transactional:
            open_batches[header.producer_id] = open_batches.get(header.producer_id, 0) + 1
    assert not open_batches, "a transactional batch without its marker"
    assert all(entry.last_offset in markers for entry in aborted)


def _rounds(log: Log, end: int, map_bytes: int = MAP_BYTES) -> None:
    last = last_records_of(headers_of(log.batches))
    first = clean_log(
        log.batches,
        log.aborted,
        dirty_start=0,
        end=end,
        map_bytes=map_bytes,
        now_ms=NOW,
        delete_retention_ms=RETENTION_MS,
    )
    assert read_data(first.batches) == _expected(log, end, tombstones=True)
    assert not [
        w
        for w in log.written
        if w.aborted and w.offset < end and _as_read(w) in read_data(first.batches)
    ]
    _check_batches(log, first.batches, end)
    _check_horizons(first.batches, end, NOW + RETENTION_MS)
    _check_producers(first.batches, last)
    _check_transactions(first.batches, first.aborted, NOW, end)

    # Nothing dirty, the horizon one millisecond ahead: every tombstone stays.
    second = clean_log(
        first.batches,
        first.aborted,
        dirty_start=end,
        end=end,
        map_bytes=map_bytes,
        now_ms=NOW + RETENTION_MS - 1,
        delete_retention_ms=RETENTION_MS,
        last_records=last,
    )
    assert read_data(second.batches) == read_data(first.batches)

    # At the horizon the tombstones go; far past it, the markers found alone go too.
    state = second
    for now in (NOW + RETENTION_MS, NOW + 10 * RETENTION_MS, NOW + 20 * RETENTION_MS):
        state = clean_log(
            state.batches,
            state.aborted,
            dirty_start=end,
            end=end,
            map_bytes=map_bytes,
            now_ms=now,
            delete_retention_ms=RETENTION_MS,
            last_records=last,
        )
        assert read_data(state.batches) == _expected(log, end, tombstones=False)
        _check_batches(log, state.batches, end)
        _check_producers(state.batches, last)
        _check_transactions(
            state.batches, state.aborted, now, end, settled=now >= NOW + 20 * RETENTION_MS
        )


@PROPERTY
@given(
    seed=st.integers(0, 2**32 - 1),
    keys=st.integers(1, 30),
    fraction=st.floats(0.2, 1.0),
)
def test_a_cleaned_log_reads_as_the_model(seed: int, keys: int, fraction: float) -> None:
    print(f"seed={seed} keys={keys} fraction={fraction}")
    log = workload(seed, operations=50, keys=keys)
    _rounds(log, _cut(log, fraction))


@pytest.mark.parametrize("codec", sorted(CODEC_IDS))
@pytest.mark.seeds(3)
def test_every_codec_is_kept_and_read_back(codec: str, seed: int) -> None:
    print(f"seed={seed}")
    log = workload(seed, operations=40, keys=8, codec=CODEC_IDS[codec])
    _rounds(log, log.next_offset)
    cleaned = clean_log(
        log.batches,
        log.aborted,
        dirty_start=0,
        end=log.next_offset,
        map_bytes=MAP_BYTES,
        now_ms=NOW,
        delete_retention_ms=RETENTION_MS,
    )
    written = set(log.batches)
    rebuilt = [h for h in headers_of([b for b in cleaned.batches if b not in written])]
    assert any(h.compression == CODEC_IDS[codec] and h.records_count for h in rebuilt)


@settings(PROPERTY, max_examples=10)
@given(seed=st.integers(0, 2**32 - 1), keys=st.integers(60, 300))
def test_a_small_map_cleans_in_several_passes_to_the_same_records(seed: int, keys: int) -> None:
    print(f"seed={seed} keys={keys}")
    log = workload(seed, operations=120, keys=keys)
    end = log.next_offset
    whole = clean_log(
        log.batches,
        log.aborted,
        dirty_start=0,
        end=end,
        map_bytes=MAP_BYTES,
        now_ms=NOW,
        delete_retention_ms=RETENTION_MS,
    )
    small = clean_log(
        log.batches,
        log.aborted,
        dirty_start=0,
        end=end,
        map_bytes=MAP_BYTES_MIN,
        now_ms=NOW,
        delete_retention_ms=RETENTION_MS,
    )
    distinct = {w.key for w in log.written if not w.aborted}
    entries_max = OffsetMap(MAP_BYTES_MIN).entries_max
    assert whole.passes == 1
    assert small.passes >= -(-len(distinct) // entries_max)
    assert (
        read_data(small.batches) == read_data(whole.batches) == _expected(log, end, tombstones=True)
    )
    _check_batches(log, small.batches, end)
    _rounds(log, end, map_bytes=MAP_BYTES_MIN)


def test_a_pass_holds_the_map_and_one_batch() -> None:
    """tracemalloc over the passes of a 64 KiB map over a 0.5 MB log: the peak beyond the map stays
    within a few times the largest batch, below the log's own size."""
    log = workload(7, operations=1200, keys=3000, records_max=40, codec=CODEC_IDS["zstd"])
    largest = max(len(b) for b in log.batches)
    decompressed = max(sum(len(r.value or b"") + 64 for r in oracle(b)) for b in log.batches)
    last = last_records_of(headers_of(log.batches))
    map_bytes = 64 * 1024
    offset_map = OffsetMap(map_bytes)
    tracemalloc.start()
    try:
        tracemalloc.reset_peak()
        baseline = tracemalloc.get_traced_memory()[0]
        start = 0
        passes = 0
        while start < log.next_offset:
            outcome = build_offset_map(
                iter(log.batches),
                start=start,
                end=log.next_offset,
                offset_map=offset_map,
                aborted=log.aborted,
            )
            for _ in clean(
                (b for b in log.batches if int.from_bytes(b[:8]) < outcome.mapped_end),
                offset_map=offset_map,
                now_ms=NOW,
                delete_retention_ms=RETENTION_MS,
                aborted=log.aborted,
                last_records=last,
                upper_bound=log.next_offset,
            ):
                pass
            start = outcome.mapped_end
            passes += 1
        peak = tracemalloc.get_traced_memory()[1] - baseline
    finally:
        tracemalloc.stop()
    total = sum(len(b) for b in log.batches)
    print(
        f"{passes} passes over {total} bytes; peak {peak} bytes beyond the map, "
        f"largest batch {largest} bytes ({decompressed} decompressed)"
    )
    assert passes > 1
    assert peak <= 8 * (decompressed + largest) + 256 * 1024
    assert peak < total
