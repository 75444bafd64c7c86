"""What one hostile client can cost the others: memory, connections, event-loop time, log lines.

Integration tests against real servers on 127.0.0.1: the memory test runs the command
(`python -m diskless.kafka_server`) as a subprocess so that its RSS can be read; the others run a
cluster in-process with short limits. The latency test is the one wall-clock acceptance test the
server has: it compares a bystander's worst latency with the big request's own processing time.
"""

from __future__ import annotations

import asyncio
import datetime
import logging
import os
import signal
import socket
import struct
import subprocess
import sys
import time
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from kio.schema.api_versions.v3.request import ApiVersionsRequest
from kio.schema.errors import ErrorCode as WireError
from kio.schema.produce.v9 import request as produce_v9

from diskless.coordinator import InMemoryBatchCoordinator
from diskless.kafka_server import KafkaCluster, ServerConfig
from diskless.storage import MemoryObjectStore
from testkit.wire import WireClient, encode_request

MIB = 1024 * 1024
API_VERSIONS = ApiVersionsRequest(client_software_name="wire", client_software_version="1")


def _rss_bytes(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    raise AssertionError("no VmRSS")


def _send_what_fits(sockets: list[socket.socket], payloads: list[bytes]) -> list[int]:
    """Send round-robin until every payload is sent or the server stops taking any for 2 s."""
    sent = [0] * len(sockets)
    last_progress = time.monotonic()
    while time.monotonic() - last_progress < 2.0 and any(
        n < len(p) for n, p in zip(sent, payloads, strict=True)
    ):
        for i, (sock, payload) in enumerate(zip(sockets, payloads, strict=True)):
            if sent[i] == len(payload):
                continue
            try:
                n = sock.send(payload[sent[i] : sent[i] + MIB])
            except BlockingIOError:
                continue
            sent[i] += n
            last_progress = time.monotonic()
        time.sleep(0.001)
    return sent


def _api_versions_over_socket(port: int) -> None:
    with socket.create_connection(("127.0.0.1", port), timeout=10) as sock:
        sock.sendall(encode_request(API_VERSIONS, 1))
        size = struct.unpack(">i", sock.recv(4, socket.MSG_WAITALL))[0]
        assert struct.unpack(">i", sock.recv(4, socket.MSG_WAITALL))[0] == 1
        assert size > 4


def test_six_large_partial_frames_stay_within_the_queued_bytes_bound(tmp_path: Path) -> None:
    bound = 32 * MIB  # frame_bytes_max too: a frame must fit in the budget
    frame_size, partial = 30 * MIB, 28 * MIB
    process = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "diskless.kafka_server",
            "--brokers=1",
            "--racks=1",
            "--base-port=0",
            f"--data-dir={tmp_path}",
            f"--server-option=queued_request_bytes_max={bound}",
            f"--server-option=frame_bytes_max={bound}",
            "--server-option=frame_receive_ms_max=60000",
            "--log-level=WARNING",
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=dict(os.environ, PYTHONUNBUFFERED="1"),
    )
    sockets: list[socket.socket] = []
    try:
        assert process.stdout is not None
        bootstrap = next(line for line in process.stdout if line.startswith("bootstrap.servers="))
        port = int(bootstrap.strip().rpartition(":")[2])
        _api_versions_over_socket(port)  # warm: imports and first allocations are done
        before = _rss_bytes(process.pid)
        payload = struct.pack(">i", frame_size) + b"\x00" * partial
        for _ in range(6):
            sock = socket.create_connection(("127.0.0.1", port))
            sock.setblocking(False)
            sockets.append(sock)
        sent = _send_what_fits(sockets, [payload] * 6)
        time.sleep(0.5)
        growth = _rss_bytes(process.pid) - before
        print(f"RSS growth {growth / MIB:.1f} MiB, sent {[round(n / MIB, 1) for n in sent]} MiB")
        # One frame is admitted; the others wait at their prefix, their bytes in kernel buffers.
        assert growth < bound + 16 * MIB, f"RSS grew by {growth / MIB:.1f} MiB"
        # Flow control holds the five waiting clients (an unbounded server read all of it).
        assert sum(n < len(payload) for n in sent) == 5, sent
    finally:
        for sock in sockets:
            sock.close()
        try:
            if process.poll() is None:
                _api_versions_over_socket(port)  # released: the server still answers
        finally:
            process.send_signal(signal.SIGTERM)
            _, stderr = process.communicate(timeout=30)
    assert process.returncode == 0, stderr


def _limited(**limits: int) -> ServerConfig:
    return ServerConfig(fetch_wait_ms_max=500, **limits)


@pytest.fixture
async def small_limits() -> AsyncIterator[KafkaCluster]:
    coordinator = InMemoryBatchCoordinator()
    config = _limited(
        connections_idle_ms_max=800,
        frame_receive_ms_max=500,
        frame_bytes_max=MIB,
        queued_request_bytes_max=MIB,
        close_warnings_max=3,
        close_warning_interval_ms=60_000,
    )
    async with KafkaCluster(
        MemoryObjectStore(), coordinator, brokers=1, racks=1, server_config=config
    ) as running:
        yield running
    await coordinator.close()


async def _closed_after(client: WireClient, timeout_s: float) -> float:
    """Seconds until the server closes `client`'s connection."""
    start = time.monotonic()
    data = await asyncio.wait_for(client.reader.read(), timeout_s)
    assert data == b""
    return time.monotonic() - start


