"""Unit: RetryingObjectStore and FaultyObjectStore over the memory store, on a virtual clock."""

from __future__ import annotations

import asyncio
import random
from collections.abc import Awaitable
from typing import TypeVar

import pytest

from diskless.clock import ManualClock
from diskless.errors import (
    InvalidRangeError,
    ObjectNotFoundError,
    StorageError,
    StorageTimeoutError,
)
from diskless.storage import (
    Fault,
    FaultyObjectStore,
    MemoryObjectStore,
    RetryingObjectStore,
    StoreOp,
)

T = TypeVar("T")


async def run(clock: ManualClock, operation: Awaitable[T]) -> T:
    """Drive `operation` to completion, jumping the virtual clock over every sleep."""
    task = asyncio.ensure_future(operation)
    while not task.done():
        await clock.run_until_idle()
        await asyncio.sleep(0)
    return task.result()


def stack(
    clock: ManualClock, attempts: int = 3, timeout_s: float | None = 5.0, **faults: object
) -> tuple[MemoryObjectStore, FaultyObjectStore, RetryingObjectStore]:
    memory = MemoryObjectStore(clock=clock)
    faulty = FaultyObjectStore(memory, random.Random(1), clock=clock, **faults)  # type: ignore[arg-type]
    retrying = RetryingObjectStore(
        faulty,
        attempts=attempts,
        base_delay_s=0.1,
        max_delay_s=0.3,
        clock=clock,
        timeout_per_attempt_s=timeout_s,
        rng=random.Random(2),
    )
    return memory, faulty, retrying


async def test_retries_up_to_the_limit_then_raises_the_typed_error() -> None:
    clock = ManualClock()
    memory, faulty, retrying = stack(clock, attempts=3, put_fail_rate=1.0)
    start = clock.monotonic()
    with pytest.raises(StorageError, match="injected failure"):
        await run(clock, retrying.put("k", b"v"))
    assert faulty.injected[StoreOp.PUT, Fault.FAIL] == 3
    assert memory.stats().puts == 0
    # Two backoffs: [0.05, 0.1] then [0.1, 0.2] seconds of virtual time.
    assert 0.15 <= clock.monotonic() - start <= 0.3


async def test_a_transient_failure_is_retried_to_success() -> None:
    clock = ManualClock()
    memory, faulty, retrying = stack(clock)
    faulty.schedule(StoreOp.PUT, Fault.FAIL, Fault.FAIL)
    await run(clock, retrying.put("k", b"v"))
    assert await memory.get("k") == b"v"
    assert faulty.injected[StoreOp.PUT, Fault.FAIL] == 2


async def test_views_meet_the_same_faults_and_retries_as_ranged_gets() -> None:
    clock = ManualClock()
    memory, faulty, retrying = stack(clock)
    await memory.put("k", b"0123456789")
    faulty.schedule(StoreOp.GET, Fault.FAIL, Fault.FAIL)
    assert await run(clock, retrying.get_range_view("k", 2, 5)) == b"234"
    assert faulty.injected[StoreOp.GET, Fault.FAIL] == 2
    with pytest.raises(InvalidRangeError):
        await run(clock, retrying.get_range_view("k", 2, 11))
    assert memory.stats().ranged_gets == 2  # the good view once, the bad range not retried


async def test_backoff_doubles_within_jitter_and_is_capped() -> None:
    retrying = RetryingObjectStore(
        MemoryObjectStore(), attempts=10, base_delay_s=0.1, max_delay_s=0.5, rng=random.Random(3)
    )
    delays = [retrying.backoff_s(retry) for retry in range(1, 8)]
    ceilings = [0.1, 0.2, 0.4, 0.5, 0.5, 0.5, 0.5]
    for delay, ceiling in zip(delays, ceilings, strict=True):
        assert ceiling / 2 <= delay <= ceiling


async def test_not_found_and_bad_range_are_not_retried() -> None:
    clock = ManualClock()
    memory, _, retrying = stack(clock)
    with pytest.raises(ObjectNotFoundError):
        await run(clock, retrying.get("absent"))
    await memory.put("k", b"0123")
    with pytest.raises(InvalidRangeError):
        await run(clock, retrying.get_range("k", 2, 9))
    assert (memory.stats().gets, memory.stats().ranged_gets) == (1, 1)


async def test_bad_arguments_are_not_retried() -> None:
    clock = ManualClock()
    memory, _, retrying = stack(clock)
    with pytest.raises(ValueError):
        await run(clock, retrying.put("a//b", b"v"))
    assert memory.stats().puts == 0


async def test_a_hung_attempt_times_out_and_the_retry_succeeds() -> None:
    clock = ManualClock()
    memory, faulty, retrying = stack(clock, timeout_s=1.0, slow_latency_s=60.0)
    faulty.schedule(StoreOp.PUT, Fault.SLOW)
    start = clock.monotonic()
    await run(clock, retrying.put("k", b"v"))
    assert await memory.get("k") == b"v"
    assert memory.stats().puts == 1  # the slow attempt was cancelled before it stored anything
    assert 1.05 <= clock.monotonic() - start <= 1.1 + 1e-9


async def test_every_attempt_timing_out_raises_storage_timeout() -> None:
    clock = ManualClock()
    memory, _, retrying = stack(clock, attempts=2, timeout_s=1.0, slow_rate=1.0, slow_latency_s=5.0)
    with pytest.raises(StorageTimeoutError):
        await run(clock, retrying.get("k"))
    assert memory.stats().gets == 0
    await asyncio.sleep(0)
    assert clock.next_deadline() is None  # no sleeper leaked by the cancelled attempts


