"""Broker processes on hosts of a test network, each started from a `server.properties` as an
operator would write it: a SASL_SSL listener on the host's address, SCRAM-SHA-512 for clients and
PLAIN for the administrator of the JAAS line, TLS with a CA-signed certificate for the host's IP,
Kafka's StandardAuthorizer with that administrator as super user.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Final

from testkit.netns import Host
from testkit.processes import S3_ENV
from testkit.s3server import REGION

PORT: Final = 9093
ADMIN: Final = "admin"
ADMIN_PASSWORD: Final = "admin-secret"
SESSION_TIMEOUT_MS: Final = 3000
"""`broker.session.timeout.ms`: a broker cut off from the coordinator leaves the others' metadata
this long after its last renewal."""
RACKS: Final = ("dc-1", "dc-2", "dc-1")
"""Brokers 1 and 3 in one rack (zone), broker 2 in another: a rack-less client asking broker 1
or 3 has its partitions spread over both, one asking broker 2 has them all there. (librdkafka
takes leaders only of a higher leader epoch than it holds, as in Kafka, so a client cut from a
live leader stays on it until the epoch moves: with a rack per broker, a client whose answer
came from the broker cut from it would have every partition there.)"""
START_TIMEOUT_S: Final = 60.0
STOP_TIMEOUT_S: Final = 15.0


def server_properties(node_id: int, address: str, keystore: Path) -> str:
    """The `server.properties` of broker `node_id` on the host at `address`."""
    jaas = (
        "org.apache.kafka.common.security.plain.PlainLoginModule required"
        f' user_{ADMIN}="{ADMIN_PASSWORD}";'
    )
    return "\n".join(
        [
            f"node.id={node_id}",
            f"listeners=SASL_SSL://0.0.0.0:{PORT}",
            f"advertised.listeners=SASL_SSL://{address}:{PORT}",
            "listener.security.protocol.map=SASL_SSL:SASL_SSL",
            f"broker.rack={RACKS[node_id - 1]}",
            "ssl.keystore.type=PEM",
            f"ssl.keystore.location={keystore}",
            "sasl.enabled.mechanisms=SCRAM-SHA-512",
            "listener.name.sasl_ssl.sasl.enabled.mechanisms=PLAIN,SCRAM-SHA-512",
            f"listener.name.sasl_ssl.plain.sasl.jaas.config={jaas}",
            "authorizer.class.name=org.apache.kafka.metadata.authorizer.StandardAuthorizer",
            f"super.users=User:{ADMIN}",
            f"broker.session.timeout.ms={SESSION_TIMEOUT_MS}",
            "",
        ]
    )


class HostBroker:
    """A broker process (`argv`, `python -m diskless.kafka_server ...`) in a host, with the S3
    credentials and `env` in its environment; SIGKILLed by `kill`."""

    def __init__(
        self,
        host: Host,
        node_id: int,
        argv: Sequence[str],
        log: Path,
        env: Mapping[str, str] | None = None,
    ) -> None:
        self.host = host
        self.node_id = node_id
        self.address = f"{host.address}:{PORT}"
        self._log = log
        with log.open("w") as stderr:
            self.process = host.popen(
                argv,
                stdout=subprocess.PIPE,
                stderr=stderr,
                text=True,
                env={**os.environ, **S3_ENV, "PYTHONUNBUFFERED": "1", **(env or {})},
                start_new_session=True,
            )
        self._started = threading.Event()
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self.process.stdout is not None
        for line in self.process.stdout:  # drained to its end: printing never blocks
            if line.startswith("bootstrap.servers="):
                self._started.set()

    def wait_started(self) -> None:
        deadline = time.monotonic() + START_TIMEOUT_S
        while not self._started.wait(0.1):
            if self.process.poll() is not None or time.monotonic() > deadline:
                raise AssertionError(f"broker {self.node_id} did not start: {self.log_tail()}")

    def running(self) -> bool:
        return self.process.poll() is None

    def kill(self) -> None:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.process.pid, signal.SIGKILL)
        self.process.wait(STOP_TIMEOUT_S)
        self._reader.join(STOP_TIMEOUT_S)
        if self.process.stdout is not None:
            self.process.stdout.close()

    def log_tail(self, lines: int = 30) -> str:
        text = self._log.read_text(errors="replace") if self._log.exists() else ""
        return "\n".join(text.splitlines()[-lines:])


@contextlib.contextmanager
def brokers_in(
    hosts: Sequence[Host],
    keystores: dict[str, Path],
    directory: Path,
    dsn: str,
    endpoint: str,
    bucket: str,
) -> Iterator[list[HostBroker]]:
    """One broker per host (node ids 1, 2...), all started; killed on exit."""
    shared = ["--coordinator", dsn, "--s3-endpoint", endpoint, "--bucket", bucket,
              "--region", REGION]  # fmt: skip
    brokers: list[HostBroker] = []
    try:
        for node_id, host in enumerate(hosts, start=1):
            properties = directory / f"server-{node_id}.properties"
            properties.write_text(server_properties(node_id, host.address, keystores[host.address]))
            argv = [
                sys.executable, "-m", "diskless.kafka_server", "--config", str(properties),
                "--log-level", "WARNING", *shared,
            ]  # fmt: skip
            brokers.append(HostBroker(host, node_id, argv, directory / f"broker-{node_id}.log"))
        for broker in brokers:
            broker.wait_started()
        yield brokers
    finally:
        for broker in brokers:
            broker.kill()
