"""`python -m benchmarks.bench_wire` at a tiny scale: a real broker process and real clients.

Integration test of the measuring tool, not of its figures' values: the command runs to its end,
prints one table row per scenario and the two summary lines, and its JSON holds every figure,
positive where the run cannot have done without it (bytes moved, seconds, objects written by the
produce scenarios and the trickle, broker CPU while megabytes went through it). The drain reads
back every byte the scenarios wrote and writes no object. No figure is compared with a target.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Final

ROOT: Final = Path(__file__).resolve().parents[2]
SCENARIOS: Final = ("defaults", "batch.size 16384", "tuned")
FIGURES: Final = ("mb_per_s", "busy", "cpu_ms_per_mb", "objects_per_s", "objects_per_gb")
CPU_MEASURABLE: Final = ("defaults", "tuned")
"""Scenarios moving megabytes even at the test's scale: the broker's CPU over them spans many
clock ticks, where the small ones' may round to none."""
RUN_TIMEOUT_S: Final = 240.0


def test_bench_wire_prints_the_table_and_writes_every_figure(tmp_path: Path) -> None:
    report_path = tmp_path / "wire.json"
    command = [
        sys.executable, "-m", "benchmarks.bench_wire",
        "--scale", "0.02", "--trickle-s", "1", "--json", str(report_path),
    ]  # fmt: skip
    run = subprocess.run(
        command, cwd=ROOT, capture_output=True, text=True, timeout=RUN_TIMEOUT_S, check=False
    )
    assert run.returncode == 0, run.stdout + run.stderr
    lines = run.stdout.splitlines()
    for name in (*SCENARIOS, "consume", "trickle"):
        assert sum(line.strip().startswith(f"{name} ") for line in lines) == 1, run.stdout
    assert any("MB/s" in line and "objects/GB" in line for line in lines), run.stdout
    assert any("consumed / produced" in line and "target <= 0.5" in line for line in lines)
    assert any("PUTs per second per broker" in line for line in lines), run.stdout
    assert any(line.strip().startswith("idle broker") for line in lines), run.stdout

    report = json.loads(report_path.read_text())
    assert report["baseline"] == "tuned"
    assert report["idle_busy"] >= 0
    assert [row["name"] for row in report["produce"]] == list(SCENARIOS)
    rows = [*report["produce"], report["consume"], report["trickle"]]
    for row in rows:
        assert row["bytes"] > 0 and row["seconds"] > 0 and row["mb_per_s"] > 0, row
        assert row["cpu_seconds"] >= 0 and row["busy"] >= 0 and row["cpu_ms_per_mb"] >= 0, row
        assert all(isinstance(row[figure], int | float) for figure in FIGURES), row
    for row in [*report["produce"], report["trickle"]]:
        assert row["objects"] > 0 and row["objects_per_s"] > 0 and row["objects_per_gb"] > 0, row
    for row in [*report["produce"], report["consume"]]:
        if row["name"] in (*CPU_MEASURABLE, "consume"):
            assert row["cpu_seconds"] > 0 and row["busy"] > 0 and row["cpu_ms_per_mb"] > 0, row
    assert report["consume"]["bytes"] == sum(row["bytes"] for row in report["produce"])
    assert report["consume"]["objects"] == 0
    assert report["consume_produce_cpu_ratio"] > 0
