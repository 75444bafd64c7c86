"""The one way fault injectors draw a call's fault, so a seed replays alike in every injector.

Both the object-store and the coordinator-store injectors roll these dice: the same number of
draws per call whatever the outcome, so that one scheduled or disabled fault does not shift
the faults of every later call.
"""

from __future__ import annotations

import enum
import random
from collections.abc import Callable

Latency = float | Callable[[random.Random], float]
"""Seconds, or a function of the fault rng drawing them."""


class Roll(enum.Enum):
    """What the dice say about one call, before a schedule or a switch overrides them."""

    NONE = "none"
    FAIL = "fail"
    LOST = "lost"
    SLOW = "slow"


def sample_latency(rng: random.Random, latency: Latency) -> float:
    value = latency(rng) if callable(latency) else latency
    if value < 0:
        raise ValueError(f"latency must not be negative, got {value}")
    return value


def roll(
    rng: random.Random,
    *,
    fail_rate: float,
    lost_rate: float,
    slow_rate: float,
    latency_s: Latency,
    slow_latency_s: Latency,
) -> tuple[Roll, float, float]:
    """(the rolled fault, the call's latency, the extra latency should it be slow)."""
    outcome, slow = rng.random(), rng.random()
    latency = sample_latency(rng, latency_s)
    slow_latency = sample_latency(rng, slow_latency_s)
    if outcome < fail_rate:
        return Roll.FAIL, latency, slow_latency
    if outcome < fail_rate + lost_rate:
        return Roll.LOST, latency, slow_latency
    if slow < slow_rate:
        return Roll.SLOW, latency, slow_latency
    return Roll.NONE, latency, slow_latency
