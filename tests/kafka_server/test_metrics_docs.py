"""Unit: the Grafana dashboard and the README's metrics table name exactly what a broker exports.

A scrape of a running cluster (lifecycle services on, so that every family is declared) lists the
exported names (`# TYPE` lines); every metric a dashboard query uses must be among them, and the
README's table must list each exported `diskless_` metric once, and nothing else.
"""

from __future__ import annotations

import asyncio
import json
import re
from pathlib import Path
from typing import Final

import pytest

from diskless.coordinator import InMemoryBatchCoordinator
from diskless.kafka_server import ServerConfig
from diskless.storage import MemoryObjectStore
from testkit.metrics import observed_cluster, promtool_check, scrape

ROOT: Final = Path(__file__).resolve().parents[2]
DASHBOARD: Final = ROOT / "docs" / "grafana" / "diskless.json"
README: Final = ROOT / "README.md"
METRIC: Final = re.compile(r"\b((?:diskless|process|python)_[a-z0-9_]+)\b")
HISTOGRAM_SERIES: Final = ("_bucket", "_sum", "_count")


@pytest.fixture(scope="module")
def exported() -> tuple[set[str], set[str]]:
    """(every metric name a scrape declares, the histograms among them)."""

    async def take() -> str:
        coordinator = InMemoryBatchCoordinator()
        store = MemoryObjectStore()
        async with observed_cluster(store, coordinator, ServerConfig(), lifecycle=True) as (
            _,
            observability,
        ):
            return await scrape(observability)

    text = asyncio.run(take())
    promtool_check(text)
    declared = [line.split() for line in text.splitlines() if line.startswith("# TYPE ")]
    return {d[2] for d in declared}, {d[2] for d in declared if d[3] == "histogram"}


def dashboard_queries() -> list[str]:
    found: list[str] = []

    def walk(node: object) -> None:
        if isinstance(node, dict):
            if isinstance(node.get("expr"), str):
                found.append(node["expr"])
            for child in node.values():
                walk(child)
        elif isinstance(node, list):
            for child in node:
                walk(child)

    walk(json.loads(DASHBOARD.read_text()))
    return found


def test_every_metric_the_dashboard_queries_is_exported(
    exported: tuple[set[str], set[str]],
) -> None:
    names, histograms = exported
    queries = dashboard_queries()
    assert len(queries) > 30
    used = set()
    for query in queries:
        for name in METRIC.findall(query):
            for suffix in HISTOGRAM_SERIES:
                if name.endswith(suffix) and name.removesuffix(suffix) in histograms:
                    name = name.removesuffix(suffix)
            used.add(name)
    assert used - names == set()
    # And the dashboard shows every diskless metric there is.
    assert {n for n in names if n.startswith("diskless_")} - used == set()


def test_the_readme_table_lists_each_exported_metric(exported: tuple[set[str], set[str]]) -> None:
    names, _ = exported
    rows = re.findall(r"^\| `(diskless_[a-z0-9_]+)` \|", README.read_text(), re.MULTILINE)
    assert len(rows) == len(set(rows)), "a metric listed twice"
    assert set(rows) == {n for n in names if n.startswith("diskless_")}
