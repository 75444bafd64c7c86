"""`python -m benchmarks._produce_baselines`: what `bench_produce`'s baselines stand on.

Integration test of the measuring tool, not of its figures: in its own process (the allocator
settings are process-wide), the warm memory regime keeps a freed buffer resident and the cold one
gives it back, and the raw and ceiling runs move every batch of the run (each checks that its
store holds every byte, and would fail the command otherwise).
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path
from typing import Final

ROOT: Final = Path(__file__).resolve().parents[1]
RUN_TIMEOUT_S: Final = 120.0
FREED_MIB: Final = 64


def test_memory_regimes_hold_and_both_baselines_move_every_batch() -> None:
    run = subprocess.run(
        [sys.executable, "-m", "benchmarks._produce_baselines"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=RUN_TIMEOUT_S,
        check=False,
    )
    assert run.returncode == 0, run.stdout + run.stderr
    kept = {
        match[1]: int(match[2])
        for match in re.finditer(r"^(cold|warm): (-?\d+) MiB of a freed", run.stdout, re.M)
    }
    assert set(kept) == {"cold", "warm"}, run.stdout
    assert kept["warm"] >= FREED_MIB - 8, run.stdout  # reused, not faulted in again
    assert kept["cold"] <= 8, run.stdout  # unmapped at once
    moved = {
        match[1]: (int(match[2]), int(match[3]))
        for match in re.finditer(r"^(raw|ceiling): (\d+) batches, (\d+) bytes$", run.stdout, re.M)
    }
    assert set(moved) == {"raw", "ceiling"}, run.stdout
    assert moved["raw"] == moved["ceiling"], run.stdout
    assert moved["raw"][0] > 0, run.stdout
