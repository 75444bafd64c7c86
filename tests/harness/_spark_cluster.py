"""A real Spark standalone cluster for tests: one master and N workers, each its own process.

The launcher classes ship inside the pyspark package (`pyspark/bin/spark-class`), so nothing is
installed besides pyspark and Java. Everything listens on 127.0.0.1 on free ports, and each
daemon runs in its own process group: executors and their Python workers are the workers'
children, so killing the groups on exit leaves nothing behind, even when a test fails.

Usage:

    with running_spark_cluster(tmp_path, workers=2) as cluster:
        ...  # a driver with master=cluster.master_url; cluster.status() is the master's /json
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import time
import urllib.request
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any, Final, NamedTuple

from testkit.ports import free_port

MASTER_CLASS: Final = "org.apache.spark.deploy.master.Master"
WORKER_CLASS: Final = "org.apache.spark.deploy.worker.Worker"
START_TIMEOUT_S: Final = 90.0
STOP_TIMEOUT_S: Final = 15.0
DAEMON_MEMORY: Final = "256m"
"""Heap of the master and worker daemons themselves (executors get the worker's --memory)."""
LOCAL_IP: Final = "127.0.0.1"


class SparkCluster(NamedTuple):
    master_url: str
    """spark://127.0.0.1:PORT, what a driver's --master takes."""
    ui_url: str
    """The master's web UI; `/json` there lists workers, running and completed applications."""
    work_dirs: list[Path]
    """Each worker's work directory: <dir>/<app id>/<executor id>/ holds each executor's logs."""

    def status(self) -> dict[str, Any]:
        with urllib.request.urlopen(f"{self.ui_url}/json/", timeout=10) as response:
            status: dict[str, Any] = json.load(response)
        return status


def spark_home() -> Path:
    import pyspark

    return Path(pyspark.__file__).resolve().parent


def cluster_env(extra: Mapping[str, str] | None = None) -> dict[str, str]:
    """The environment of the daemons and of a driver that joins them: everything on 127.0.0.1
    (SPARK_LOCAL_IP is also the address executors use to reach the driver), plus `extra`."""
    env = {**os.environ, **(extra or {})}
    env.update(
        SPARK_HOME=str(spark_home()),
        SPARK_LOCAL_IP=LOCAL_IP,
        SPARK_DAEMON_MEMORY=DAEMON_MEMORY,
        SPARK_NO_DAEMONIZE="1",
    )
    return env


def _launch(args: list[str], log: Path, env: dict[str, str]) -> subprocess.Popen[bytes]:
    with log.open("ab") as out:
        return subprocess.Popen(
            [str(spark_home() / "bin" / "spark-class"), *args],
            stdout=out,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            env=env,
            start_new_session=True,  # its own process group, executors included
        )


def _stop(process: subprocess.Popen[bytes]) -> None:
    """SIGTERM the process group, SIGKILL it if it lingers."""
    for sig, wait_s in ((signal.SIGTERM, STOP_TIMEOUT_S), (signal.SIGKILL, STOP_TIMEOUT_S)):
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, sig)
        try:
            process.wait(wait_s)
        except subprocess.TimeoutExpired:
            continue
        # The leader is gone; make sure no child (an executor) of its group outlived it.
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGKILL)
        return


def _wait_for(
    what: str, ready: Any, processes: list[subprocess.Popen[bytes]], logs: list[Path]
) -> None:
    deadline = time.monotonic() + START_TIMEOUT_S
    while time.monotonic() < deadline:
        for process, log in zip(processes, logs, strict=True):
            if process.poll() is not None:
                raise RuntimeError(f"{what}: a daemon exited ({process.returncode}): {_tail(log)}")
        with contextlib.suppress(OSError, ValueError):
            if ready():
                return
        time.sleep(0.5)
    raise TimeoutError(f"{what} within {START_TIMEOUT_S} s: {_tail(logs[-1])}")


def _tail(log: Path, lines: int = 20) -> str:
    try:
        return "\n".join(log.read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return "(no log)"


@contextlib.contextmanager
def running_spark_cluster(
    directory: Path,
    workers: int = 2,
    cores: int = 1,
    memory: str = "1g",
    env: Mapping[str, str] | None = None,
) -> Iterator[SparkCluster]:
    """Start a master and `workers` workers (each `cores` cores, `memory` for executors) under
    `directory` (logs and work directories); yield once every worker has registered.

    `env` is added to the daemons' environment, which executors inherit (S3 credentials, say).
    """
    env = cluster_env(env)
    port, ui_port = free_port(), free_port()
    master_url = f"spark://{LOCAL_IP}:{port}"
    cluster = SparkCluster(
        master_url,
        f"http://{LOCAL_IP}:{ui_port}",
        [directory / f"worker-{i}" for i in range(workers)],
    )
    processes: list[subprocess.Popen[bytes]] = []
    logs: list[Path] = []
    try:
        logs.append(directory / "master.log")
        processes.append(
            _launch(
                [
                    MASTER_CLASS,
                    "--host",
                    LOCAL_IP,
                    "--port",
                    str(port),
                    "--webui-port",
                    str(ui_port),
                ],
                logs[-1],
                env,
            )
        )
        _wait_for(
            "the Spark master", lambda: cluster.status()["status"] == "ALIVE", processes, logs
        )
        for work_dir in cluster.work_dirs:
            work_dir.mkdir(parents=True)
            logs.append(directory / f"{work_dir.name}.log")
            worker_args = [
                WORKER_CLASS,
                "--host", LOCAL_IP,
                "--port", str(free_port()),
                "--webui-port", str(free_port()),
                "--cores", str(cores),
                "--memory", memory,
                "--work-dir", str(work_dir),
                master_url,
            ]  # fmt: skip
            processes.append(_launch(worker_args, logs[-1], env))
        _wait_for(
            f"{workers} Spark workers registered",
            lambda: cluster.status().get("aliveworkers") == workers,
            processes,
            logs,
        )
        yield cluster
    finally:
        for process in reversed(processes):
            _stop(process)