async def test_idle_and_slow_loris_connections_are_closed_while_a_healthy_client_works(
    small_limits: KafkaCluster, caplog: pytest.LogCaptureFixture
) -> None:
    server = small_limits.servers[0]
    idle = await WireClient.connect(server)
    loris = await WireClient.connect(server)
    healthy = await WireClient.connect(server)
    answered = 0

    async def trickle() -> None:
        await loris.send_raw(struct.pack(">i", 100))
        for _ in range(100):  # one byte every 50 ms: 5 s for the frame, 10x its deadline
            await loris.send_raw(b"\x00")
            await asyncio.sleep(0.05)

    async def work(stop: asyncio.Event) -> None:
        nonlocal answered
        while not stop.is_set():
            response = await healthy.request(API_VERSIONS)
            assert response.error_code == WireError.none
            answered += 1
            await asyncio.sleep(0.05)

    stop = asyncio.Event()
    with caplog.at_level(logging.WARNING, logger="diskless.kafka_server"):
        trickling = asyncio.create_task(trickle())
        working = asyncio.create_task(work(stop))
        try:
            idle_s, loris_s = await asyncio.gather(
                _closed_after(idle, 10), _closed_after(loris, 10)
            )
            await asyncio.sleep(1.0)  # the healthy client outlives the idle timeout
        finally:
            stop.set()
            trickling.cancel()
            await asyncio.gather(trickling, working, return_exceptions=True)
            for client in (idle, loris, healthy):
                await client.close()
    assert working.exception() is None
    print(f"idle closed after {idle_s:.2f} s, slow loris after {loris_s:.2f} s")
    assert 0.7 <= idle_s < 5
    assert 0.4 <= loris_s < 5
    assert "frame body not received within 500 ms" in caplog.text
    assert answered >= 20  # about 2 s of requests, every one answered


async def test_a_frame_waits_for_memory_and_goes_on_when_it_is_freed(
    small_limits: KafkaCluster,
) -> None:
    server = small_limits.servers[0]
    hog = await WireClient.connect(server)
    waiter = await WireClient.connect(server)
    try:
        await hog.send_raw(struct.pack(">i", MIB) + b"\x00" * 1000)  # the whole budget
        await asyncio.sleep(0.1)
        assert server.request_budget.reserved == MIB
        started = time.monotonic()
        response = await waiter.request(API_VERSIONS)  # waits until the hog is closed
        assert response.error_code == WireError.none
        assert time.monotonic() - started >= 0.3  # it did wait for the hog's deadline
        assert await hog.read_frame() is None
    finally:
        await hog.close()
        await waiter.close()
    assert server.request_budget.reserved == 0


def _produce_to_many_topics(topics: int) -> bytes:
    body = produce_v9.ProduceRequest(
        transactional_id=None,
        acks=1,
        timeout=datetime.timedelta(seconds=30),
        topic_data=tuple(
            produce_v9.TopicProduceData(
                name=f"t{i}",
                partition_data=(produce_v9.PartitionProduceData(index=0, records=b""),),
            )
            for i in range(topics)
        ),
    )
    return encode_request(body, 1)


async def test_a_huge_request_does_not_stall_another_connection(cluster: KafkaCluster) -> None:
    server = cluster.servers[0]
    big_frame = _produce_to_many_topics(100_000)
    big = await WireClient.connect(server)
    bystander = await WireClient.connect(server)
    latencies: list[float] = []

    async def small_requests(stop: asyncio.Event) -> None:
        while not stop.is_set():
            started = time.perf_counter()
            assert (await bystander.request(API_VERSIONS)).error_code == WireError.none
            latencies.append(time.perf_counter() - started)

    try:
        await bystander.request(API_VERSIONS)
        stop = asyncio.Event()
        measuring = asyncio.create_task(small_requests(stop))
        await asyncio.sleep(0.05)
        started = time.perf_counter()
        await big.send_raw(big_frame)
        answer = await big.read_frame(timeout_s=120)
        big_s = time.perf_counter() - started
        stop.set()
        await measuring
    finally:
        await big.close()
        await bystander.close()
    assert answer is not None and len(answer) > 100_000 * 10
    worst = max(latencies)
    print(
        f"100,000-topic produce: {big_s:.2f} s; bystander: {len(latencies)} requests, "
        f"worst {worst * 1000:.0f} ms"
    )
    # Unbounded steps kept the bystander waiting for almost all of it (2.25 s of 2.42 s).
    assert worst < 0.5 * big_s
    assert len(latencies) >= 10


async def test_warnings_about_closed_connections_are_rate_limited(
    small_limits: KafkaCluster, caplog: pytest.LogCaptureFixture
) -> None:
    server = small_limits.servers[0]
    with caplog.at_level(logging.WARNING, logger="diskless.kafka_server"):
        for _ in range(30):
            client = await WireClient.connect(server)
            await client.send_raw(struct.pack(">i", -5))
            assert await client.read_frame() is None
            await client.close()
        closes = [r for r in caplog.records if "closing" in r.getMessage()]
        assert len(closes) == 3
        assert "frame size -5" in closes[0].getMessage()
        await server.close()  # reports what was left out
    summaries = [r for r in caplog.records if "were not logged one by one" in r.getMessage()]
    assert [r.getMessage().split()[0] for r in summaries] == ["27"]
