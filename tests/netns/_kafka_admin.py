"""What an operator does to a new SASL_SSL cluster, through the Kafka APIs (confluent-kafka's
AdminClient, logged in as the PLAIN super user of the brokers' JAAS line): the first SCRAM user,
the topic, the ACLs that user needs. And a raw Produce over TLS and SCRAM to one broker, which
nothing retries or reroutes: what that broker itself answers.
"""

from __future__ import annotations

import asyncio
import datetime
import struct
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Final

from confluent_kafka.admin import (
    AclBinding,
    AclOperation,
    AclPermissionType,
    AdminClient,
    NewTopic,
    ResourcePatternType,
    ResourceType,
    ScramCredentialInfo,
    ScramMechanism,
    UserScramCredentialUpsertion,
)
from kio.schema.metadata.v9 import request as metadata_v9
from kio.schema.produce.v9 import request as produce_v9

from testkit.batches import build_batch
from testkit.netns import Host
from testkit.sasl import scram_login
from testkit.wire import decode_response, encode_request
from tests.netns._kafka_cluster import ADMIN, ADMIN_PASSWORD
from tests.netns._kafka_workloads import (
    GROUP,
    PARTITIONS,
    PASSWORD,
    TOPIC,
    TRANSACTIONAL_ID,
    USER,
    client_ssl_context,
    librdkafka,
)

ADMIN_TIMEOUT_S: Final = 30.0
SCRAM_ITERATIONS: Final = 8192


def _admin(bootstrap: str, ca: Path) -> AdminClient:
    settings = librdkafka(bootstrap, ca, ADMIN, ADMIN_PASSWORD)
    return AdminClient({**settings, "sasl.mechanism": "PLAIN"})


def _grants() -> list[AclBinding]:
    principal = f"User:{USER}"

    def allow(
        kind: ResourceType, name: str, pattern: ResourcePatternType, op: AclOperation
    ) -> AclBinding:
        return AclBinding(kind, name, pattern, principal, "*", op, AclPermissionType.ALLOW)

    literal, prefixed = ResourcePatternType.LITERAL, ResourcePatternType.PREFIXED
    return [
        *(
            allow(ResourceType.TOPIC, TOPIC, literal, op)
            for op in (AclOperation.WRITE, AclOperation.READ, AclOperation.DESCRIBE)
        ),
        allow(ResourceType.GROUP, f"{TOPIC}-", prefixed, AclOperation.READ),
        *(
            allow(ResourceType.TRANSACTIONAL_ID, TRANSACTIONAL_ID, literal, op)
            for op in (AclOperation.WRITE, AclOperation.DESCRIBE)
        ),
        allow(ResourceType.BROKER, "kafka-cluster", literal, AclOperation.IDEMPOTENT_WRITE),
    ]


def set_up(bootstrap: str, ca: Path) -> None:
    """The SCRAM-SHA-512 user, the topic, the user's ACLs."""
    assert GROUP.startswith(f"{TOPIC}-")
    admin = _admin(bootstrap, ca)
    credential = ScramCredentialInfo(ScramMechanism.SCRAM_SHA_512, SCRAM_ITERATIONS)
    upsertion = UserScramCredentialUpsertion(USER, credential, PASSWORD.encode())
    admin.alter_user_scram_credentials([upsertion])[USER].result(ADMIN_TIMEOUT_S)
    admin.create_topics([NewTopic(TOPIC, PARTITIONS, 1)])[TOPIC].result(ADMIN_TIMEOUT_S)
    for future in admin.create_acls(_grants()).values():
        future.result(ADMIN_TIMEOUT_S)


