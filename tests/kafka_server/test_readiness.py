"""`Readiness` answers from the checks' last outcomes at once, and a check in flight past its
bound is the answer, whatever the call it waits on (unit tests, an injected clock)."""

from __future__ import annotations

import asyncio

from diskless._object_keys import is_probe_key, new_object_key, object_key_time_ms, probe_key
from diskless.kafka_server._server.metrics.readiness import Check, Readiness


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


async def _settle() -> None:
    for _ in range(5):
        await asyncio.sleep(0)


async def test_a_call_in_flight_past_the_bound_is_the_reason() -> None:
    clock = Clock()
    answer = asyncio.Event()
    outcome: list[str | None] = [None]

    async def call() -> str | None:
        await answer.wait()
        return outcome[0]

    readiness = Readiness([Check("the coordinator", call, 0.05, 0.05)], bound_s=2.0, clock=clock)
    assert readiness.reason() == "the coordinator has not been checked yet"
    readiness.start()
    await _settle()
    assert readiness.reason() == "the coordinator has not been checked yet"
    answer.set()
    await _settle()
    assert readiness.reason() is None
    answer.clear()
    outcome[0] = "the coordinator does not answer: refused"
    clock.now += 1.0  # the next call starts, and waits
    await asyncio.sleep(0.3)
    assert readiness.reason() is None  # in flight, within its bound: the last outcome holds
    clock.now += 2.5
    assert readiness.reason() == "the coordinator has not answered for 2.5 s"
    answer.set()
    await _settle()
    assert readiness.reason() == "the coordinator does not answer: refused"
    await readiness.close()


async def test_the_first_failing_check_is_the_reason() -> None:
    async def fine() -> str | None:
        return None

    async def broken() -> str | None:
        return "the object store cannot be written: EROFS"

    readiness = Readiness([Check("a", fine, 10.0), Check("b", broken, 10.0)])
    readiness.start()
    await readiness.checked(5.0)
    assert readiness.reason() == "the object store cannot be written: EROFS"
    await readiness.close()


def test_probe_keys_are_no_wal_keys() -> None:
    key = probe_key("wal/", 12)
    assert is_probe_key(key, "wal/")
    assert object_key_time_ms(key, "wal/") is None
    assert not is_probe_key(new_object_key("wal/", 1_700_000_000_000, 12), "wal/")
    assert not is_probe_key(key, "other/")
    assert is_probe_key(probe_key("", 0), "")
