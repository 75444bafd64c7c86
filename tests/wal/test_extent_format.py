"""Unit: the consolidated object format round-trips, its index finds every offset and timestamp,
and corruption is refused (batches built by kafka-python, an independent codec)."""

from __future__ import annotations

import random

import pytest

from diskless._types import TopicPartition
from diskless.records import set_base_offset, split_batches
from diskless.wal import (
    EXTENT_TRAILER_SIZE,
    ExtentFormatError,
    decode_extent_footer,
    encode_extent,
)
from testkit.batches import build_batch, records_of

TP = TopicPartition("t", 3)


def _batches(count: int, seed: int, first_offset: int = 100) -> list[bytes]:
    rng = random.Random(seed)
    out = []
    offset = first_offset
    for i in range(count):
        n = rng.randint(1, 5)
        batch = bytearray(
            build_batch(
                [rng.randbytes(rng.randint(1, 3000)) for _ in range(n)],
                timestamp_ms=1_000 + rng.randint(0, 500) + i,
            )
        )
        set_base_offset(batch, offset)
        offset += n
        out.append(bytes(batch))
    return out


def test_round_trip_keeps_batches_byte_exact_and_indexes_them() -> None:
    batches = _batches(200, seed=1)
    data, footer_at = encode_extent(TP, batches, index_interval_bytes=8192)
    assert data[:footer_at] == b"".join(batches)
    footer = decode_extent_footer(data[footer_at:])
    assert footer.topic_partition == TP
    assert (footer.base_offset, footer.batches_size) == (100, footer_at)
    headers = split_batches(data[:footer_at])
    assert not isinstance(headers, tuple)
    assert footer.last_offset == headers[-1].last_offset
    assert footer.max_timestamp == max(h.max_timestamp for h in headers)
    assert 1 < len(footer.entries) < len(batches)  # sparse
    assert [r.offset for r in records_of(data[:footer_at])] == list(
        range(100, footer.last_offset + 1)
    )
    starts = {h.position: h for h in headers}
    for entry in footer.entries:
        assert starts[entry.position].base_offset == entry.base_offset
    # every offset: the entry is at or before the batch holding it, within one interval
    for header in headers:
        for offset in (header.base_offset, header.last_offset):
            entry = footer.start_for_offset(offset)
            assert entry.position <= header.position < entry.position + 8192 + header.size
    # every timestamp: no batch before the entry reaches it
    for header in headers:
        entry = footer.start_for_timestamp(header.max_timestamp)
        assert all(
            h.max_timestamp < header.max_timestamp for h in headers if h.position < entry.position
        )


def test_offsets_must_be_consecutive_and_batches_whole() -> None:
    batches = _batches(3, seed=2)
    with pytest.raises(ExtentFormatError, match="offset"):
        encode_extent(TP, [batches[0], batches[2]])
    with pytest.raises(ExtentFormatError):
        encode_extent(TP, [batches[0][:-1]])
    with pytest.raises(ExtentFormatError, match="at least one"):
        encode_extent(TP, [])


def test_a_cleaned_extent_may_have_gaps_but_offsets_only_increase() -> None:
    batches = _batches(4, seed=3)
    data, footer_at = encode_extent(TP, [batches[1], batches[3]], gaps=True)
    assert data[:footer_at] == batches[1] + batches[3]
    footer = decode_extent_footer(data[footer_at:])
    headers = split_batches(data[:footer_at])
    assert not isinstance(headers, tuple)
    assert (footer.base_offset, footer.last_offset) == (
        headers[0].base_offset,
        headers[-1].last_offset,
    )
    for wrong in ([batches[3], batches[1]], [batches[1], batches[1]]):
        with pytest.raises(ExtentFormatError, match="offset"):
            encode_extent(TP, wrong, gaps=True)


@pytest.mark.parametrize(
    ("where", "match"),
    [(-1, "magic"), (-7, "version"), (-11, "CRC"), (-16, "footer length"), (0, "CRC")],
)
def test_corrupt_footers_are_refused(where: int, match: str) -> None:
    data, footer_at = encode_extent(TP, _batches(20, seed=3))
    tail = bytearray(data[footer_at:])
    tail[where] ^= 0x01
    with pytest.raises(ExtentFormatError, match=match):
        decode_extent_footer(tail)


def test_a_truncated_footer_is_refused() -> None:
    data, footer_at = encode_extent(TP, _batches(5, seed=4))
    with pytest.raises(ExtentFormatError):
        decode_extent_footer(data[footer_at + 1 :])
    with pytest.raises(ExtentFormatError):
        decode_extent_footer(data[-EXTENT_TRAILER_SIZE + 1 :])
