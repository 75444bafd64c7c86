"""The harness end to end on a real Spark standalone cluster: a master and two workers, each its
own process, with moto's S3 server as the object store and the test PostgreSQL server as the
batch coordinator (the configuration of several machines); the same run on a SQLite file that
both workers share (they are on one host) is among the slow tests.

The harness runs as a separate driver process with `--master spark://...`; its workload,
brokers, baseline and read-back verification must run in the workers' executors (separate JVMs
and Python workers, in the workers' work directories), and verification must pass.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from benchmarks.harness.consolidate import CONSOLIDATOR_NODE_ID
from benchmarks.harness.placement import TaskPlace
from benchmarks.harness.report import RESULTS_FILE
from benchmarks.harness.spark import REPO_ROOT
from testkit.postgres import PostgresServer
from testkit.postgres import server as postgres_server
from testkit.s3server import REGION, S3_CREDENTIALS, create_bucket, running_s3_server, s3_client
from tests.harness._spark_cluster import SparkCluster, cluster_env, running_spark_cluster
from tests.harness._spark_jvm import quick_jvm_env

pytestmark = pytest.mark.spark

CREDENTIALS = {
    "AWS_ACCESS_KEY_ID": S3_CREDENTIALS["aws_access_key_id"],
    "AWS_SECRET_ACCESS_KEY": S3_CREDENTIALS["aws_secret_access_key"],
}
DRIVER_TIMEOUT_S = 240
WORKLOAD = [
    "--brokers", "2", "--racks", "2", "--tasks", "2", "--partitions", "6", "--producers", "4",
    "--total-mb", "2", "--duration-s", "60", "--partitions-per-round", "3",
    "--transactional-share", "0.5", "--txn-requests", "4",
    "--wal", "commit_interval_ms=50", "buffer_max_bytes=256KiB",
    "--put-baseline-s", "0.3", "--sqlite-baseline-s", "0.3", "--no-progress",
    "--consumer-groups", "2", "--consume-idle-s", "0.5", "--fetch-wait-ms", "100",
]  # fmt: skip


class ClusterRun:
    def __init__(
        self, cluster: SparkCluster, endpoint: str, bucket: str, directory: Path, coordinator: str
    ) -> None:
        self.cluster, self.endpoint, self.bucket, self.directory = (
            cluster,
            endpoint,
            bucket,
            directory,
        )
        self.coordinator = coordinator
        """What `--coordinator` was: postgresql://... or sqlite:///..."""
        self.postgres: PostgresServer | None = None
        self.report_dir = directory / "report"
        self.process: subprocess.CompletedProcess[str] | None = None
        self.results: dict[str, Any] = {}


