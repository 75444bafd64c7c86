"""Unit tests of the command line: defaults, overrides, sweeps, and refused combinations."""

from __future__ import annotations

from pathlib import Path

import pytest

from benchmarks.harness.cli import parse_args
from benchmarks.harness.spec import WorkloadSpec


def test_no_arguments_is_the_embedded_default_run() -> None:
    spec, options, sweep = parse_args([])
    assert spec == WorkloadSpec()
    assert sweep == {}
    assert options.store.kind == "local" and options.store.durable
    assert options.wal == {}
    assert options.report_dir.parent == Path("reports")
    assert options.rates.put_per_1000 == 0.005 and options.rates.cross_az_per_gb == 0.02


def test_workload_wal_store_and_rate_options() -> None:
    spec, options, _ = parse_args(
        [
            "--producers", "8", "--key-skew", "1.5", "--record-bytes", "fixed:512",
            "--wal", "commit_interval_ms=100", "buffer_max_bytes=2MiB",
            "--s3-endpoint", "http://localhost:9000", "--bucket", "b",
            "--put-per-1000", "0.0045", "--report-dir", "out",
        ]
    )  # fmt: skip
    assert (spec.producers, spec.key_skew, spec.record_bytes) == (8, 1.5, "fixed:512")
    assert options.wal == {"commit_interval_ms": 100, "buffer_max_bytes": 2 << 20}
    assert options.store.kind == "s3" and options.store.bucket == "b"
    assert options.store.endpoint_url == "http://localhost:9000"
    assert options.rates.put_per_1000 == 0.0045
    assert options.report_dir == Path("out")


def test_sweep_lists_every_value_per_name() -> None:
    _, _, sweep = parse_args(
        ["--sweep", "commit_interval_ms=100,250", "buffer_max_bytes=1MiB,8MiB"]
    )
    assert sweep == {"commit_interval_ms": ["100", "250"], "buffer_max_bytes": ["1MiB", "8MiB"]}


@pytest.mark.parametrize(
    "argv",
    [
        ["--memory-coordinator"],  # two tasks by default
        ["--brokers", "2"],  # fewer brokers than racks
        ["--sweep", "producers=0"],
        ["--wal", "commit_interval_ms"],
        ["--wal", "comit_interval_ms=100"],  # a typo is not silently ignored
        ["--wal", "buffer_max_bytes=128MiB"],  # more than inflight_bytes_max: WalConfig refuses
        ["--s3-endpoint", "http://localhost:9000"],  # no bucket
    ],
)
def test_refused_combinations_exit_with_usage(argv: list[str]) -> None:
    with pytest.raises(SystemExit) as exc:
        parse_args(argv)
    assert exc.value.code != 0
