"""Acceptance: a transaction whose batch a broker leased just before it lost PostgreSQL and S3
commits as soon as it is asked to once the link is back, without waiting out that lease.

Hosts: PostgreSQL and S3 in one, broker A and broker B in two others, and a version 1
transactional producer speaking the wire protocol in a fourth, so every step happens in a fixed
order:

1. The producer opens a transaction through B and sends a transactional batch to A, which takes
   the batch's lease (the commit barrier) and holds the batch in its WAL segment.
2. A loses the infrastructure host. Its segment's upload fails, so A answers the batch
   KAFKA_STORAGE_ERROR; giving the lease back needs PostgreSQL, so A's attempts fail and the
   lease stays. The producer writes the batch again through B.
3. A's registration lapses (`broker.session.timeout.ms`), and with it the lease stops binding.
4. The link comes back and A renews its registration, at the same epoch. The lease must stay
   dead: the renewal drops it (A's next attempt at giving it back would release it too, up to a
   few seconds later). It used to come back to life with the registration and hold the
   transaction's end for the rest of its TTL: 75 s here, over a minute in the five-host test.
5. EndTxn through B commits at once.
"""

from __future__ import annotations

import asyncio
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Final

import kio.schema.end_txn.v1.request as end_txn_v1
from kio.schema.errors import ErrorCode as WireError
from kio.static.primitive import i16

from testkit.netns import Host, Network, NetworkFactory, postgres_in, s3_server_in
from testkit.postgres_server import PostgresServer
from testkit.raw_producer import (
    TID,
    TOPIC,
    RawProducer,
    partition_error,
    produce_request,
)
from testkit.s3server import REGION, create_bucket
from testkit.wire import WireClient, decode_response, encode_request
from tests.netns._kafka_cluster import PORT, HostBroker

SESSION_TIMEOUT_MS: Final = 3_000
LEASE_TTL_MS: Final = 90_000
"""Longer than the whole scenario up to the end: a lease that bound the end would hold it for
most of a minute after the renewal."""
COMMIT_INTERVAL_MS: Final = 2_000
"""A's segment holds the leased batch this long before its upload (the linger is as long, so
off): time to cut the link."""
UPLOAD_TIMEOUT_MS: Final = 1_000
END_WITHIN_S: Final = 20.0
"""EndTxn's answer, once the lease is dropped (waiting out the lease would take over 50 s)."""
WAIT_S: Final = 45.0
RELEASE_FAILED: Final = "releasing 1 transaction leases failed"
"""A's debug line: an attempt at giving the lease back failed (its coordinator calls timed
out)."""
A, B = 1, 2
END_CORRELATION_ID: Final = 1_000


def _properties(node_id: int, address: str) -> str:
    return "\n".join(
        [
            f"node.id={node_id}",
            f"listeners=PLAINTEXT://0.0.0.0:{PORT}",
            f"advertised.listeners=PLAINTEXT://{address}:{PORT}",
            f"broker.session.timeout.ms={SESSION_TIMEOUT_MS}",
            "",
        ]
    )


