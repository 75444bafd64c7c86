"""What the metrics tests share: a cluster with its metrics endpoint, scrapes read as Prometheus
reads them, and the bytes real clients produced, read back and sized by kafka-python."""

from __future__ import annotations

import asyncio
import contextlib
import shutil
import subprocess
import urllib.error
import urllib.request
import warnings
from collections.abc import AsyncIterator
from pathlib import Path

from confluent_kafka import Consumer, KafkaException, Producer
from confluent_kafka import TopicPartition as CkTopicPartition
from prometheus_client.parser import text_string_to_metric_families

from diskless import TopicPartition
from diskless.coordinator import BatchCoordinator
from diskless.kafka_server import KafkaCluster, Observability, ServerConfig
from diskless.kafka_server._server.process.services import LifecycleConfig, running_lifecycle
from diskless.storage import ObjectStore
from testkit.cluster import local_cluster

with warnings.catch_warnings():
    warnings.simplefilter("ignore", DeprecationWarning)
    from kafka.record.memory_records import MemoryRecords


@contextlib.asynccontextmanager
async def observed_cluster(
    store: ObjectStore,
    coordinator: BatchCoordinator,
    config: ServerConfig,
    *,
    brokers: int = 1,
    lifecycle: bool = False,
) -> AsyncIterator[tuple[KafkaCluster, Observability]]:
    """A cluster whose metrics and health are served on a free port of 127.0.0.1."""
    observability = Observability(store, coordinator, config)
    await observability.start("127.0.0.1:0")
    try:
        async with (
            local_cluster(
                coordinator,
                store=store,
                brokers=brokers,
                racks=1,
                server_config=config,
                metrics=observability.metrics,
            ) as cluster,
            running_lifecycle(store, coordinator, LifecycleConfig(enabled=lifecycle)) as services,
        ):
            observability.attach(cluster)
            observability.attach_services(services)
            yield cluster, observability
    finally:
        await observability.close()


def http_get(url: str) -> tuple[int, str]:
    """(status, body) of a GET; an HTTP error status is a value, not an exception."""
    try:
        with urllib.request.urlopen(url, timeout=30) as response:
            return response.status, response.read().decode()
    except urllib.error.HTTPError as error:
        return error.code, error.read().decode()


async def scrape(observability: Observability) -> str:
    status, body = await asyncio.to_thread(
        http_get, f"http://{observability.endpoint.address}/metrics"
    )
    assert status == 200, body
    return body


def samples(text: str) -> dict[tuple[str, frozenset[tuple[str, str]]], float]:
    """Every sample of a scrape: (name, labels) -> value, parsed by prometheus_client."""
    return {
        (s.name, frozenset(s.labels.items())): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }


def value(text: str, name: str, **labels: str) -> float | None:
    return samples(text).get((name, frozenset(labels.items())))


def exported_names(text: str) -> set[str]:
    """The metric names a scrape declares (`# TYPE` lines: counters with their `_total`)."""
    return {line.split()[2] for line in text.splitlines() if line.startswith("# TYPE diskless_")}


def promtool_check(text: str) -> None:
    """`promtool check metrics` (Prometheus's linter) on a scrape; fails the test on a finding."""
    promtool = shutil.which("promtool")
    assert promtool is not None, "promtool is missing: ./run installs Debian's prometheus"
    checked = subprocess.run(
        [promtool, "check", "metrics"], input=text, capture_output=True, text=True, timeout=60
    )
    assert checked.returncode == 0, checked.stdout + checked.stderr


async def batch_bytes(cluster: KafkaCluster, topic: str, partitions: int) -> int:
    """Bytes of the record batches stored in `topic`, read back through a fetch and measured
    by kafka-python's decoder: the batches exactly as the producer sent them (a fetch rewrites
    only the base offset)."""
    broker = next(iter(cluster.servers.values())).broker
    total = 0
    for partition in range(partitions):
        tp = TopicPartition(topic, partition)
        offset = 0
        while True:
            fetched = (await broker.fetch({tp: offset}, max_bytes=1 << 30))[tp]
            records = MemoryRecords(fetched.records)
            batches = 0
            while (batch := records.next_batch()) is not None:
                if batch.base_offset >= offset:
                    total += batch.size_in_bytes
                    batches += 1
                offset = max(offset, batch.next_offset)
            if batches == 0:
                break
    return total


def write_prometheus_config(directory: Path, target: str, interval_ms: int) -> Path:
    config = directory / "prometheus.yml"
    config.write_text(
        "global:\n"
        f"  scrape_interval: {interval_ms}ms\n"
        f"  scrape_timeout: {interval_ms}ms\n"
        "scrape_configs:\n"
        "  - job_name: diskless\n"
        "    static_configs:\n"
        f"      - targets: ['{target}']\n"
    )
    return config


TOPIC = "metered"
GROUP = "lagging"
COMMITTED = {0: 3, 1: 0}


def produce(bootstrap: str, topic: str, count: int, partitions: int) -> None:
    producer = Producer(
        {"bootstrap.servers": bootstrap, "linger.ms": 5, "enable.idempotence": True}
    )
    failures: list[object] = []
    for i in range(count):
        producer.produce(
            topic,
            value=f"value-{i}".encode() * (1 + i % 7),
            partition=i % partitions,
            on_delivery=lambda error, _: failures.append(error) if error else None,
        )
    assert producer.flush(60) == 0
    assert not failures, failures


def commit_and_read_watermarks(bootstrap: str) -> tuple[dict[int, int], int]:
    """Commit `COMMITTED` for the group; the high watermarks the client sees, and the error
    code a commit to a partition that does not exist fails with."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": GROUP})
    try:
        wanted = [CkTopicPartition(TOPIC, p, o) for p, o in COMMITTED.items()]
        assert consumer.commit(offsets=wanted, asynchronous=False) is not None
        refused = 0
        try:
            consumer.commit(offsets=[CkTopicPartition(TOPIC, 99, 1)], asynchronous=False)
        except KafkaException as error:
            refused = int(error.args[0].code())
        high = {p: consumer.get_watermark_offsets(CkTopicPartition(TOPIC, p))[1] for p in (0, 1)}
        return high, refused
    finally:
        consumer.close()
