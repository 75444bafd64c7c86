"""`/readyz` of a broker process says "not ready" while it cannot take writes, and answers within
its bound while the coordinator is stalled.

Integration tests, each a `python -m diskless.kafka_server` process with its metrics port:
- the objects directory made immutable (`chattr +i`, which stops root too, unlike permission
  bits) while the broker serves: a produce fails with KAFKA_STORAGE_ERROR and `/readyz` answers
  503 with the reason; writable again, ready again;
- the S3 bucket (moto's server) deleted while the broker serves: 503, naming NoSuchBucket;
- the PostgreSQL server stopped with SIGSTOP (every process of it): `/readyz` keeps answering at
  once, with how long the coordinator has not answered; SIGCONT, ready again.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import shutil
import signal
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Final

import pytest
from confluent_kafka import KafkaError, Producer

from diskless.kafka_server._server.process.observability import READY_TIMEOUT_S
from testkit.metrics import http_get
from testkit.ports import free_port
from testkit.postgres import PostgresServer, bindir_or_skip
from testkit.processes import BrokerProcess
from testkit.s3server import REGION, create_bucket, running_s3_server, s3_client

WAIT_S: Final = 60.0
"""Long enough for the store's probe (every 10 s) on a loaded machine."""


def _broker(tmp_path: Path, *options: str) -> tuple[BrokerProcess, str]:
    """A started broker process serving `/readyz`, and that URL."""
    metrics = f"127.0.0.1:{free_port()}"
    broker = BrokerProcess(
        0,
        1,
        ["--topic", "events:1", "--metrics-address", metrics, *options],
        tmp_path / "broker.log",
    )
    broker.start()
    return broker, f"http://{metrics}/readyz"


def _until(readyz: str, status: int, timeout_s: float = WAIT_S) -> str:
    """The body of /readyz once it answers `status`."""
    deadline = time.monotonic() + timeout_s
    while True:
        answer, body = http_get(readyz)
        if answer == status:
            return body
        assert time.monotonic() < deadline, f"/readyz still answers {answer}: {body}"
        time.sleep(0.1)


def _produce_error(bootstrap: str) -> KafkaError | None:
    """The outcome of producing one record, with no retries."""
    producer = Producer(
        {"bootstrap.servers": bootstrap, "acks": "all", "retries": 0, "message.timeout.ms": 60_000}
    )
    outcome: list[KafkaError | None] = []
    producer.produce("events", b"x", on_delivery=lambda error, _: outcome.append(error))
    producer.flush(90)
    assert len(outcome) == 1
    return outcome[0]


@contextlib.contextmanager
def _immutable(path: Path) -> Iterator[None]:
    if shutil.which("chattr") is None:
        pytest.skip("chattr is not installed")
    result = subprocess.run(["chattr", "+i", str(path)], capture_output=True, text=True)
    if result.returncode != 0:
        pytest.skip(f"chattr +i is not supported here: {result.stderr.strip()}")
    try:
        yield
    finally:
        subprocess.run(["chattr", "-i", str(path)], check=True)


def test_not_ready_while_the_objects_directory_cannot_be_written(tmp_path: Path) -> None:
    data = tmp_path / "data"
    broker, readyz = _broker(tmp_path, "--data-dir", str(data))
    try:
        assert _until(readyz, 200) == "ready\n"
        with _immutable(data / "objects" / "wal"):
            error = _produce_error(broker.address)
            assert error is not None and error.code() == KafkaError.KAFKA_STORAGE_ERROR, error
            body = _until(readyz, 503)
            assert body.startswith("not ready: the object store cannot be written: "), body
            assert "StorageNotWritableError" in body and body.count("\n") == 1, body
        assert _until(readyz, 200) == "ready\n"
        assert _produce_error(broker.address) is None
    finally:
        broker.kill()


def test_not_ready_once_the_bucket_is_deleted(tmp_path: Path) -> None:
    with running_s3_server() as endpoint:
        bucket = asyncio.run(create_bucket(endpoint))
        broker, readyz = _broker(
            tmp_path,
            "--data-dir", str(tmp_path / "data"),
            "--s3-endpoint", endpoint, "--bucket", bucket, "--region", REGION,
        )  # fmt: skip
        try:
            assert _until(readyz, 200) == "ready\n"
            asyncio.run(_delete_bucket(endpoint, bucket))
            body = _until(readyz, 503)
            assert body.startswith("not ready: the object store cannot be written: "), body
            assert "NoSuchBucket" in body, body
        finally:
            broker.kill()


async def _delete_bucket(endpoint: str, bucket: str) -> None:
    """Delete the bucket and what is in it (a probe may land between the two: again)."""
    async with s3_client(endpoint) as client:
        for _ in range(20):
            listing = await client.list_objects_v2(Bucket=bucket)
            for item in listing.get("Contents", []):
                await client.delete_object(Bucket=bucket, Key=item["Key"])
            try:
                await client.delete_bucket(Bucket=bucket)
                return
            except client.exceptions.ClientError as error:
                if error.response["Error"]["Code"] != "BucketNotEmpty":
                    raise
        raise AssertionError("the bucket never became empty")


def _server_processes(server: PostgresServer) -> list[int]:
    """The postmaster and its children."""
    postmaster = int((server.data / "postmaster.pid").read_text().split()[0])
    children = subprocess.run(
        ["pgrep", "-P", str(postmaster)], capture_output=True, text=True
    ).stdout.split()
    return [postmaster, *map(int, children)]


def test_readiness_answers_within_its_bound_while_postgres_is_stopped(tmp_path: Path) -> None:
    if shutil.which("pgrep") is None:
        pytest.skip("pgrep is not installed")
    server = PostgresServer(bindir_or_skip())
    try:
        broker, readyz = _broker(
            tmp_path, "--data-dir", str(tmp_path / "data"), "--coordinator", server.dsn("postgres")
        )
        try:
            assert _until(readyz, 200) == "ready\n"
            stopped = _server_processes(server)
            for pid in stopped:
                os.kill(pid, signal.SIGSTOP)
            try:
                deadline = time.monotonic() + WAIT_S
                while True:
                    asked = time.monotonic()
                    status, body = http_get(readyz)
                    assert time.monotonic() - asked < READY_TIMEOUT_S, body
                    if "has not answered for" in body:
                        break
                    assert time.monotonic() < deadline, body
                    time.sleep(0.1)
                assert status == 503
                assert body.startswith("not ready: the coordinator has not answered for "), body
            finally:
                for pid in stopped:
                    os.kill(pid, signal.SIGCONT)
            assert _until(readyz, 200) == "ready\n"
        finally:
            broker.kill()
    finally:
        server.close()