class Scenario:
    def __init__(
        self,
        net: Network,
        infra: Host,
        pg: PostgresServer,
        database: str,
        brokers: list[HostBroker],
    ) -> None:
        self.net = net
        self.infra = infra
        self.pg = pg
        self.database = database
        self.a, self.b = brokers

    def sql(self, statement: str) -> str:
        return self.pg.sql(statement, database=self.database).strip()

    def leases_of_a(self) -> int:
        return int(self.sql(f"SELECT count(*) FROM txn_leases WHERE broker_id = {A}"))

    def a_registered(self) -> bool:
        now = "(extract(epoch FROM clock_timestamp()) * 1000)::bigint"
        live = self.sql(
            f"SELECT expires_ms > {now} FROM broker_registrations WHERE broker_id = {A}"
        )
        return live == "t"

    async def until(self, condition: Callable[[], bool], what: str) -> None:
        deadline = time.monotonic() + WAIT_S
        while not condition():
            assert time.monotonic() < deadline, f"{what}: {self.a.log_tail()}"
            await asyncio.sleep(0.1)
        print(f"{what}: {time.monotonic() - self.started:.1f} s")

    async def run(self) -> None:
        self.started = time.monotonic()
        producer = await _raw(self.b)
        to_a = await _connect(self.a)
        try:
            await producer.init()
            pid = producer.pid
            assert await producer.add(pid) is WireError.none
            batch = produce_request(pid, 0, 1)
            await to_a.send_raw(encode_request(batch, 1))
            await self.until(lambda: self.leases_of_a() == 1, "A leased the batch")

            self.net.cut_between(self.a.host, self.infra)
            frame = await to_a.read_frame(timeout_s=WAIT_S)
            assert frame is not None, self.a.log_tail()
            answer = partition_error(decode_response(frame, 0, 9, 1))
            print(f"A answered {answer.name}")
            assert answer is WireError.kafka_storage_error, answer
            assert partition_error(await producer.client.request(batch)) is WireError.none
            await self.until(lambda: not self.a_registered(), "A's registration lapsed")
            await self.until(
                lambda: RELEASE_FAILED in self.a.log_tail(lines=10_000),
                "A failed to give the lease back",
            )
            assert self.leases_of_a() == 1

            self.net.restore_between(self.a.host, self.infra)
            await self.until(self.a_registered, "A renewed its registration")
            assert self.leases_of_a() == 0, "the renewal revived the lease"

            sent = time.monotonic()
            answer = await _end_txn(producer, pid)
            took = time.monotonic() - sent
            print(f"EndTxn answered {answer.name} in {took:.2f} s")
            assert answer is WireError.none
            assert took < END_WITHIN_S
        finally:
            await to_a.close()
            await producer.close()


async def _end_txn(producer: RawProducer, pid: int) -> WireError:
    """EndTxn (commit), its answer waited for as long as the lease could hold it."""
    request = end_txn_v1.EndTxnRequest(
        transactional_id=TID, producer_id=pid, producer_epoch=i16(0), committed=True
    )
    await producer.client.send_raw(encode_request(request, END_CORRELATION_ID))
    frame = await producer.client.read_frame(timeout_s=LEASE_TTL_MS / 1000)
    assert frame is not None
    api = end_txn_v1.EndTxnRequest
    response = decode_response(frame, api.__api_key__, api.__version__, END_CORRELATION_ID)
    return WireError(response.error_code)


async def _connect(broker: HostBroker) -> WireClient:
    ip, _, port = broker.address.rpartition(":")
    return WireClient(*await asyncio.open_connection(ip, int(port)))


async def _raw(broker: HostBroker) -> RawProducer:
    return RawProducer(await _connect(broker))


def test_a_lease_taken_before_a_cut_does_not_hold_the_end_after_it(
    network_of: NetworkFactory, tmp_path: Path
) -> None:
    net = network_of(4)
    infra, host_a, host_b, clients = net.hosts
    with postgres_in(infra) as pg, s3_server_in(infra) as endpoint:
        database = pg.database(tmp_path, "cut")
        bucket = infra.call(asyncio.run, create_bucket(endpoint))
        shared = [
            "--coordinator", pg.dsn(database), "--s3-endpoint", endpoint, "--bucket", bucket,
            "--region", REGION, "--topic", f"{TOPIC}:1", "--no-lifecycle",
            "--commit-interval-ms", str(COMMIT_INTERVAL_MS), "--linger-ms", str(COMMIT_INTERVAL_MS),
            "--upload-timeout-ms", str(UPLOAD_TIMEOUT_MS),
            "--txn-lease-ttl-ms", str(LEASE_TTL_MS),
        ]  # fmt: skip
        brokers: list[HostBroker] = []
        try:
            for node_id, host in ((A, host_a), (B, host_b)):
                properties = tmp_path / f"server-{node_id}.properties"
                properties.write_text(_properties(node_id, host.address))
                level = "DEBUG" if node_id == A else "INFO"
                argv = [sys.executable, "-m", "diskless.kafka_server", "--config", str(properties),
                        "--log-level", level, *shared]  # fmt: skip
                log = tmp_path / f"broker-{node_id}.log"
                brokers.append(HostBroker(host, node_id, argv, log))
            for broker in brokers:
                broker.wait_started()
            scenario = Scenario(net, infra, pg, database, brokers)
            clients.call(asyncio.run, scenario.run())
            for broker in brokers:
                assert broker.running(), broker.log_tail()
        finally:
            for broker in brokers:
                broker.kill()
