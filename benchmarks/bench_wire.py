"""What one broker process gives Kafka clients on the wire: produce with clients' defaults against
a tuned producer, the CPU a read costs against a write, and the PUTs of a trickle.

    .venv/bin/python -m benchmarks.bench_wire [--scale X] [--trickle-s S] [--json PATH]
        [--broker-args "--rotate-interval-min-ms 20 ..."]

One `python -m diskless.kafka_server` process runs one broker with its embedded parts (local
object store, SQLite coordinator) in a temporary data directory, retention and consolidation off
(`--no-lifecycle`: the only objects written are the WAL's). A warm-up (the tuned producer
writing to another topic) and 2 s of the broker left idle (its busy % is reported) come first.
Then one topic of 12 partitions; every scenario writes 1 KB records to it round-robin over the
partitions, with one confluent-kafka producer, idempotent, acks=all:

- `defaults`: librdkafka's defaults (only bootstrap, acks=all, idempotence);
- `batch.size 16384`: the Java client's default batch size, everything else librdkafka's;
- `tuned` (the baseline of the run): `batch.size` 1 MiB, `linger.ms` 20.

Each scenario writes a fixed amount (its MB times `--scale`), from its first record to the end
of `flush` (every record acknowledged, so every object holding them written). Reported per
scenario: MB/s, the broker process's CPU busy % over that time (user + system time from
/proc/PID/stat over wall time), broker CPU ms per MB, and WAL objects written per second and per
GB (10^9 bytes; files under the store directory's `wal/`). Then one consumer (librdkafka's
defaults, partitions assigned from offset 0) drains everything written: broker CPU ms per MB
consumed, and its ratio to the CPU per MB the tuned producer cost (target <= 0.5): most of the
bytes read are the saturating scenarios', where an idle broker's own CPU weighs little. Then a
trickle, one record every 10 ms for `--trickle-s` seconds with librdkafka's defaults: objects
(PUTs) per second. Ratios are against the tuned scenario of the same run. The producing and
consuming clients run on the same machine as the broker and take CPU of their own; the broker's
busy % is of one core.
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import shlex
import sys
import tempfile
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Final

from confluent_kafka import Consumer, KafkaError, Message, Producer, TopicPartition

from diskless.storage._local import TEMP_MARKER
from testkit.processes import BrokerProcess

TOPIC: Final = "bench-wire"
WARM_UP_TOPIC: Final = "bench-wire-warm-up"
PARTITIONS: Final = 12
RECORD_BYTES: Final = 1000
MB: Final = 1_000_000
GB: Final = 1_000_000_000
KIB: Final = 1024
MIB: Final = 1024 * KIB
BASELINE: Final = "tuned"
SCENARIOS: Final[dict[str, tuple[float, dict[str, object]]]] = {
    # name: (MB written at scale 1, producer settings beyond bootstrap, acks=all, idempotence)
    "defaults": (100.0, {}),
    "batch.size 16384": (4.0, {"batch.size": 16 * KIB}),
    BASELINE: (100.0, {"batch.size": MIB, "linger.ms": 20}),
}
WARM_UP_MB: Final = 10.0
"""Written (at scale 1) with the tuned settings to another topic before anything is measured:
the first scenario then does not pay the process's warm-up alone."""
IDLE_S: Final = 2.0
TRICKLE_INTERVAL_S: Final = 0.010
TARGET_CONSUME_PRODUCE_CPU_RATIO: Final = 0.5
FLUSH_TIMEOUT_S: Final = 300.0
DRAIN_TIMEOUT_S: Final = 300.0


@dataclass(frozen=True)
class Figures:
    """One scenario's measurements: bytes moved, wall and broker CPU seconds, objects written."""

    name: str
    bytes: int
    seconds: float
    cpu_seconds: float
    objects: int

    @property
    def mb_per_s(self) -> float:
        return self.bytes / MB / self.seconds

    @property
    def busy(self) -> float:
        return self.cpu_seconds / self.seconds

    @property
    def cpu_ms_per_mb(self) -> float:
        return self.cpu_seconds * 1000 / (self.bytes / MB)

    @property
    def objects_per_s(self) -> float:
        return self.objects / self.seconds

    @property
    def objects_per_gb(self) -> float:
        return self.objects / (self.bytes / GB)

    def row(self) -> dict[str, float | int | str]:
        return {
            **asdict(self),
            "mb_per_s": self.mb_per_s,
            "busy": self.busy,
            "cpu_ms_per_mb": self.cpu_ms_per_mb,
            "objects_per_s": self.objects_per_s,
            "objects_per_gb": self.objects_per_gb,
        }


