"""The cleaner's C walk (`_cclean.c`) agrees with its Python rules, the fallback when it is not
built: the same MD5 of every key, the same cleaned batches byte for byte (over seeded workloads
of every codec, several passes, tombstones gaining and passing their horizon), the same
statistics, and the same refusal of records that do not decode.
"""

from __future__ import annotations

import hashlib
import random
from types import SimpleNamespace
from typing import Any

import pytest

from diskless.compaction import MAP_BYTES_MIN, UncleanableBatch, _native
from diskless.compaction._records import records_of
from testkit.compaction import T0, Outcome, clean_log, workload

NATIVE = _native.NATIVE
assert NATIVE is not None, "diskless.compaction._cclean is not built"
RETENTION_MS = 3_600_000


def test_the_c_md5_is_md5() -> None:
    rng = random.Random(1)
    for size in [*range(130), 1000, 4096, 10_000]:
        data = rng.randbytes(size)
        assert NATIVE.md5(data) == hashlib.md5(data).digest(), size


def _cleaned(log: Any, map_bytes: int, now_ms: int) -> Outcome:
    return clean_log(
        log.batches,
        log.aborted,
        dirty_start=0,
        end=log.next_offset,
        map_bytes=map_bytes,
        now_ms=now_ms,
        delete_retention_ms=RETENTION_MS,
    )


def _both(monkeypatch: pytest.MonkeyPatch, log: Any, map_bytes: int, now_ms: int) -> None:
    native = _cleaned(log, map_bytes, now_ms)
    with monkeypatch.context() as patched:
        patched.setattr(_native, "NATIVE", None)
        python = _cleaned(log, map_bytes, now_ms)
    assert native.batches == python.batches
    assert native.aborted == python.aborted
    assert (native.passes, native.stats) == (python.passes, python.stats)


@pytest.mark.parametrize("seed", range(12))
def test_c_and_python_clean_to_the_same_bytes(monkeypatch: pytest.MonkeyPatch, seed: int) -> None:
    log = workload(seed, operations=80, keys=[4, 30, 90][seed % 3], records_max=12)
    for map_bytes in (1 << 20, MAP_BYTES_MIN):
        _both(monkeypatch, log, map_bytes, T0 + 60_000)
        cleaned = _cleaned(log, map_bytes, T0 + 60_000)
        again = SimpleNamespace(
            batches=cleaned.batches, aborted=cleaned.aborted, next_offset=log.next_offset
        )
        _both(monkeypatch, again, map_bytes, T0 + 60_000 + RETENTION_MS)  # past the horizons


def _uncompressed_section(seed: int) -> tuple[Any, bytes]:
    log = workload(seed, operations=10, keys=5, records_max=8, codec=0)
    data = max(log.batches, key=len)
    header = SimpleNamespace(
        base_offset=int.from_bytes(data[:8], "big"),
        records_count=int.from_bytes(data[57:61], "big"),
    )
    return header, data[61:]


@pytest.mark.parametrize("seed", range(4))
def test_c_and_python_refuse_the_same_broken_records(seed: int) -> None:
    rng = random.Random(seed)
    header, section = _uncompressed_section(seed)
    table = bytearray(MAP_BYTES_MIN)
    refused = 0
    for _ in range(400):
        broken = bytearray(section)
        for _ in range(rng.randint(1, 3)):
            broken[rng.randrange(len(broken))] = rng.randrange(256)
        if rng.random() < 0.2:
            broken = broken[: rng.randrange(len(broken))]
        try:
            python = [
                (r.start, r.end, r.offset_delta, r.has_value) for r in records_of(header, broken)
            ]
        except UncleanableBatch:
            python = None
        try:
            spans, *_ = NATIVE.filter_records(
                broken, header.records_count, header.base_offset, -(1 << 62), table, 61, True
            )
        except ValueError:
            assert python is None, bytes(broken).hex()
            refused += 1
            continue
        assert python is not None, bytes(broken).hex()
        assert len(spans) // _native.SPAN_BYTES == len(python)
    assert refused > 0
