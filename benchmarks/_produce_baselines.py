"""What `bench_produce` measures the WalWriter against, on the same batches in the same process.

- `raw_throughput`: the batches concatenated into buffer-sized objects and PUT, one after the
  other: the bytes' own cost, the most any writer could reach.
- `ceiling_throughput`: the requests of the WalWriter's run, each a future its producer awaits,
  their batches concatenated and PUT in the same objects, and nothing else (no admission,
  deadlines, commit or answers): the most a pipeline that answers each request with its own
  future, and concatenates on its event loop, can reach on this interpreter.
- `set_memory_regime` and `warm_heap`: the kind of memory every side's buffers come from.

`python -m benchmarks._produce_baselines` prints what they stand on (`check`).
"""

from __future__ import annotations

import asyncio
import ctypes
import ctypes.util
import os
import random
import time
from collections.abc import Sequence
from typing import TypeVar

from diskless import TopicPartition
from diskless.records import BatchHeader, parse_batch
from diskless.storage import MemoryObjectStore
from diskless.wal import WalConfig, WalEntry
from testkit.batches import batch_builder

T = TypeVar("T")
KIB = 1024
MIB = 1024 * KIB
TOPIC = "bench"
PARTITIONS = 64

_M_TRIM_THRESHOLD = -1
_M_MMAP_THRESHOLD = -3
_WARM_MMAP_THRESHOLD = 512 * MIB
_WARM_TRIM_THRESHOLD = 1024 * MIB
"""`mallopt` takes a C int: a threshold of 2**32 or more would wrap (4 GiB became 0, which
trimmed the heap at every free and made warm rounds cold at random)."""


def set_memory_regime(warm: bool) -> bool:
    """Pin glibc's allocator so that every round sees the same kind of memory.

    cold: every segment-sized buffer is a fresh mmap whose pages fault in on first write (a
    process that keeps allocating new memory); warm: freed buffers stay in the heap and are
    reused (a long-running process in steady state; `warm_heap` fills the heap first). Left to
    itself glibc switches between the two as thresholds adapt, which made rounds differ
    several-fold. False when the C library has no `mallopt`.
    """
    name = ctypes.util.find_library("c")
    try:
        mallopt = ctypes.CDLL(name).mallopt if name else None
    except (OSError, AttributeError):
        mallopt = None
    if mallopt is None:
        return False
    mallopt.argtypes = (ctypes.c_int, ctypes.c_int)
    mmap_threshold = _WARM_MMAP_THRESHOLD if warm else 128 * KIB
    trim_threshold = _WARM_TRIM_THRESHOLD if warm else 128 * KIB
    return bool(mallopt(_M_MMAP_THRESHOLD, mmap_threshold)) and bool(
        mallopt(_M_TRIM_THRESHOLD, trim_threshold)
    )


def warm_heap(nbytes: int) -> None:
    """Fault in `nbytes` of heap and free them: in the warm regime they stay resident, so a
    round holding up to that much at once never writes a fresh page, whichever side runs first
    (a first round would otherwise grow the heap for the others)."""
    filled = bytearray(min(nbytes, _WARM_MMAP_THRESHOLD - MIB))  # zeroed: every page touched
    del filled


def build_batch(size: int, seed: int) -> bytes:
    """A valid one-record batch of about `size` bytes (kafka-python builder, random value)."""
    builder = batch_builder()
    value = random.Random(seed).randbytes(max(0, size - 72))
    builder.append(0, timestamp=1_700_000_000_000, key=None, value=value, headers=[])
    return bytes(builder.build())


def entries_for(size: int, count: int = 64) -> list[WalEntry]:
    """`count` batches of about `size` bytes, over the topic's partitions in turn."""
    out = []
    for i in range(count):
        header = parse_batch(build_batch(size, i))
        assert isinstance(header, BatchHeader)
        out.append(WalEntry(TopicPartition(TOPIC, i % PARTITIONS), header))
    return out


