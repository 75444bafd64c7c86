"""`python -m benchmarks.bench_share --quick` against a real broker process and real clients.

Integration test of the measuring tool, not of its figures' values: the run reads every record
through both kinds of groups (it exits non-zero otherwise) and prints each figure, the share
group's throughput beside the classic group's, the coordinator's transactions per MB read, and
what idle share consumers cost. No figure is compared with a target.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Final

ROOT: Final = Path(__file__).resolve().parents[2]
RUN_TIMEOUT_S: Final = 240.0


def test_bench_share_reads_every_record_and_prints_every_figure() -> None:
    command = [sys.executable, "-m", "benchmarks.bench_share", "--quick", "--backend", "sqlite"]
    run = subprocess.run(
        command, cwd=ROOT, capture_output=True, text=True, timeout=RUN_TIMEOUT_S, check=False
    )
    assert run.returncode == 0, run.stdout + run.stderr
    lines = run.stdout.splitlines()
    for label in ("classic consumer group", "share group (3 members)", "coordinator per MB read"):
        assert sum(label in line for line in lines) == 1, run.stdout
    assert any("idle share consumers: broker CPU" in line for line in lines), run.stdout
