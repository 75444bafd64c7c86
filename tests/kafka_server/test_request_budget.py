"""Unit tests of the request byte budget and of the rate-limited warnings."""

from __future__ import annotations

import asyncio
import logging

import pytest

from diskless.kafka_server._server.network._log_limit import RateLimitedWarnings
from diskless.kafka_server._server.network._request_budget import RequestBudget


async def test_reservations_wait_in_arrival_order_and_cancelled_ones_step_aside() -> None:
    budget = RequestBudget(100)
    first = await budget.reserve(60)
    big = asyncio.create_task(budget.reserve(80))
    small = asyncio.create_task(budget.reserve(10))  # would fit, but waits behind `big`
    gone = asyncio.create_task(budget.reserve(30))
    await asyncio.sleep(0)
    assert budget.waiting == 3 and budget.reserved == 60 and not small.done()
    gone.cancel()
    first.release()
    first.release()  # idempotent
    granted = await big
    assert (await small).size == 10  # now it fits behind `big`; `gone` stepped aside
    assert budget.reserved == 90 and budget.waiting == 0
    granted.release()
    assert budget.reserved == 10
    with pytest.raises(asyncio.CancelledError):
        await gone


async def test_a_reservation_larger_than_the_budget_is_refused() -> None:
    with pytest.raises(ValueError, match="can never fit"):
        await RequestBudget(10).reserve(11)


async def test_warnings_beyond_the_burst_are_counted_and_reported_per_interval(
    caplog: pytest.LogCaptureFixture,
) -> None:
    now = [0.0]
    warnings = RateLimitedWarnings(
        logging.getLogger("test.limit"), interval_s=10, burst=2, what="closes", clock=lambda: now[0]
    )
    with caplog.at_level(logging.WARNING, logger="test.limit"):
        for i in range(5):
            warnings.warning("close %d", i)
        assert warnings.suppressed == 3
        now[0] = 10.0  # a new interval: the count is reported first, then the burst again
        warnings.warning("close %d", 5)
    assert [r.getMessage() for r in caplog.records] == [
        "close 0",
        "close 1",
        "3 more closes in the last 10 s were not logged one by one",
        "close 5",
    ]
    warnings.flush()
