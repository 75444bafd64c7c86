"""End-to-end latency, produce to consume, as a real client sees it.

    .venv/bin/python -m benchmarks.bench_fetch_latency [--messages N] [--interval-ms MS]
        [--backend sqlite|postgres|all] [--code DIR]

One broker process (`python -m diskless.kafka_server --brokers 1 --no-lifecycle`, default
commit interval 250 ms) and, in this process, a confluent-kafka producer (acks=all, linger 0)
sending one small record every `--interval-ms` to one partition, stamped with the send time,
and a consumer (default fetch.wait.max.ms 500, fetch.min.bytes 1) assigned to that partition,
which notes when each record arrives. Reported: percentiles of the produce acknowledgement
latency and of the end-to-end latency (send to consume), both on this process's monotonic
clock, and e2e p99 minus produce p99.

`--code DIR` runs the broker from another checkout (its `diskless` package first on the
broker's PYTHONPATH), to compare two versions of the broker under the same clients.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import statistics
import struct
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Final

from benchmarks.bench_fetch_idle import postgres_database

TOPIC: Final = "latency"
START_TIMEOUT_S: Final = 60.0
_STAMP = struct.Struct(">qd")  # sequence number, send time (monotonic seconds)


@contextlib.contextmanager
def broker(data_dir: Path, coordinator: str | None, code: Path | None) -> Iterator[str]:
    """A broker process while the block runs; its bootstrap address."""
    argv = [
        sys.executable, "-m", "diskless.kafka_server", "--brokers", "1", "--racks", "1",
        "--base-port", "0", "--no-lifecycle", "--log-level", "WARNING", "--data-dir", str(data_dir),
        "--topic", f"{TOPIC}:1",
    ]  # fmt: skip
    if coordinator is not None:
        argv += ["--coordinator", coordinator]
    env = dict(os.environ)
    if code is not None:
        env["PYTHONPATH"] = str(code)
    process = subprocess.Popen(
        argv, stdout=subprocess.PIPE, text=True, env=env, cwd=code if code is not None else None
    )
    try:
        assert process.stdout is not None
        deadline = time.monotonic() + START_TIMEOUT_S
        for line in process.stdout:
            if line.startswith("bootstrap.servers="):
                address = line.split("=", 1)[1].strip()
                break
            if time.monotonic() > deadline:
                raise SystemExit("the broker process did not start")
        else:
            raise SystemExit("the broker process exited before serving")
        threading.Thread(target=process.stdout.read, daemon=True).start()
        yield address
    finally:
        process.terminate()
        try:
            process.wait(30)
        except subprocess.TimeoutExpired:
            process.kill()


def measure(address: str, messages: int, interval_s: float) -> tuple[list[float], list[float]]:
    """(produce acknowledgement latencies, end-to-end latencies), in seconds."""
    from confluent_kafka import Consumer, Producer
    from confluent_kafka import TopicPartition as CkPartition

    consumer = Consumer(
        {
            "bootstrap.servers": address,
            "group.id": "latency",
            "enable.auto.commit": False,
            "auto.offset.reset": "earliest",
        }
    )
    consumer.assign([CkPartition(TOPIC, 0, 0)])
    received: dict[int, float] = {}
    done = threading.Event()

    def consume() -> None:
        while not done.is_set():
            message = consumer.poll(0.1)
            if message is None or message.error() is not None:
                continue
            sequence, _ = _STAMP.unpack(message.value())
            received[sequence] = time.monotonic()

    reader = threading.Thread(target=consume, daemon=True)
    reader.start()
    producer = Producer({"bootstrap.servers": address, "acks": "all", "linger.ms": 0})
    sent: dict[int, float] = {}
    acked: dict[int, float] = {}

    def on_delivery(error: object, message: object) -> None:
        if error is None:
            sequence, _ = _STAMP.unpack(message.value())  # type: ignore[attr-defined]
            acked[sequence] = time.monotonic()

    def serve_callbacks() -> None:  # acknowledgements are noted as soon as they arrive
        while not done.is_set():
            producer.poll(0.002)

    callbacks = threading.Thread(target=serve_callbacks, daemon=True)
    callbacks.start()
    time.sleep(2.0)  # the consumer has joined and fetches
    for sequence in range(messages):
        sent[sequence] = time.monotonic()
        producer.produce(TOPIC, _STAMP.pack(sequence, sent[sequence]), partition=0,
                         on_delivery=on_delivery)  # fmt: skip
        time.sleep(interval_s)
    producer.flush(30)
    deadline = time.monotonic() + 30
    while len(received) < messages and time.monotonic() < deadline:
        time.sleep(0.05)
    done.set()
    reader.join()
    callbacks.join()
    consumer.close()
    missing = messages - len(received)
    if missing:
        raise SystemExit(f"{missing} records were never consumed")
    produce = [acked[s] - sent[s] for s in sorted(acked)]
    e2e = [received[s] - sent[s] for s in sorted(received)]
    return produce, e2e


def _percentiles(values: Sequence[float]) -> tuple[float, float, float]:
    cuts = statistics.quantiles(values, n=100, method="inclusive")
    return cuts[49] * 1000, cuts[89] * 1000, cuts[98] * 1000


def run_backend(
    backend: str, messages: int, interval_s: float, code: Path | None, dsn: str | None
) -> None:
    async def database() -> None:
        async with postgres_database(dsn) as (admin, name):
            coordinator = admin.rsplit("/", 1)[0] + "/" + name
            await asyncio.to_thread(_run, coordinator)

    def _run(coordinator: str | None) -> None:
        with (
            tempfile.TemporaryDirectory(prefix="fetch-latency-") as data_dir,
            broker(Path(data_dir), coordinator, code) as address,
        ):
            produce, e2e = measure(address, messages, interval_s)
        p = _percentiles(produce)
        e = _percentiles(e2e)
        print(f"{backend:<8} produce ack  p50 {p[0]:6.1f}  p90 {p[1]:6.1f}  p99 {p[2]:6.1f} ms")
        print(f"{'':<8} end to end   p50 {e[0]:6.1f}  p90 {e[1]:6.1f}  p99 {e[2]:6.1f} ms"
              f"   (e2e p99 - produce p99: {e[2] - p[2]:+.1f} ms)")  # fmt: skip

    if backend == "postgres":
        asyncio.run(database())
    else:
        _run(None)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--messages", type=int, default=300)
    parser.add_argument("--interval-ms", type=float, default=20.0)
    parser.add_argument("--backend", choices=("sqlite", "postgres", "all"), default="all")
    parser.add_argument("--code", type=Path, default=None)
    parser.add_argument("--postgres", default=None, help="an admin DSN (default: a throwaway)")
    args = parser.parse_args()
    chosen = ["sqlite", "postgres"] if args.backend == "all" else [args.backend]
    print(f"{args.messages} records, one every {args.interval_ms:g} ms, acks=all")
    for name in chosen:
        run_backend(name, args.messages, args.interval_ms / 1000, args.code, args.postgres)
