"""Integration: the metrics endpoint of a running cluster, as Prometheus sees it.

Real clients (confluent-kafka) produce, consume and commit; the scrape is read with
prometheus_client's parser and linted with `promtool check metrics`, on every coordinator
backend. The bytes-in counter of a topic must equal the bytes of the record batches the
producer sent, measured independently (read back and sized by kafka-python's decoder); a group's
lag must equal the high watermark the client sees minus the offset it committed; topics past
`metrics_topics_max` are counted under `topic="__other__"`.
"""

from __future__ import annotations

import asyncio
import random
import time
from pathlib import Path

import pytest
from confluent_kafka import Consumer

from diskless.clock import SystemClock
from diskless.coordinator import CallFaults, FaultyBatchCoordinator
from diskless.kafka_server import Observability, ServerConfig
from diskless.storage import FaultyObjectStore, LocalObjectStore
from testkit.backends import BACKENDS, open_coordinator
from testkit.metrics import (
    COMMITTED,
    GROUP,
    TOPIC,
    batch_bytes,
    commit_and_read_watermarks,
    http_get,
    observed_cluster,
    produce,
    promtool_check,
    samples,
    scrape,
    value,
)

OVERFLOW = "unmetered"
REGISTRATION_WAIT_S = 30.0


def settled(readyz: str) -> tuple[int, str]:
    """/readyz's answer once the brokers' addresses are announced (the cluster view announces
    them in the coordinator's registry just after they start) and readiness checked them."""
    deadline = time.monotonic() + REGISTRATION_WAIT_S
    while True:
        status, body = http_get(readyz)
        starting = "holds no live registration" in body or "not been checked yet" in body
        if not starting or time.monotonic() > deadline:
            return status, body
        time.sleep(0.05)


def answer_with(readyz: str, prefix: str) -> tuple[int, str]:
    """/readyz's answer once it starts with `prefix` (its checks run every second or so)."""
    deadline = time.monotonic() + REGISTRATION_WAIT_S
    while True:
        status, body = http_get(readyz)
        if body.startswith(prefix):
            return status, body
        assert time.monotonic() < deadline, body
        time.sleep(0.05)


def consume_all(bootstrap: str, count: int) -> None:
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": "reader",
            "auto.offset.reset": "earliest",
            "enable.auto.commit": False,
        }
    )
    try:
        consumer.subscribe([TOPIC])
        seen = 0
        for _ in range(600):
            message = consumer.poll(0.1)
            if message is not None and message.error() is None:
                seen += 1
            if seen == count:
                return
        raise AssertionError(f"read {seen} of {count} records")
    finally:
        consumer.close()