class Broker:
    """The broker process under measurement, and what it wrote to its store."""

    def __init__(self, process: BrokerProcess, objects: Path) -> None:
        self._process = process
        self._objects = objects
        self.bootstrap = process.address

    def cpu_seconds(self) -> float:
        """User + system CPU time of the broker process so far (all its threads)."""
        assert self._process.process is not None
        stat = Path(f"/proc/{self._process.process.pid}/stat").read_text()
        fields = stat.rpartition(")")[2].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")

    def objects_written(self) -> int:
        """WAL objects in the store (none are deleted: lifecycle is off)."""
        return sum(
            1
            for path in (self._objects / "wal").rglob("*")
            if path.is_file() and not path.name.startswith(TEMP_MARKER)
        )

    def idle_busy(self, seconds: float) -> float:
        """The broker's CPU busy share over `seconds` of nothing asked of it."""
        cpu = self.cpu_seconds()
        time.sleep(seconds)
        return (self.cpu_seconds() - cpu) / seconds

    def measure(self, name: str, work: Callable[[], int]) -> Figures:
        """Run `work` (it returns the bytes it moved) and measure the broker around it."""
        objects, cpu, started = self.objects_written(), self.cpu_seconds(), time.perf_counter()
        moved = work()
        seconds = time.perf_counter() - started
        return Figures(
            name, moved, seconds, self.cpu_seconds() - cpu, self.objects_written() - objects
        )


@contextmanager
def running_broker(directory: Path, broker_args: Sequence[str] = ()) -> Iterator[Broker]:
    """The broker process, with `broker_args` (e.g. the WAL's rotation settings) after the
    benchmark's own options."""
    data = directory / "data"
    options = [
        "--data-dir", str(data), "--topic", f"{TOPIC}:{PARTITIONS}",
        "--topic", f"{WARM_UP_TOPIC}:{PARTITIONS}", "--no-lifecycle", *broker_args,
    ]  # fmt: skip
    process = BrokerProcess(0, 1, options, directory / "broker.log")
    process.start()
    try:
        yield Broker(process, data / "objects")
    finally:
        process.stop()


class Delivery:
    """Counts a producer's delivery reports; any failure ends the run (figures would lie)."""

    def __init__(self) -> None:
        self.failures: list[KafkaError] = []

    def __call__(self, error: KafkaError | None, _: Message) -> None:
        if error is not None:
            self.failures.append(error)

    def check(self, left: int) -> None:
        if left or self.failures:
            raise SystemExit(f"{left} records unsent, {len(self.failures)} failed: "
                             f"{self.failures[:3]}")  # fmt: skip


def producer(bootstrap: str, settings: dict[str, object]) -> Producer:
    """A producer ready to send before the clock starts: connected, with the topic's metadata,
    and holding its producer id.

    One record to the warm-up topic, acknowledged, proves the last. Without it a scenario would
    count the client's own start: librdkafka asks for its producer id only once a broker
    connection is up, and when `list_topics` is answered before that, it retries 500 ms later.
    """
    client = Producer(
        {"bootstrap.servers": bootstrap, "acks": "all", "enable.idempotence": True, **settings}
    )
    client.list_topics(TOPIC, timeout=30)
    delivery = Delivery()
    client.produce(WARM_UP_TOPIC, b"ready", partition=0, on_delivery=delivery)
    delivery.check(client.flush(FLUSH_TIMEOUT_S))
    return client


