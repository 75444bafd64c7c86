"""Suite-wide options.

- `--run-slow` adds the long stress, scale and crash tests (marked `slow`).
- Seeded simulations take their seed count from the suite, not from hundreds of parametrized items
  that are skipped by default: a test marked `seeds(N)` runs N seeds, or as many as `--sim-seeds`
  says; a long variant is also marked `slow`; `DISKLESS_SIM_SEED=<seed>` replays one.
"""

from __future__ import annotations

import os

import pytest


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--run-slow", action="store_true", default=False, help="also run tests marked slow"
    )
    parser.addoption(
        "--sim-seeds",
        type=int,
        default=None,
        help="seeds per simulation test (default: each test's own count)",
    )


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers",
        "seeds(count, first=0): parametrize `seed` with `count` seeds, or --sim-seeds of them",
    )


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    marker = metafunc.definition.get_closest_marker("seeds")
    if marker is None:
        return
    first: int = marker.kwargs.get("first", 0)
    replay = os.environ.get("DISKLESS_SIM_SEED")
    requested: int | None = metafunc.config.getoption("--sim-seeds")
    if replay:
        seeds = [int(replay)]
    elif metafunc.definition.get_closest_marker("slow") and not metafunc.config.getoption(
        "--run-slow"
    ):
        seeds = [first]  # skipped below: one line in the report, not one per seed
    else:
        count: int = requested or marker.args[0]
        seeds = list(range(first, first + count))
    metafunc.parametrize("seed", seeds)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if config.getoption("--run-slow"):
        return
    skip_slow = pytest.mark.skip(reason="slow: run with --run-slow")
    for item in items:
        if "slow" in item.keywords:
            item.add_marker(skip_slow)
