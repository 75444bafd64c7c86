"""Produce throughput over SASL_SSL (SCRAM-SHA-512) against PLAINTEXT, one broker process.

    .venv/bin/python -m benchmarks.bench_security [--mb MB] [--rounds R] [--record-bytes B]

One `python -m diskless.kafka_server` process runs one broker with two listeners on 127.0.0.1:
PLAINTEXT, and SASL_SSL with SCRAM-SHA-512 and a PEM key store whose CA and certificate are
made for the run with the `openssl` command. A SCRAM user is created over PLAINTEXT through
confluent-kafka's AdminClient. Each round, a confluent-kafka producer (acks=all, idempotence
off, `--record-bytes` values) sends `--mb` MB through each listener in turn, the listener that
goes first alternating between rounds so that warm-up and the machine's other load fall on both.
Reported: each listener's median MB/s (first produce to the end of `flush`), and the broker
process's median CPU per MB (user + system time from /proc, where there is one), and the ratio
SASL_SSL / PLAINTEXT of both (and the median of each round's throughput ratio, which a load that
drifts over the run moves less); the target is SASL_SSL at >= 70% of PLAINTEXT's throughput. With
1 KiB records the Python producer loop in this process, not the broker, usually sets the pace on
a small machine: then the broker's CPU per MB is the figure that shows what TLS and SASL cost
it. The embedded store (a data directory: local files, SQLite) is the same for both listeners,
so what differs is TLS and the SASL login.
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Final

from confluent_kafka import KafkaError, Message, Producer
from confluent_kafka.admin import (
    AdminClient,
    ScramCredentialInfo,
    ScramMechanism,
    UserScramCredentialUpsertion,
)

TOPIC: Final = "bench-security"
PARTITIONS: Final = 8
USER: Final = "bench"
PASSWORD: Final = "bench-secret"
TARGET_RATIO: Final = 0.70
START_TIMEOUT_S: Final = 60.0
LISTENER_LINE: Final = re.compile(r"^\s+listener (\S+): (\S+)$")


def _openssl(cwd: Path, *args: str) -> None:
    subprocess.run(["openssl", *args], cwd=cwd, check=True, capture_output=True, timeout=60)


def make_certificates(directory: Path) -> tuple[Path, Path]:
    """(CA certificate, server key store: key and certificate in one PEM) for 127.0.0.1."""
    key = ("genpkey", "-algorithm", "EC", "-pkeyopt", "ec_paramgen_curve:P-256", "-out")
    _openssl(directory, *key, "ca.key")
    _openssl(directory, "req", "-x509", "-new", "-key", "ca.key", "-subj", "/CN=bench CA",
             "-days", "1", "-out", "ca.pem")  # fmt: skip
    _openssl(directory, *key, "server.key")
    _openssl(directory, "req", "-new", "-key", "server.key", "-subj", "/CN=localhost",
             "-out", "server.csr")  # fmt: skip
    (directory / "server.ext").write_text(
        "subjectAltName=IP:127.0.0.1,DNS:localhost\nextendedKeyUsage=serverAuth\n"
    )
    _openssl(directory, "x509", "-req", "-in", "server.csr", "-CA", "ca.pem", "-CAkey", "ca.key",
             "-CAcreateserial", "-days", "1", "-extfile", "server.ext",
             "-out", "server.pem")  # fmt: skip
    keystore = directory / "server-keystore.pem"
    keystore.write_text(
        (directory / "server.key").read_text() + (directory / "server.pem").read_text()
    )
    return directory / "ca.pem", keystore


def server_properties(ca: Path, keystore: Path) -> str:
    return (
        "listeners=PLAINTEXT://127.0.0.1:0,SASL_SSL://127.0.0.1:0\n"
        "listener.security.protocol.map=PLAINTEXT:PLAINTEXT,SASL_SSL:SASL_SSL\n"
        "sasl.enabled.mechanisms=SCRAM-SHA-512\n"
        "ssl.keystore.type=PEM\n"
        f"ssl.keystore.location={keystore}\n"
        "ssl.truststore.type=PEM\n"
        f"ssl.truststore.location={ca}\n"
    )


@dataclass
class Broker:
    process: subprocess.Popen[str]
    bootstrap: dict[str, str]
    """Listener name -> its bootstrap address."""

    def cpu_seconds(self) -> float | None:
        """User + system CPU time of the broker process so far (Linux /proc only)."""
        try:
            fields = Path(f"/proc/{self.process.pid}/stat").read_text().rpartition(")")[2].split()
        except OSError:
            return None
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


@contextmanager
def running_broker(directory: Path, ca: Path, keystore: Path) -> Iterator[Broker]:
    config = directory / "server.properties"
    config.write_text(server_properties(ca, keystore))
    command = [
        sys.executable, "-m", "diskless.kafka_server", "--config", str(config),
        "--brokers", "1", "--racks", "1", "--data-dir", str(directory / "data"),
        "--topic", f"{TOPIC}:{PARTITIONS}", "--log-level", "WARNING",
    ]  # fmt: skip
    process = subprocess.Popen(command, stdout=subprocess.PIPE, text=True)
    try:
        assert process.stdout is not None
        bootstrap: dict[str, str] = {}
        deadline = time.monotonic() + START_TIMEOUT_S
        while len(bootstrap) < 2 and time.monotonic() < deadline:
            line = process.stdout.readline()
            if not line:
                raise SystemExit(f"the broker exited before it listened: {process.wait()}")
            if match := LISTENER_LINE.match(line):
                bootstrap[match[1]] = match[2]
        threading.Thread(target=process.stdout.read, daemon=True).start()  # drain, never block
        yield Broker(process, bootstrap)
    finally:
        process.terminate()
        try:
            process.wait(30)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


def create_user(plaintext: str) -> None:
    admin = AdminClient({"bootstrap.servers": plaintext})
    upsert = UserScramCredentialUpsertion(
        USER, ScramCredentialInfo(ScramMechanism.SCRAM_SHA_512, 8192), PASSWORD.encode()
    )
    for future in admin.alter_user_scram_credentials([upsert]).values():
        future.result(30)


def client_settings(listener: str, broker: Broker, ca: Path) -> dict[str, object]:
    settings: dict[str, object] = {"bootstrap.servers": broker.bootstrap[listener]}
    if listener == "SASL_SSL":
        settings.update(
            {
                "security.protocol": "SASL_SSL",
                "sasl.mechanism": "SCRAM-SHA-512",
                "sasl.username": USER,
                "sasl.password": PASSWORD,
                "ssl.ca.location": str(ca),
            }
        )
    return settings


def produce(settings: dict[str, object], total_bytes: int, record_bytes: int) -> float:
    """Seconds to send `total_bytes` of `record_bytes` records, acks=all, every one acked."""
    producer = Producer(
        {
            **settings,
            "acks": "all",
            "enable.idempotence": False,
            "linger.ms": 5,
            "queue.buffering.max.kbytes": 64 * 1024,
        }
    )
    # connect and log in before the clock starts: a producer's first request pays it once
    producer.list_topics(TOPIC, timeout=30)
    value = os.urandom(record_bytes)
    count = max(1, total_bytes // record_bytes)
    failures: list[KafkaError] = []

    def delivered(error: KafkaError | None, _: Message) -> None:
        if error is not None:
            failures.append(error)

    started = time.perf_counter()
    for i in range(count):
        while True:
            try:
                producer.produce(TOPIC, value, partition=i % PARTITIONS, on_delivery=delivered)
                break
            except BufferError:
                producer.poll(0.01)
        producer.poll(0)
    left = producer.flush(120)
    elapsed = time.perf_counter() - started
    if left or failures:
        raise SystemExit(f"{left} records unsent, {len(failures)} failed: {failures[:3]}")
    return elapsed


def main(mb: float, rounds: int, record_bytes: int) -> float:
    """Runs the comparison and prints its report; returns the throughput ratio."""
    if shutil.which("openssl") is None:
        raise SystemExit("the openssl command is needed to make the run's certificates")
    total = int(mb * 1e6)
    with tempfile.TemporaryDirectory(prefix="bench-security-") as name:
        directory = Path(name)
        ca, keystore = make_certificates(directory)
        with running_broker(directory, ca, keystore) as broker:
            create_user(broker.bootstrap["PLAINTEXT"])
            listeners = ("PLAINTEXT", "SASL_SSL")
            for listener in listeners:  # warm-up, not measured
                produce(client_settings(listener, broker, ca), total // 4, record_bytes)
            rates: dict[str, list[float]] = {listener: [] for listener in listeners}
            cpu_per_mb: dict[str, list[float]] = {listener: [] for listener in listeners}
            for round_ in range(rounds):
                order = listeners if round_ % 2 == 0 else listeners[::-1]
                for listener in order:
                    cpu_before = broker.cpu_seconds()
                    elapsed = produce(client_settings(listener, broker, ca), total, record_bytes)
                    cpu_after = broker.cpu_seconds()
                    rates[listener].append(total / elapsed / 1e6)
                    if cpu_before is not None and cpu_after is not None:
                        cpu_per_mb[listener].append((cpu_after - cpu_before) / (total / 1e6))
    rate = {listener: statistics.median(values) for listener, values in rates.items()}
    ratio = rate["SASL_SSL"] / rate["PLAINTEXT"]
    paired = [tls / plain for tls, plain in zip(rates["SASL_SSL"], rates["PLAINTEXT"], strict=True)]
    print(
        f"produce through one broker process, {record_bytes} B records, acks=all, {mb:g} MB per"
        f" run, {rounds} rounds alternating which listener goes first (medians)"
    )
    for listener in listeners:
        cpu = (
            f", broker CPU {statistics.median(cpu_per_mb[listener]) * 1000:.1f} ms/MB"
            if cpu_per_mb[listener]
            else ""
        )
        runs = ", ".join(f"{r:.1f}" for r in rates[listener])
        print(f"  {listener:>9}: {rate[listener]:7.1f} MB/s{cpu} (runs: {runs})")
    if cpu_per_mb["PLAINTEXT"] and cpu_per_mb["SASL_SSL"]:
        cost = statistics.median(cpu_per_mb["SASL_SSL"]) / statistics.median(
            cpu_per_mb["PLAINTEXT"]
        )
        print(
            f"  broker CPU per MB, SASL_SSL / PLAINTEXT: {cost:.2f}x (a broker bound by its CPU"
            f" would keep {1 / cost:.0%} of PLAINTEXT's throughput over SASL_SSL)"
        )
    verdict = "PASS" if ratio >= TARGET_RATIO else "FAIL"
    print(
        f"  throughput SASL_SSL / PLAINTEXT: {ratio:.1%}; target >= {TARGET_RATIO:.0%}: {verdict}"
    )
    print(
        f"      each round's SASL_SSL / PLAINTEXT: median {statistics.median(paired):.1%}"
        f" ({', '.join(f'{r:.0%}' for r in paired)})"
    )
    return ratio


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--mb", type=float, default=200.0, help="MB produced per listener per round"
    )
    parser.add_argument("--rounds", type=int, default=5, help="rounds (each runs both listeners)")
    parser.add_argument("--record-bytes", type=int, default=1024, help="bytes per record value")
    args = parser.parse_args()
    main(args.mb, args.rounds, args.record_bytes)