@pytest.fixture(
    scope="module",
    params=["postgresql", pytest.param("sqlite", marks=pytest.mark.slow)],
)
def cluster_run(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[ClusterRun]:
    directory = tmp_path_factory.mktemp("cluster")
    postgres: PostgresServer | None = None
    if request.param == "postgresql":
        postgres = postgres_server()
        coordinator = postgres.dsn("postgres")
    else:
        coordinator = f"sqlite://{directory / 'coordinator.sqlite'}"
    jvm = quick_jvm_env(directory / "spark-conf")
    with running_s3_server() as endpoint:
        bucket = asyncio.run(create_bucket(endpoint))
        with running_spark_cluster(directory, workers=2, env={**CREDENTIALS, **jvm}) as cluster:
            run = ClusterRun(cluster, endpoint, bucket, directory, coordinator)
            run.postgres = postgres
            argv = [
                sys.executable, "-m", "benchmarks.harness",
                "--master", cluster.master_url,
                "--coordinator", coordinator,
                "--s3-endpoint", endpoint, "--bucket", bucket, "--region", REGION,
                "--report-dir", str(run.report_dir),
                *WORKLOAD,
            ]  # fmt: skip
            env = cluster_env({**CREDENTIALS, **jvm, "PYTHONPATH": str(REPO_ROOT)})
            run.process = _run_driver(argv, directory, env)
            results = run.report_dir / RESULTS_FILE
            if results.exists():
                run.results = json.loads(results.read_text())
            yield run


def _run_driver(
    argv: list[str], cwd: Path, env: dict[str, str]
) -> subprocess.CompletedProcess[str]:
    """The harness as its own driver process (and process group: its JVM dies with it)."""
    driver = subprocess.Popen(
        argv,
        cwd=cwd,  # not the repository: nothing may depend on the driver's working directory
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    try:
        stdout, stderr = driver.communicate(timeout=DRIVER_TIMEOUT_S)
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(driver.pid, signal.SIGKILL)
        driver.wait()
    return subprocess.CompletedProcess(argv, driver.returncode, stdout, stderr)


def _places(items: list[dict[str, Any]]) -> list[TaskPlace]:
    return [TaskPlace(**item) for item in items]


def test_the_harness_verifies_a_run_on_the_cluster(cluster_run: ClusterRun) -> None:
    process = cluster_run.process
    assert process is not None
    assert process.returncode == 0, (process.stdout[-3000:], process.stderr[-3000:])
    report = cluster_run.results
    verification = report["verification"]
    assert verification["passed"], verification["problems"]
    assert report["analysis"]["batches_acked"] > 0
    assert verification["read_records"] == verification["expected_records"] > 0
    assert report["master"] == cluster_run.cluster.master_url
    assert f"S3 bucket {cluster_run.bucket}" in report["store"]
    if cluster_run.postgres is not None:
        assert report["coordinator"].startswith("PostgreSQL database postgres_diskless_bench_")
        assert report["coordinator"].endswith(
            f":{cluster_run.postgres.port} shared by 2 Spark task(s)"
        )
    else:
        assert "coordinator-diskless-bench-" in report["coordinator"]
    assert f"coordinator: {report['coordinator']}" in process.stdout
    assert f"Spark master {cluster_run.cluster.master_url}" in process.stdout
    # The consolidation phase ran on the cluster too, and its read-back verified.
    consolidation = report["consolidation"]
    assert consolidation["verification"]["passed"], consolidation["verification"]["problems"]
    assert consolidation["verification"]["read_records"] == verification["read_records"]
    figures = consolidation["figures"]
    assert figures["after"]["batch_rows"] == 0 < figures["stats"]["extents_committed"]
    assert _places([figures["place"]])[0].executor != "driver"
    assert "Verification after consolidation: PASSED" in process.stdout
    # Two consumer groups read everything while the producers ran, on the cluster's coordinator.
    consume = report["consume"]
    assert consume["verification"]["passed"], consume["verification"]["problems"]
    assert consume["verification"]["read_records"] == 2 * verification["read_records"]
    assert consume["e2e_ms"]["count"] == 2 * report["analysis"]["batches_acked"]
    assert consume["calls_by_method"]["find_batches"] > 0
    assert "Consume verification: PASSED" in process.stdout


def test_every_task_ran_in_an_executor_of_a_different_worker(cluster_run: ClusterRun) -> None:
    report = cluster_run.results
    work_dirs = [str(d) for d in cluster_run.cluster.work_dirs]

    def worker_of(place: TaskPlace) -> str:
        owners = [d for d in work_dirs if place.work_dir.startswith(d + "/")]
        assert len(owners) == 1, (place, work_dirs)
        assert place.executor != "driver", place
        return owners[0]

    producers = _places([t["place"] for t in report["tasks"]])
    readers = _places(report["verification"]["readers"])
    consumers = _places(report["consume"]["readers"])  # each beside its execution task
    assert len(producers) == len(readers) == len(consumers) == 2
    assert sorted(map(worker_of, producers)) == sorted(work_dirs)
    assert sorted(map(worker_of, readers)) == sorted(work_dirs)
    assert sorted(map(worker_of, consumers)) == sorted(work_dirs)
    assert len({p.executor for p in producers}) == 2


def test_the_master_saw_the_application_on_both_workers(cluster_run: ClusterRun) -> None:
    status = cluster_run.cluster.status()
    apps = status["completedapps"] + status["activeapps"]
    assert [a["name"] for a in apps] == ["diskless-bench"]
    assert apps[0]["cores"] == 2
    # Each worker's work directory holds the application's executor directory with its logs.
    for work_dir in cluster_run.cluster.work_dirs:
        assert [p.name for p in work_dir.iterdir()] == [apps[0]["id"]]


def test_the_objects_are_in_the_bucket_and_the_coordinator_is_gone(
    cluster_run: ClusterRun,
) -> None:
    async def listing() -> list[str]:
        async with s3_client(cluster_run.endpoint) as client:
            pages = client.get_paginator("list_objects_v2").paginate(Bucket=cluster_run.bucket)
            return [item["Key"] async for page in pages for item in page.get("Contents", [])]

    keys = asyncio.run(listing())
    wal = [k for k in keys if "/wal/" in k and f"-b{CONSOLIDATOR_NODE_ID}-" not in k]
    consolidated = [k for k in keys if f"-b{CONSOLIDATOR_NODE_ID}-" in k]
    assert len(wal) == cluster_run.results["analysis"]["objects"]["count"] > 0
    figures = cluster_run.results["consolidation"]["figures"]
    assert len(consolidated) == figures["stats"]["extents_committed"] > 0
    assert not list(cluster_run.directory.glob("coordinator-*.sqlite*"))
    if cluster_run.postgres is not None:  # the run's database was dropped after the run
        databases = cluster_run.postgres.sql("SELECT datname FROM pg_database").split()
        assert not [d for d in databases if d.startswith("postgres_diskless_bench_")], databases
