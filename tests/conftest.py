"""Suite-wide options.

- `--run-slow` adds the long stress, scale and crash tests (marked `slow`).
- Seeded simulations take their seed count from the suite, not from hundreds of parametrized items
  that are skipped by default: a test marked `seeds(N)` runs N seeds, or as many as `--sim-seeds`
  says; a long variant is also marked `slow`; `DISKLESS_SIM_SEED=<seed>` replays one.
- Beyond pytest-timeout, a watchdog ends the run if a test's teardown hangs (`tests._watchdog`).
- The fixtures the test packages share come from one plugin, `testkit.fixtures`.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Generator
from typing import Any

import pytest

from tests._watchdog import Watchdog

pytest_plugins = ["testkit.fixtures"]

_watchdog_key = pytest.StashKey[Watchdog]()


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
    # Output capture is suspended here: this copy of stderr still reaches the terminal.
    terminal = open(os.dup(sys.stderr.fileno()), "w")  # noqa: SIM115 (closed by unconfigure)
    config.stash[_watchdog_key] = Watchdog(terminal)


def pytest_unconfigure(config: pytest.Config) -> None:
    watchdog = config.stash.get(_watchdog_key, None)
    if watchdog is not None:
        watchdog.close()


@pytest.hookimpl(optionalhook=True)
def pytest_timeout_set_timer(item: pytest.Item, settings: Any) -> None:
    """pytest-timeout arms its timer: arm the watchdog for the same test (returns None, so
    that pytest-timeout's own timer is set as well)."""
    item.config.stash[_watchdog_key].arm(item, settings.timeout)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(
    item: pytest.Item, call: pytest.CallInfo[None]
) -> Generator[None, pytest.TestReport, pytest.TestReport]:
    report = yield
    item.config.stash[_watchdog_key].note(report)
    return report


@pytest.hookimpl(wrapper=True)
def pytest_runtest_protocol(item: pytest.Item) -> Generator[None, object, object]:
    """Disarm the watchdog once the test's teardown is over, however the test went."""
    try:
        return (yield)
    finally:
        item.config.stash[_watchdog_key].finish()


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