@pytest.mark.parametrize("backend", BACKENDS)
async def test_a_scrape_counts_what_real_clients_did_and_passes_promtool(
    backend: str, tmp_path: Path
) -> None:
    coordinator = open_coordinator(backend, tmp_path, SystemClock())
    store = LocalObjectStore(tmp_path / "objects")
    config = ServerConfig(fetch_wait_ms_max=200, metrics_topics_max=1)
    try:
        async with observed_cluster(store, coordinator, config) as (cluster, observability):
            await cluster.create_topic(TOPIC, 2)
            await cluster.create_topic(OVERFLOW, 1)
            bootstrap = cluster.bootstrap()
            await asyncio.to_thread(produce, bootstrap, TOPIC, 200, 2)
            await asyncio.to_thread(produce, bootstrap, OVERFLOW, 20, 1)
            await asyncio.to_thread(consume_all, bootstrap, 200)
            high, refused = await asyncio.to_thread(commit_and_read_watermarks, bootstrap)
            text = await scrape(observability)
            sent = await batch_bytes(cluster, TOPIC, 2)
            overflow_sent = await batch_bytes(cluster, OVERFLOW, 1)
    finally:
        await coordinator.close()
        await store.close()

    promtool_check(text)
    assert sent > 0
    assert value(text, "diskless_topic_bytes_in_total", topic=TOPIC) == sent
    assert value(text, "diskless_topic_records_in_total", topic=TOPIC) == 200
    # The second topic is past metrics_topics_max = 1: counted, under the fallback label.
    assert value(text, "diskless_topic_bytes_in_total", topic=OVERFLOW) is None
    assert value(text, "diskless_topic_bytes_in_total", topic="__other__") == overflow_sent
    # The consumer read every record once, and fetch answers may repeat none of the batches it
    # asked from their start.
    out = value(text, "diskless_topic_records_out_total", topic=TOPIC)
    assert out is not None and out >= 200
    for partition, committed in COMMITTED.items():
        lag = value(
            text, "diskless_consumer_group_lag", group=GROUP, topic=TOPIC, partition=str(partition)
        )
        assert lag == high[partition] - committed, (partition, lag, high)
    # The refused commit is counted under its API and error (librdkafka may retry it), the
    # accepted one under none.
    assert refused != 0
    errors = value(
        text,
        "diskless_request_errors_total",
        api="OFFSET_COMMIT",
        error="UNKNOWN_TOPIC_OR_PARTITION",
    )
    commits = value(text, "diskless_requests_total", api="OFFSET_COMMIT")
    assert errors is not None and commits is not None
    assert 1 <= errors <= commits - 1
    assert value(text, "diskless_request_errors_total", api="PRODUCE", error="NONE") is None
    # Every commit step of the write path was timed, under its operation.
    steps = value(text, "diskless_coordinator_steps_total", operation="commit_files", outcome="ok")
    produced = value(text, "diskless_wal_commit_steps_total", broker="0")
    assert steps is not None and steps == produced
    puts = sum(
        v
        for (name, _), v in samples(text).items()
        if name == "diskless_topic_object_put_requests_total"
    )
    assert puts == pytest.approx(value(text, "diskless_wal_objects_committed_total", broker="0"))
    assert value(text, "process_open_fds") is not None


async def test_alive_always_ready_once_the_brokers_are_registered(tmp_path: Path) -> None:
    coordinator = open_coordinator("sqlite", tmp_path, SystemClock())
    store = LocalObjectStore(tmp_path / "objects")
    observability = Observability(store, coordinator)
    await observability.start("127.0.0.1:0")
    base = f"http://{observability.endpoint.address}"
    try:
        assert await asyncio.to_thread(http_get, f"{base}/healthz") == (200, "ok\n")
        assert await asyncio.to_thread(http_get, f"{base}/readyz") == (
            503,
            "not ready: the brokers have not started\n",
        )
        assert (await asyncio.to_thread(http_get, f"{base}/nowhere"))[0] == 404
    finally:
        await observability.close()
    async with observed_cluster(store, coordinator, ServerConfig()) as (_, observability):
        readyz = f"http://{observability.endpoint.address}/readyz"
        assert await asyncio.to_thread(settled, readyz) == (200, "ready\n")
    await coordinator.close()
    await store.close()


async def test_not_ready_names_the_part_that_does_not_answer(tmp_path: Path) -> None:
    inner = open_coordinator("sqlite", tmp_path, SystemClock())
    coordinator = FaultyBatchCoordinator(inner, reads=CallFaults(fail_rate=1.0))
    coordinator.enabled = False
    # No produce here, so only readiness's probe meets the failed writes.
    store = FaultyObjectStore(
        LocalObjectStore(tmp_path / "objects"), random.Random(0), put_fail_rate=1.0
    )
    try:
        async with observed_cluster(store, coordinator, ServerConfig()) as (_, observability):
            readyz = f"http://{observability.endpoint.address}/readyz"
            status, body = await asyncio.to_thread(
                answer_with, readyz, "not ready: the object store cannot be written: "
            )
            assert status == 503
            coordinator.enabled = True
            status, body = await asyncio.to_thread(
                answer_with, readyz, "not ready: the coordinator does not answer: "
            )
            coordinator.enabled = False
            assert status == 503
            assert body.count("\n") == 1
            status, _ = await asyncio.to_thread(
                http_get, f"http://{observability.endpoint.address}/healthz"
            )
            assert status == 200
    finally:
        await coordinator.close()
        await store.close()