def produce(client: Producer, total_bytes: int, topic: str = TOPIC) -> int:
    """Send `total_bytes` of 1 KB records round-robin over the partitions; every one acked."""
    value = os.urandom(RECORD_BYTES)
    count = max(1, total_bytes // RECORD_BYTES)
    delivery = Delivery()
    for i in range(count):
        while True:
            try:
                client.produce(topic, value, partition=i % PARTITIONS, on_delivery=delivery)
                break
            except BufferError:
                client.poll(0.01)
        client.poll(0)
    delivery.check(client.flush(FLUSH_TIMEOUT_S))
    return count * RECORD_BYTES


def trickle(client: Producer, seconds: float) -> int:
    """One record every 10 ms for `seconds`, each acked by the end."""
    value = os.urandom(RECORD_BYTES)
    delivery = Delivery()
    count = max(1, round(seconds / TRICKLE_INTERVAL_S))
    started = time.perf_counter()
    for i in range(count):
        client.produce(TOPIC, value, partition=i % PARTITIONS, on_delivery=delivery)
        client.poll(max(0.0, started + (i + 1) * TRICKLE_INTERVAL_S - time.perf_counter()))
    delivery.check(client.flush(FLUSH_TIMEOUT_S))
    return count * RECORD_BYTES


def drain(bootstrap: str) -> Callable[[], int]:
    """A consumer of every partition from offset 0, ready; the returned call reads up to the
    high watermarks and returns the value bytes read."""
    consumer = Consumer(
        {"bootstrap.servers": bootstrap, "group.id": "bench-wire", "enable.auto.commit": False}
    )
    ends = {
        p: consumer.get_watermark_offsets(TopicPartition(TOPIC, p), timeout=30)[1]
        for p in range(PARTITIONS)
    }
    consumer.assign([TopicPartition(TOPIC, p, 0) for p in range(PARTITIONS)])

    def read() -> int:
        left = {p: end for p, end in ends.items() if end > 0}
        moved = 0
        deadline = time.monotonic() + DRAIN_TIMEOUT_S
        try:
            while left:
                if time.monotonic() > deadline:
                    raise SystemExit(f"the consumer did not reach the end: {left}")
                for message in consumer.consume(10_000, 1.0):
                    if (error := message.error()) is not None:
                        raise SystemExit(f"consume failed: {error}")
                    moved += len(message.value() or b"")
                    partition, offset = message.partition(), message.offset()
                    assert partition is not None and offset is not None
                    if offset + 1 >= left.get(partition, sys.maxsize):
                        del left[partition]
        finally:
            consumer.close()
        return moved

    return read


@dataclass(frozen=True)
class Report:
    """A run's figures: the produce scenarios (in `SCENARIOS`' order), the drain, the trickle."""

    idle_busy: float
    """The broker's CPU busy share with no client connected (its own timers and polling)."""
    produced: list[Figures]
    consumed: Figures
    trickled: Figures

    @property
    def baseline(self) -> Figures:
        return next(f for f in self.produced if f.name == BASELINE)

    @property
    def consume_produce_cpu_ratio(self) -> float:
        """Broker CPU per MB consumed against per MB produced by the baseline: a producer that
        keeps the broker busy, so that an idle broker's own CPU (its timers, the coordinator's
        polling) weighs little in it, as it weighs little in a drain."""
        return self.consumed.cpu_ms_per_mb / self.baseline.cpu_ms_per_mb

    def as_json(self) -> dict[str, object]:
        return {
            "baseline": BASELINE,
            "idle_busy": self.idle_busy,
            "produce": [f.row() for f in self.produced],
            "consume": self.consumed.row(),
            "consume_produce_cpu_ratio": self.consume_produce_cpu_ratio,
            "trickle": self.trickled.row(),
        }


def run(scale: float, trickle_s: float, broker_args: Sequence[str] = ()) -> Report:
    """Every scenario against one fresh broker process."""
    with (
        tempfile.TemporaryDirectory(prefix="bench-wire-") as name,
        running_broker(Path(name), broker_args) as broker,
    ):
        produce(producer(broker.bootstrap, SCENARIOS[BASELINE][1]), int(WARM_UP_MB * scale * MB),
                WARM_UP_TOPIC)  # fmt: skip
        idle_busy = broker.idle_busy(IDLE_S)
        produced = []
        for scenario, (mb, settings) in SCENARIOS.items():
            client = producer(broker.bootstrap, settings)
            work = functools.partial(produce, client, int(mb * scale * MB))
            produced.append(broker.measure(scenario, work))
            del client, work  # its connections close before the next scenario starts
        consumed = broker.measure("consume", drain(broker.bootstrap))
        client = producer(broker.bootstrap, {})
        trickled = broker.measure("trickle", functools.partial(trickle, client, trickle_s))
        del client
    produced_bytes = sum(f.bytes for f in produced)
    if consumed.bytes != produced_bytes:
        raise SystemExit(f"consumed {consumed.bytes} B of the {produced_bytes} B produced")
    return Report(idle_busy, produced, consumed, trickled)


def print_report(report: Report, scale: float, trickle_s: float) -> None:
    base = report.baseline
    print(
        f"one broker process (local store, SQLite), {PARTITIONS} partitions, {RECORD_BYTES} B"
        f" records, confluent-kafka idempotent acks=all; scale {scale:g}; ratios (x) against"
        f" `{BASELINE}` of this run; busy % of one core"
    )
    header = (
        f"  {'scenario':<17} {'MB':>7} {'MB/s':>7} {'x':>6} {'busy %':>7} {'x':>6}"
        f" {'CPU ms/MB':>9} {'x':>6} {'objects/s':>9} {'x':>6} {'objects/GB':>10}"
    )
    print(header)
    print("  " + "-" * (len(header) - 2))
    for f in [*report.produced, report.consumed, report.trickled]:
        print(
            f"  {f.name:<17} {f.bytes / MB:7.1f} {f.mb_per_s:7.2f}"
            f" {f.mb_per_s / base.mb_per_s:6.2f} {f.busy * 100:7.1f} {f.busy / base.busy:6.2f}"
            f" {f.cpu_ms_per_mb:9.2f} {f.cpu_ms_per_mb / base.cpu_ms_per_mb:6.2f}"
            f" {f.objects_per_s:9.2f} {f.objects_per_s / base.objects_per_s:6.2f}"
            f" {f.objects_per_gb:10.0f}"
        )
    ratio = report.consume_produce_cpu_ratio
    verdict = "PASS" if ratio <= TARGET_CONSUME_PRODUCE_CPU_RATIO else "FAIL"
    print(
        f"  broker CPU per MB consumed / produced by `{BASELINE}`"
        f" ({report.consumed.cpu_ms_per_mb:.2f} / {base.cpu_ms_per_mb:.2f} ms):"
        f" {ratio:.2f}x; target <= {TARGET_CONSUME_PRODUCE_CPU_RATIO}: {verdict}"
    )
    print(f"  idle broker (no client, {IDLE_S:g} s): {report.idle_busy * 100:.1f} % busy")
    print(
        f"  trickle, one record per {TRICKLE_INTERVAL_S * 1000:g} ms for {trickle_s:g} s:"
        f" {report.trickled.objects_per_s:.1f} PUTs per second per broker"
    )


def main(
    scale: float,
    trickle_s: float,
    json_path: Path | None = None,
    broker_args: Sequence[str] = (),
) -> Report:
    """Runs every scenario, prints the table (and writes it as JSON); returns the figures."""
    if broker_args:
        print(f"broker options: {shlex.join(broker_args)}")
    report = run(scale, trickle_s, broker_args)
    print_report(report, scale, trickle_s)
    if json_path is not None:
        json_path.write_text(json.dumps(report.as_json(), indent=2) + "\n")
    return report


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--scale", type=float, default=1.0, help="multiplies every scenario's MB")
    parser.add_argument("--trickle-s", type=float, default=5.0, help="seconds of trickle")
    parser.add_argument("--json", type=Path, default=None, help="also write the figures here")
    parser.add_argument(
        "--broker-args",
        type=shlex.split,
        default=[],
        help="options for the broker process, e.g. '--rotate-interval-min-ms 20'",
    )
    args = parser.parse_args()
    main(args.scale, args.trickle_s, args.json, args.broker_args)
