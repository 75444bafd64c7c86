"""Acceptance: a real Prometheus server (Debian's `prometheus`) scrapes a running broker, and its
HTTP query API answers what real clients did.

confluent-kafka produces to a topic and commits a group's offsets; the server scrapes the
broker's `/metrics` every 0.5 s. The test then asks Prometheus, not the broker: the topic's
bytes-in counter must equal the bytes of the record batches the producer sent (measured apart:
read back and sized by kafka-python's decoder), and the group's lag on each partition the high
watermark the client sees minus the offset it committed; a share group's records by state are
those its coordinator steps left.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import shutil
import subprocess
import time
import urllib.parse
from collections.abc import Iterator
from pathlib import Path

from diskless import OffsetSpec, TopicPartition
from diskless.clock import SystemClock
from diskless.coordinator import (
    AcknowledgeBatch,
    AcknowledgeType,
    ListOffsetsRequest,
    ShareFetchPartition,
    ShareLimits,
)
from diskless.kafka_server import ServerConfig
from diskless.storage import LocalObjectStore
from testkit.backends import open_coordinator
from testkit.metrics import (
    COMMITTED,
    GROUP,
    TOPIC,
    batch_bytes,
    commit_and_read_watermarks,
    http_get,
    observed_cluster,
    produce,
    write_prometheus_config,
)
from testkit.ports import free_port

SHARE_GROUP = "queue"
SCRAPE_INTERVAL_MS = 500
QUERY_DEADLINE_S = 60.0


@contextlib.contextmanager
def prometheus_server(directory: Path, target: str) -> Iterator[str]:
    """A Prometheus server scraping `target`; yields its HTTP address once it is ready."""
    binary = shutil.which("prometheus")
    assert binary is not None, "prometheus is missing: ./run installs Debian's prometheus"
    address = f"127.0.0.1:{free_port()}"
    config = write_prometheus_config(directory, target, SCRAPE_INTERVAL_MS)
    log = (directory / "prometheus.log").open("w")
    process = subprocess.Popen(
        [
            binary,
            f"--config.file={config}",
            f"--storage.tsdb.path={directory / 'tsdb'}",
            f"--web.listen-address={address}",
        ],
        stdout=log,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    try:
        deadline = time.monotonic() + QUERY_DEADLINE_S
        while http_get_quiet(f"http://{address}/-/ready") != 200:
            assert process.poll() is None, (directory / "prometheus.log").read_text()[-2000:]
            assert time.monotonic() < deadline, "prometheus did not become ready"
            time.sleep(0.2)
        yield address
    finally:
        process.terminate()
        try:
            process.wait(30)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(30)
        log.close()


def http_get_quiet(url: str) -> int:
    try:
        return http_get(url)[0]
    except OSError:
        return 0


def query(address: str, expression: str) -> float | None:
    """The value of an instant query with one series in its answer; None while it has none."""
    url = f"http://{address}/api/v1/query?" + urllib.parse.urlencode({"query": expression})
    status, body = http_get(url)
    assert status == 200, body
    answer = json.loads(body)
    assert answer["status"] == "success", answer
    result = answer["data"]["result"]
    assert len(result) <= 1, result
    return float(result[0]["value"][1]) if result else None


def wait_for(address: str, expression: str, expected: float) -> float | None:
    """Query until the answer is `expected` (scrapes are periodic) or the deadline passes;
    the last answer."""
    deadline = time.monotonic() + QUERY_DEADLINE_S
    while True:
        answer = query(address, expression)
        if answer == expected or time.monotonic() > deadline:
            return answer
        time.sleep(SCRAPE_INTERVAL_MS / 2000)


async def test_prometheus_reads_exact_bytes_in_and_lag(tmp_path: Path) -> None:
    coordinator = open_coordinator("sqlite", tmp_path, SystemClock())
    store = LocalObjectStore(tmp_path / "objects")
    try:
        async with observed_cluster(store, coordinator, ServerConfig()) as (cluster, observed):
            await cluster.create_topic(TOPIC, 2)
            bootstrap = cluster.bootstrap()
            await asyncio.to_thread(produce, bootstrap, TOPIC, 300, 2)
            high, _ = await asyncio.to_thread(commit_and_read_watermarks, bootstrap)
            sent = await batch_bytes(cluster, TOPIC, 2)
            with prometheus_server(tmp_path, observed.endpoint.address) as prometheus:
                bytes_in = await asyncio.to_thread(
                    wait_for,
                    prometheus,
                    f'diskless_topic_bytes_in_total{{topic="{TOPIC}"}}',
                    sent,
                )
                lags = {
                    partition: await asyncio.to_thread(
                        wait_for,
                        prometheus,
                        f'diskless_consumer_group_lag{{group="{GROUP}",topic="{TOPIC}",'
                        f'partition="{partition}"}}',
                        high[partition] - committed,
                    )
                    for partition, committed in COMMITTED.items()
                }
                up = await asyncio.to_thread(query, prometheus, 'up{job="diskless"}')
    finally:
        await coordinator.close()
        await store.close()
    assert up == 1
    assert sent > 0
    assert bytes_in == sent
    assert high[0] > COMMITTED[0]
    assert lags == {p: high[p] - c for p, c in COMMITTED.items()}


async def test_prometheus_reads_a_share_groups_records_by_state(tmp_path: Path) -> None:
    """Records really produced; a share group's steps taken on the coordinator; Prometheus's
    figures of the share-partition are the state those steps left."""
    coordinator = open_coordinator("sqlite", tmp_path, SystemClock())
    store = LocalObjectStore(tmp_path / "objects")
    tp = TopicPartition(TOPIC, 0)
    limits = ShareLimits(lock_duration_ms=600_000)  # no lock runs out during the test
    try:
        async with observed_cluster(store, coordinator, ServerConfig()) as (cluster, observed):
            await cluster.create_topic(TOPIC, 2)
            await asyncio.to_thread(produce, cluster.bootstrap(), TOPIC, 300, 2)
            (latest,) = await coordinator.list_offsets([ListOffsetsRequest(tp, OffsetSpec.LATEST)])
            high = latest.offset

            def fetch(n: int) -> list[ShareFetchPartition]:
                return [ShareFetchPartition(tp, n, high, log_start=0, initial_start=0)]

            await coordinator.acquire_share_records(SHARE_GROUP, "a", fetch(10), limits)
            acks = [
                AcknowledgeBatch(0, 3, (AcknowledgeType.ACCEPT,)),
                AcknowledgeBatch(4, 5, (AcknowledgeType.RELEASE, AcknowledgeType.REJECT)),
            ]
            await coordinator.acknowledge_share_records(SHARE_GROUP, "a", {tp: acks}, limits)
            await coordinator.acquire_share_records(SHARE_GROUP, "b", fetch(5), limits)
            # The share group's coordinator reports it; its membership is not part of this test.
            assert observed.shares is not None
            observed.shares.groups = lambda: [SHARE_GROUP]
            labels = f'group="{SHARE_GROUP}",topic="{TOPIC}",partition="0"'
            with prometheus_server(tmp_path, observed.endpoint.address) as prometheus:
                figures = {
                    state: await asyncio.to_thread(
                        wait_for,
                        prometheus,
                        f'diskless_share_records{{{labels},state="{state}"}}',
                        expected,
                    )
                    for state, expected in {
                        "available": high - 14,  # 14 onwards, never delivered
                        "acquired": 9,  # 4 (again) and 10-13 by b, 6-9 by a
                        "acknowledged": 0,  # 0-3, passed by the start
                        "archived": 1,  # 5
                    }.items()
                }
                redelivered = await asyncio.to_thread(
                    wait_for, prometheus, f"diskless_share_records_redelivered{{{labels}}}", 1
                )
    finally:
        await coordinator.close()
        await store.close()
    assert high > 14
    assert figures == {"available": high - 14, "acquired": 9, "acknowledged": 0, "archived": 1}
    assert redelivered == 1
