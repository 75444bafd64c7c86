"""The virtual clock wakes sleepers in deadline order and only when time is moved."""

from __future__ import annotations

import asyncio

from diskless import ManualClock, SystemClock


async def test_sleepers_wake_in_deadline_order_then_arrival_order() -> None:
    clock = ManualClock(start_ms=0)
    woken: list[tuple[str, int]] = []

    async def sleeper(name: str, seconds: float) -> None:
        await clock.sleep(seconds)
        woken.append((name, clock.now_ms()))

    tasks = [
        asyncio.create_task(sleeper(name, seconds))
        for name, seconds in [("late", 2.0), ("early", 1.0), ("tie-a", 1.5), ("tie-b", 1.5)]
    ]
    await clock.advance(1.2)
    assert woken == [("early", 1000)]
    await clock.advance(10.0)
    assert woken == [("early", 1000), ("tie-a", 1500), ("tie-b", 1500), ("late", 2000)]
    assert clock.now_ms() == 11_200
    await asyncio.gather(*tasks)


async def test_time_does_not_move_by_itself() -> None:
    clock = ManualClock(start_ms=5_000)
    task = asyncio.create_task(clock.sleep(0.5))
    for _ in range(20):
        await asyncio.sleep(0)
    assert not task.done()
    assert clock.now_ms() == 5_000
    await clock.advance(0.5)
    assert task.done()


async def test_cancelled_sleepers_are_skipped() -> None:
    clock = ManualClock(start_ms=0)
    cancelled = asyncio.create_task(clock.sleep(1.0))
    kept = asyncio.create_task(clock.sleep(2.0))
    await asyncio.sleep(0)
    cancelled.cancel()
    await asyncio.gather(cancelled, return_exceptions=True)
    assert clock.next_deadline() == 2.0
    await clock.run_until_idle()
    assert kept.done() and clock.now_ms() == 2_000


async def test_chained_sleeps_run_until_idle() -> None:
    clock = ManualClock(start_ms=0)
    ticks: list[int] = []

    async def ticker() -> None:
        for _ in range(5):
            await clock.sleep(0.25)
            ticks.append(clock.now_ms())

    task = asyncio.create_task(ticker())
    await clock.run_until_idle()
    assert ticks == [250, 500, 750, 1000, 1250]
    await task


async def test_system_clock_is_monotonic_and_sleeps() -> None:
    clock = SystemClock()
    before = clock.monotonic()
    await clock.sleep(0.001)
    assert clock.monotonic() >= before
    assert clock.now_ms() > 1_600_000_000_000
