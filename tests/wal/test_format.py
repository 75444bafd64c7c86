"""The WAL object format: byte-exact batches, the index footer and its trailer."""

from __future__ import annotations

import random
import struct

import pytest

from diskless import TopicPartition
from diskless.errors import ObjectNotFoundError
from diskless.storage import MemoryObjectStore
from diskless.wal import (
    FORMAT_VERSION,
    TRAILER_SIZE,
    SegmentIndexEntry,
    WalFormatError,
    encode_footer,
    encode_segment,
    read_footer,
    read_object_index,
)
from diskless.wal._format import TAIL_READ_BYTES
from testkit.wal import build_batch, decode_values, entry

TP_A = TopicPartition("orders", 0)
TP_B = TopicPartition("clicks", 7)


def _sample_entries() -> list[tuple[TopicPartition, bytes]]:
    return [
        (TP_A, build_batch([b"a1", b"a2"], producer_id=11, producer_epoch=2, base_sequence=40)),
        (TP_B, build_batch([b"b" * 300])),
        (TP_A, build_batch([b"a3"], producer_id=11, producer_epoch=2, base_sequence=42)),
    ]


def test_footer_round_trip_lists_every_batch_in_order() -> None:
    raw = _sample_entries()
    data, index = encode_segment([entry(tp, batch) for tp, batch in raw])

    assert read_footer(data) == index
    assert [e.topic_partition for e in index] == [TP_A, TP_B, TP_A]
    assert [e.size for e in index] == [len(batch) for _, batch in raw]
    assert index[0] == SegmentIndexEntry(
        topic="orders",
        partition=0,
        byte_offset=0,
        size=len(raw[0][1]),
        record_count=2,
        producer_id=11,
        producer_epoch=2,
        base_sequence=40,
    )
    assert index[1].producer_id == -1 and index[1].base_sequence == -1
    assert data[-6:] == b"DLWAL\x01"
    assert struct.unpack(">H", data[-8:-6]) == (FORMAT_VERSION,)


def test_batches_are_addressable_byte_exact() -> None:
    raw = _sample_entries()
    data, index = encode_segment([entry(tp, batch) for tp, batch in raw])

    for (_, batch), row in zip(raw, index, strict=True):
        chunk = data[row.byte_offset : row.byte_offset + row.size]
        assert chunk == batch
        assert decode_values(chunk)[1] == decode_values(batch)[1]
    batches_end = index[-1].byte_offset + index[-1].size
    assert data[:batches_end] == b"".join(batch for _, batch in raw)


def test_empty_segment_round_trips() -> None:
    data, index = encode_segment([])
    assert index == []
    assert read_footer(data) == []
    assert len(data) > TRAILER_SIZE


def test_footer_read_from_a_suffix() -> None:
    data, index = encode_segment([entry(tp, batch) for tp, batch in _sample_entries()])
    footer_len = struct.unpack(">I", data[-TRAILER_SIZE : -TRAILER_SIZE + 4])[0]
    suffix = data[-(TRAILER_SIZE + footer_len) :]
    assert read_footer(suffix, whole=False) == index
    with pytest.raises(WalFormatError):
        read_footer(suffix)  # as a whole object its batches would be missing


@pytest.mark.parametrize(
    "corrupt",
    [
        pytest.param(lambda d: d[:-1] + b"X", id="magic"),
        pytest.param(lambda d: d[:-8] + struct.pack(">H", 99) + d[-6:], id="version"),
        pytest.param(
            lambda d: (
                d[: -TRAILER_SIZE - 3]
                + bytes([d[-TRAILER_SIZE - 3] ^ 0x01])
                + d[-TRAILER_SIZE - 2 :]
            ),
            id="footer-bit-flip",
        ),
        pytest.param(
            lambda d: d[:-TRAILER_SIZE] + struct.pack(">I", 10**6) + d[-TRAILER_SIZE + 4 :],
            id="footer-length",
        ),
        pytest.param(lambda d: d[:10], id="truncated"),
        pytest.param(lambda d: d[:5] + d[6:], id="batch-byte-missing"),
    ],
)
def test_corrupted_footer_is_detected(corrupt: object) -> None:
    data, _ = encode_segment([entry(tp, batch) for tp, batch in _sample_entries()])
    assert callable(corrupt)
    with pytest.raises(WalFormatError):
        read_footer(corrupt(data))


def test_footer_with_valid_crc_but_gaps_is_rejected() -> None:
    rows = [("t", 0, 0, 100, 1, -1, -1, -1), ("t", 0, 150, 100, 1, -1, -1, -1)]
    data = bytes(250) + encode_footer(rows)
    with pytest.raises(WalFormatError, match="does not follow"):
        read_footer(data)


async def test_read_object_index_from_the_store() -> None:
    store = MemoryObjectStore()
    data, index = encode_segment([entry(tp, batch) for tp, batch in _sample_entries()])
    await store.put("wal/a.wal", data)

    assert await read_object_index(store, "wal/a.wal") == index
    assert await read_object_index(store, "wal/a.wal", size=len(data)) == index
    with pytest.raises(ObjectNotFoundError):
        await read_object_index(store, "wal/missing.wal")


async def test_read_object_index_of_a_large_footer_uses_a_second_read() -> None:
    rng = random.Random(7)
    raw = [
        (TopicPartition(f"topic-{i % 50}", i % 13), build_batch([rng.randbytes(8)]))
        for i in range(4000)
    ]
    data, index = encode_segment([entry(tp, batch) for tp, batch in raw])
    footer_len = struct.unpack(">I", data[-TRAILER_SIZE : -TRAILER_SIZE + 4])[0]
    assert footer_len > TAIL_READ_BYTES  # the case under test
    store = MemoryObjectStore()
    await store.put("wal/big.wal", data)
    before = store.stats()

    assert await read_object_index(store, "wal/big.wal", size=len(data)) == index
    assert store.stats().minus(before).ranged_gets == 2


async def test_read_object_index_rejects_a_non_wal_object() -> None:
    store = MemoryObjectStore()
    await store.put("wal/junk.wal", b"x" * 100)
    with pytest.raises(WalFormatError):
        await read_object_index(store, "wal/junk.wal")
