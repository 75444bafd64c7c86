"""Unit tests of the command line: defaults, overrides, sweeps, and refused combinations."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from benchmarks.harness import coordinators
from benchmarks.harness.options import parse_args
from benchmarks.harness.spec import WorkloadSpec
from testkit import postgres


def test_no_arguments_is_the_embedded_default_run() -> None:
    spec, options, sweep = parse_args([])
    assert spec == WorkloadSpec()
    assert sweep == {}
    assert options.store.kind == "local" and options.store.durable
    assert options.wal == {}
    assert options.report_dir.parent == Path("reports")
    assert options.rates.put_per_1000 == 0.005 and options.rates.cross_az_per_gb == 0.02
    assert options.rates.storage_gb_month == 0.023 and options.rates.block_storage_gb_month == 0.08
    assert options.consolidate


def test_consolidation_can_be_left_out_and_storage_rates_set() -> None:
    _, options, _ = parse_args(
        ["--no-consolidation", "--block-storage-utilization", "0.5", "--retention-hours", "168"]
    )
    assert not options.consolidate
    assert options.rates.block_storage_utilization == 0.5
    assert options.rates.retention_hours == 168.0


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


def test_master_and_coordinator_urls() -> None:
    _, options, _ = parse_args([])
    assert (options.master, options.coordinator) == ("local", "sqlite:")
    _, options, _ = parse_args(
        ["--master", "spark://10.0.0.1:7077", "--coordinator", "sqlite:///shared/coord.sqlite"]
    )
    assert options.master == "spark://10.0.0.1:7077"
    assert options.coordinator == "sqlite:///shared/coord.sqlite"
    _, options, _ = parse_args(["--tasks", "1", "--coordinator", "memory"])
    assert options.coordinator == "memory:"
    _, options, _ = parse_args(["--tasks", "1", "--memory-coordinator"])
    assert options.coordinator == "memory:"


def test_each_run_resolves_its_own_empty_coordinator(tmp_path: Path) -> None:
    run_a, run_b = tmp_path / "diskless-bench-a", tmp_path / "diskless-bench-b"
    assert coordinators.for_run("sqlite:", run_a) == f"sqlite://{run_a}/coordinator.sqlite"
    shared = coordinators.for_run("sqlite:///shared/coord.sqlite", run_a)
    assert shared == "sqlite:///shared/coord-diskless-bench-a.sqlite"
    assert shared != coordinators.for_run("sqlite:///shared/coord.sqlite", run_b)
    assert coordinators.sqlite_file(shared) == Path("/shared/coord-diskless-bench-a.sqlite")
    assert coordinators.for_run("memory:", run_a) == "memory:"
    assert not coordinators.is_shared("memory:") and coordinators.is_shared(shared)


def test_each_run_gets_a_postgresql_database_of_its_own(tmp_path: Path) -> None:
    _, options, _ = parse_args(["--coordinator", "postgres://bench@10.0.0.3:5433/diskless"])
    assert options.coordinator == "postgresql://bench@10.0.0.3:5433/diskless"
    _, options, _ = parse_args(["--coordinator", "postgresql://bench@10.0.0.3"])
    assert options.coordinator == "postgresql://bench@10.0.0.3/postgres"
    run_a, run_b = tmp_path / "diskless-bench-Ab1", tmp_path / "diskless-bench-b"
    resolved = coordinators.for_run("postgresql://bench@10.0.0.3:5433/diskless", run_a)
    assert resolved == "postgresql://bench@10.0.0.3:5433/diskless_diskless_bench_ab1"
    assert resolved != coordinators.for_run("postgresql://bench@10.0.0.3:5433/diskless", run_b)
    assert coordinators.is_shared(resolved) and coordinators.sqlite_file(resolved) is None
    assert coordinators.is_postgresql(resolved) and not coordinators.is_postgresql("sqlite:")
    assert coordinators.describe(resolved, 2) == (
        "PostgreSQL database diskless_diskless_bench_ab1 on 10.0.0.3:5433 shared by 2 Spark task(s)"
    )
    long_name = coordinators.for_run("postgresql://h/" + "d" * 60, run_a)
    assert len(long_name.rpartition("/")[2]) == coordinators.POSTGRESQL_NAME_MAX


def test_a_run_database_is_created_empty_and_dropped(tmp_path: Path) -> None:
    pg = postgres.server()
    url = coordinators.parse(pg.dsn("postgres"))
    resolved = coordinators.for_run(url, tmp_path / "diskless-bench-x1")
    name = resolved.rpartition("/")[2]
    coordinators.prepare(url, resolved)
    try:
        assert pg.sql(f"SELECT count(*) FROM pg_database WHERE datname = '{name}'") == "1\n"
        base, args = coordinators.open_coordinator_type(resolved)

        async def topics() -> list[str]:
            coordinator = base(*args)
            try:
                await coordinator.create_topic("t", 1)
                return [t.name for t in await coordinator.describe_topics()]
            finally:
                await coordinator.close()

        assert asyncio.run(topics()) == ["t"]
    finally:
        coordinators.remove(url, resolved)
    assert pg.sql(f"SELECT count(*) FROM pg_database WHERE datname = '{name}'") == "0\n"


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--master", "yarn"], "spark://HOST:PORT"),
        (["--coordinator", "postgresql:///diskless"], "name the server"),
        (["--coordinator", "sqlite:relative.db"], "must be absolute"),
        (["--coordinator", "mysql://db"], "use sqlite"),
        (["--coordinator", "memory"], "single task"),  # two tasks by default
        (["--memory-coordinator", "--coordinator", "sqlite", "--tasks", "1"], "give one"),
        (["--consumer-groups", "-1"], "consumer_groups must be >= 0"),
        (["--consume-idle-s", "0"], "consume_idle_s > 0"),
        (["--fetch-wait-ms", "-1"], "fetch_wait_ms must be >= 0"),
        (["--consume-idle-s", "0.5"], "consume_idle_s must be at least twice fetch_wait_ms"),
    ],
)
def test_bad_master_coordinator_and_consume_options_are_refused_with_a_reason(
    argv: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as exc:
        parse_args(argv)
    assert exc.value.code == 2
    assert message in capsys.readouterr().err


def test_the_consume_phase_runs_by_default_and_takes_its_options() -> None:
    spec, _, sweep = parse_args([])
    assert spec.consumer_groups == 1
    spec, _, sweep = parse_args(
        ["--consumer-groups", "4", "--consume-idle-s", "0.5", "--fetch-wait-ms", "200",
         "--sweep", "consumer_groups=0,2"]
    )  # fmt: skip
    assert (spec.consumer_groups, spec.consume_idle_s, spec.fetch_wait_ms) == (4, 0.5, 200)
    assert sweep == {"consumer_groups": ["0", "2"]}