def batches_in(size: int, total_bytes: int, per_request: int) -> tuple[list[WalEntry], int]:
    """The batches of a run and how many of them it sends: whole requests, `total_bytes` or
    just under (one request at least)."""
    entries = entries_for(size)
    count = max(1, total_bytes // entries[0].header.size // per_request) * per_request
    return entries, count


def requests_of(items: Sequence[T], per_request: int) -> list[list[T]]:
    """The requests a run's producers send in turn: `per_request` consecutive items each,
    starting at every item (the WalWriter's run and the ceiling send the same ones)."""
    return [[items[(i + j) % len(items)] for j in range(per_request)] for i in range(len(items))]


async def raw_throughput(size: int, total_bytes: int, per_request: int) -> tuple[int, int, float]:
    """(batches, bytes, seconds) concatenating the run's batches into buffer-sized objects and
    PUTting them into a MemoryObjectStore."""
    entries, count = batches_in(size, total_bytes, per_request)
    batch_size = entries[0].header.size
    per_object = max(1, WalConfig().buffer_max_bytes // batch_size)
    store = MemoryObjectStore()
    views = [e.header.bytes_view() for e in entries]
    started = time.perf_counter()
    done = 0
    number = 0
    while done < count:
        n = min(per_object, count - done)
        await store.put(f"raw/{number:08d}", b"".join(views[i % len(views)] for i in range(n)))
        done += n
        number += 1
    elapsed = time.perf_counter() - started
    assert store.stats().bytes_in == count * batch_size, store.stats()
    return count, count * batch_size, elapsed


async def ceiling_throughput(
    size: int, total_bytes: int, per_request: int, concurrency: int
) -> tuple[int, int, float]:
    """(batches, bytes, seconds) of the WalWriter run's requests, as `concurrency` producers
    send them, through nothing but one future per request and the concatenation and PUT of
    their batches in buffer-sized objects; the futures are answered once their object is in. An
    object goes when full, or once every producer waits for it."""
    entries, count = batches_in(size, total_bytes, per_request)
    batch_size = entries[0].header.size
    views = [e.header.bytes_view() for e in entries]
    requests = requests_of(views, per_request)
    buffer_max = WalConfig().buffer_max_bytes
    store = MemoryObjectStore()
    loop = asyncio.get_running_loop()
    parts: list[memoryview] = []
    waiters: list[asyncio.Future[None]] = []
    filled = 0
    objects = 0

    async def put_object() -> None:
        nonlocal parts, waiters, filled, objects
        taken, answered = parts, waiters
        parts, waiters, filled = [], [], 0
        await store.put(f"ceiling/{objects:08d}", b"".join(taken))
        objects += 1
        for waiter in answered:
            waiter.set_result(None)

    remaining = count

    async def producer(i: int) -> None:
        nonlocal remaining, filled
        while remaining > 0:
            remaining -= per_request
            i += 1
            waiter = loop.create_future()
            parts.extend(requests[i % len(requests)])
            waiters.append(waiter)
            filled += per_request * batch_size
            if filled >= buffer_max or remaining <= 0 or len(waiters) == concurrency:
                await put_object()  # full, or the last request, or nobody left to send more
            await waiter

    started = time.perf_counter()
    await asyncio.gather(*(producer(i) for i in range(concurrency)))
    elapsed = time.perf_counter() - started
    assert store.stats().bytes_in == count * batch_size, store.stats()
    return count, count * batch_size, elapsed


def resident_bytes() -> int:
    """This process's resident set, from /proc (Linux)."""
    with open("/proc/self/statm") as statm:
        return int(statm.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def kept_after_free(nbytes: int) -> int:
    """How much of a freed, fully written buffer of `nbytes` stays resident."""
    filled = bytearray(nbytes)
    before = resident_bytes()
    del filled
    return nbytes - (before - resident_bytes())


async def check(size: int, total_bytes: int) -> None:
    """What the baselines stand on, printed: how much of a freed buffer each memory regime
    keeps resident, and a small run of raw and of the ceiling (each checks that its store holds
    every byte)."""
    for regime in ("cold", "warm"):
        if not set_memory_regime(warm=regime == "warm"):
            print(f"{regime}: no mallopt")
            continue
        kept = kept_after_free(64 * MIB)
        print(f"{regime}: {kept // MIB} MiB of a freed 64 MiB buffer kept resident")
    for name, run in (
        ("raw", raw_throughput(size, total_bytes, 1)),
        ("ceiling", ceiling_throughput(size, total_bytes, 1, 64)),
    ):
        batches, nbytes, _ = await run
        print(f"{name}: {batches} batches, {nbytes} bytes")


if __name__ == "__main__":
    asyncio.run(check(64 * KIB, 32 * MIB))