def wait_authorized(host: Host, addresses: Sequence[str], ca: Path) -> None:
    """Until every broker itself lets the user see the topic (ACLs reach the other processes
    within their refresh interval). Each broker is asked over a connection of its own: a client
    bootstrapped from one address may send its Metadata to another broker of the cluster
    (librdkafka drops the bootstrap connection for a broker the first answer named), which
    would leave a broker that has not loaded the ACLs yet unchecked."""
    deadline = time.monotonic() + ADMIN_TIMEOUT_S
    for address in addresses:
        while True:
            try:
                connection = DirectConnection(host, address, ca, ADMIN_TIMEOUT_S)
            except (OSError, AssertionError) as error:
                print(f"{address} not yet serving the user: {error!r}")
            else:
                try:
                    if connection.describable() == PARTITIONS:
                        break
                finally:
                    connection.close()
            assert time.monotonic() < deadline, f"{address} never let {USER} describe {TOPIC}"
            time.sleep(0.2)


class DirectConnection:
    """A connection of its own to one broker, from `host`, logged in as the user with
    SCRAM-SHA-512 over TLS: Produce requests on it reach that broker and no other. Blocking
    (`scram_login` is awaited on it, but nothing in it waits on a loop)."""

    def __init__(self, host: Host, address: str, ca: Path, timeout_s: float) -> None:
        ip, _, port = address.rpartition(":")
        raw = host.socket()
        raw.settimeout(timeout_s)
        try:
            raw.connect((ip, int(port)))
            self._tls = client_ssl_context(ca).wrap_socket(raw, server_hostname=ip)
        except BaseException:
            raw.close()
            raise
        self._correlation = 0
        try:
            login = asyncio.run(scram_login(self, "SCRAM-SHA-512", USER, PASSWORD))  # type: ignore[arg-type]
            assert login.error_code == 0, login
        except BaseException:  # (a refused or failed login leaves no socket behind)
            self.close()
            raise

    def close(self) -> None:
        self._tls.close()

    async def request(self, body: Any) -> Any:
        self._correlation += 1
        self._tls.sendall(encode_request(body, self._correlation))
        (size,) = struct.unpack(">i", self._read(4))
        frame = self._read(size)
        return decode_response(frame, body.__api_key__, body.__version__, self._correlation)

    def _read(self, size: int) -> bytes:
        chunks = bytearray()
        while len(chunks) < size:
            chunk = self._tls.recv(size - len(chunks))
            if not chunk:
                raise ConnectionError("the broker closed the connection")
            chunks += chunk
        return bytes(chunks)

    def describable(self) -> int:
        """How many partitions of the topic this broker's Metadata shows the user (0: it refuses
        the user the topic, or does not know it)."""
        topic = self._topic_metadata()
        return len(topic.partitions) if topic.error_code == 0 else 0

    def leaders(self) -> dict[int, tuple[int, int, int]]:
        """The topic's partitions as this broker's Metadata names them: (leader, leader epoch,
        error code) by partition."""
        return {
            int(p.partition_index): (int(p.leader_id), int(p.leader_epoch), int(p.error_code))
            for p in self._topic_metadata().partitions
        }

    def _topic_metadata(self) -> Any:
        body = metadata_v9.MetadataRequest(
            topics=(metadata_v9.MetadataRequestTopic(name=TOPIC),),
            allow_auto_topic_creation=False,
            include_cluster_authorized_operations=False,
            include_topic_authorized_operations=False,
        )
        (topic,) = asyncio.run(self.request(body)).topics
        return topic

    def produce(self, partition: int, record: bytes, timeout_ms: int) -> tuple[int, float]:
        """One Produce (acks=all) of `record` to `partition`: its error code and how long the
        answer took (the socket's own timeout fails a request left hanging)."""
        body = produce_v9.ProduceRequest(
            transactional_id=None,
            acks=-1,
            timeout=datetime.timedelta(milliseconds=timeout_ms),
            topic_data=(
                produce_v9.TopicProduceData(
                    name=TOPIC,
                    partition_data=(
                        produce_v9.PartitionProduceData(
                            index=partition, records=build_batch([record])
                        ),
                    ),
                ),
            ),
        )
        started = time.monotonic()
        response = asyncio.run(self.request(body))
        elapsed = time.monotonic() - started
        (code,) = [int(p.error_code) for t in response.responses for p in t.partition_responses]
        return code, elapsed