async def test_lost_ack_put_stores_the_object_but_reports_failure() -> None:
    clock = ManualClock()
    memory, faulty, retrying = stack(clock)
    faulty.schedule(StoreOp.PUT, Fault.LOST_ACK)
    with pytest.raises(StorageError, match="lost ack"):
        await faulty.put("k", b"v")
    assert await memory.get("k") == b"v"
    faulty.schedule(StoreOp.PUT, Fault.LOST_ACK)
    await run(clock, retrying.put("k2", b"w"))  # the retry rewrites the same bytes
    assert await memory.get("k2") == b"w"
    assert memory.stats().puts == 3


async def test_failed_operations_leave_the_store_untouched() -> None:
    memory = MemoryObjectStore()
    faulty = FaultyObjectStore(memory, random.Random(0))
    await memory.put("k", b"v")
    faulty.schedule(StoreOp.PUT, Fault.FAIL)
    faulty.schedule(StoreOp.DELETE, Fault.FAIL)
    faulty.schedule(StoreOp.GET, Fault.FAIL, Fault.FAIL)
    faulty.schedule(StoreOp.LIST, Fault.FAIL)
    with pytest.raises(StorageError):
        await faulty.put("new", b"x")
    with pytest.raises(StorageError):
        await faulty.delete_many(["k"])
    with pytest.raises(StorageError):
        await faulty.get("k")
    with pytest.raises(StorageError):
        await faulty.get_range("k", 0, 1)
    with pytest.raises(StorageError):
        await faulty.list_page("")
    assert [o.key for o in (await memory.list_page("")).objects] == ["k"]
    assert await faulty.get("k") == b"v"  # the schedule is used up: back to normal


async def test_fixed_latency_delays_every_operation_on_the_clock() -> None:
    clock = ManualClock()
    faulty = FaultyObjectStore(MemoryObjectStore(), random.Random(0), clock=clock, latency_s=0.1)
    put = asyncio.ensure_future(faulty.put("k", b"v"))
    await clock.advance(0.099)
    assert not put.done()
    await clock.advance(0.002)
    assert put.done()
    await put
    get = asyncio.ensure_future(faulty.get("k"))
    await clock.advance(0.1)
    assert await get == b"v"


def fault_trace(seed: int) -> list[str]:
    """The outcome of a fixed workload under random faults, with all sleeps run."""

    async def workload() -> list[str]:
        clock = ManualClock(start_ms=0)  # not the wall clock's second, which two runs may not share
        faulty = FaultyObjectStore(
            MemoryObjectStore(clock=clock),
            random.Random(seed),
            clock=clock,
            latency_s=lambda rng: rng.expovariate(20.0),
            put_fail_rate=0.2,
            put_lost_ack_rate=0.2,
            get_fail_rate=0.3,
            slow_rate=0.2,
        )
        trace: list[str] = []
        for i in range(40):
            for operation in (faulty.put(f"k{i % 7}", b"x"), faulty.get(f"k{i % 5}")):
                try:
                    await run(clock, operation)
                    trace.append("ok")
                except StorageError as exc:
                    trace.append(type(exc).__name__)
            trace.append(f"{clock.monotonic():.6f}")
        return trace

    return asyncio.run(workload())


def test_faults_replay_exactly_with_the_same_seed() -> None:
    first, again, other = fault_trace(11), fault_trace(11), fault_trace(12)
    assert first == again
    assert first != other
    assert {"ok", "InjectedFaultError", "ObjectNotFoundError"} <= set(first)


def test_faulty_store_validates_its_configuration() -> None:
    with pytest.raises(ValueError):
        FaultyObjectStore(MemoryObjectStore(), random.Random(0), put_fail_rate=1.5)
    with pytest.raises(ValueError):
        FaultyObjectStore(
            MemoryObjectStore(), random.Random(0), put_fail_rate=0.6, put_lost_ack_rate=0.6
        )
    with pytest.raises(ValueError):
        FaultyObjectStore(MemoryObjectStore(), random.Random(0)).schedule(
            StoreOp.GET, Fault.LOST_ACK
        )


def test_retrying_store_validates_its_configuration() -> None:
    with pytest.raises(ValueError):
        RetryingObjectStore(MemoryObjectStore(), attempts=0)
    with pytest.raises(ValueError):
        RetryingObjectStore(MemoryObjectStore(), base_delay_s=1.0, max_delay_s=0.5)
    with pytest.raises(ValueError):
        RetryingObjectStore(MemoryObjectStore(), timeout_per_attempt_s=0)


async def test_wrappers_report_the_inner_stores_counters() -> None:
    clock = ManualClock()
    memory, faulty, retrying = stack(clock)
    faulty.schedule(StoreOp.PUT, Fault.LOST_ACK)
    await run(clock, retrying.put("k", b"abc"))
    assert retrying.stats() == faulty.stats() == memory.stats()
    assert (memory.stats().puts, memory.stats().bytes_in) == (2, 6)


async def test_memory_store_stamps_objects_with_its_clock() -> None:
    clock = ManualClock(start_ms=1_000)
    memory = MemoryObjectStore(clock=clock)
    await memory.put("a", b"1")
    await clock.advance(2.5)
    await memory.put("b", b"2")
    assert [o.last_modified_ms for o in (await memory.list_page("")).objects] == [1_000, 3_500]
