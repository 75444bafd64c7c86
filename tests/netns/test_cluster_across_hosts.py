"""Acceptance: a diskless cluster spread over five hosts, used by real clients over SASL_SSL, rides
out links cut under it.

Hosts 1-3 run one broker process each (`python -m diskless.kafka_server --config
server.properties`: a SASL_SSL listener on the host's address with a certificate for that IP,
SCRAM-SHA-512, the StandardAuthorizer); host 4 runs PostgreSQL (the batch coordinator) and the S3
endpoint (moto); host 5 runs the clients. The operator's steps go through the Kafka APIs: the
PLAIN super user of the JAAS line creates the SCRAM user, the topic and the user's ACLs.

The clients, all in host 5 as that user: confluent-kafka's idempotent and transactional
producers, kafka-python's (not idempotent) and aiokafka's (idempotent) producers, and a
confluent-kafka consumer group of two members, reading committed records. While they run:

- A broker loses host 4 (PostgreSQL and S3 at once, connections silently dead). The user
  still logs in to it, and a produce sent to it directly is answered with a retriable error
  within its timeout; the clients carry on through the other brokers, onto the partitions it
  led too; once the link is back, it takes produces again.
- Host 5 loses another broker: the clients carry on through the other two.

The brokers are in two racks (zones), and the clients keep librdkafka's metadata refresh interval
(5 minutes): they follow leaders as the brokers' answers and errors move them, which works
because every broker process advertises the same leader epoch (a client ignores metadata of an
epoch below one it has seen).

The transactional producer writes every partition, those of the broker that loses PostgreSQL and
S3 too: a transaction with a record in flight to it at the cut commits soon after the link is
back (the lease that broker took for the record died with its registration while it was cut off,
and is not revived when it renews it; it once held the transaction's end for the rest of the
lease's 100 s).

Then every record a producer was acknowledged reads back from the log: exactly once for the
idempotent and transactional producers (and nothing else of theirs: an aborted transaction's
records never show), at least once for kafka-python's; the group read every one of them; and
every broker names the same leader epoch for every partition.
"""

from __future__ import annotations

import asyncio
import collections
import gc
import ipaddress
import socket
import time
import warnings
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Final

from confluent_kafka import Consumer
from confluent_kafka import TopicPartition as CkTopicPartition
from kio.schema.errors import ErrorCode

from testkit.clients import Audit, confluent_consume, value
from testkit.netns import SUBNET, Host, Network, NetworkFactory, postgres_in, s3_server_in
from testkit.s3server import create_bucket
from testkit.tls import make_host_certs
from tests.netns._kafka_admin import DirectConnection, set_up, wait_authorized
from tests.netns._kafka_cluster import HostBroker, brokers_in
from tests.netns._kafka_workloads import (
    PARTITIONS,
    TOPIC,
    TRANSACTIONAL,
    Acks,
    Workload,
    librdkafka,
)

PROBE_TIMEOUT_MS: Final = 5_000
CUT_PROBE_TIMEOUT_MS: Final = 2_000
"""The probe of the broker cut from PostgreSQL and S3: answered when its timeout is up."""
ANSWER_MARGIN_S: Final = 1.0
"""A request the broker cannot serve is answered REQUEST_TIMED_OUT when its timeout is up."""
PROBE_WAIT_S: Final = PROBE_TIMEOUT_MS / 1000 + 10
"""How long the probe's socket waits for an answer: a request left hanging fails it."""
PROGRESS: Final = 25
"""Records each producer must have acknowledged (more) before a phase moves on."""
MOVED: Final = 5
"""Records each producer must have acknowledged on the cut broker's partitions meanwhile."""
PHASE_TIMEOUT_S: Final = 60.0


def _wait(
    condition: Callable[[], bool],
    what: str,
    workload: Workload,
    detail: Callable[[], str] = lambda: "",
) -> None:
    """Wait for `condition`; a phase that does not end in time fails with what each producer
    was acknowledged meanwhile, and `detail()`."""
    since = workload.counts()
    deadline = time.monotonic() + PHASE_TIMEOUT_S
    while not condition():
        workload.check_running()
        assert time.monotonic() < deadline, (
            f"{what}: acknowledged {workload.counts()} since {since}{detail()}"
        )
        time.sleep(0.05)


def _all_advanced(
    workload: Workload, since: dict[str, int], but: str | None = None
) -> Callable[[], bool]:
    """Whether every producer (but `but`) was acknowledged `PROGRESS` more records since."""
    producers = [a for a in workload.producers if a.name != but]
    return lambda: all(a.count() >= since[a.name] + PROGRESS for a in producers)


def _probe(
    connection: DirectConnection,
    broker: HostBroker,
    partition: int,
    tag: str,
    timeout_ms: int = PROBE_TIMEOUT_MS,
) -> int:
    """A produce of one record straight to `broker`; its code, answered within the timeout."""
    record = value("probe", len(_probes))
    code, elapsed = connection.produce(partition, record, timeout_ms)
    _probes.append((record, code))
    print(f"probe {tag}: broker {broker.node_id} partition {partition}: {ErrorCode(code).name}"
          f" in {elapsed:.2f} s")  # fmt: skip
    assert elapsed < timeout_ms / 1000 + ANSWER_MARGIN_S, "answered after its timeout"
    return code


def _connect(workload: Workload, broker: HostBroker) -> DirectConnection:
    return DirectConnection(workload.host, broker.address, workload.ca, PROBE_WAIT_S)


def _serves_again(workload: Workload, broker: HostBroker, partition: int) -> bool:
    """Whether a new connection to `broker` logs in and has a produce accepted."""
    try:
        connection = _connect(workload, broker)
    except (OSError, AssertionError) as error:
        print(f"broker {broker.node_id} not yet serving: {error!r}")
        return False
    try:
        return _probe(connection, broker, partition, "after the link is back") == 0
    finally:
        connection.close()


_probes: list[tuple[bytes, int]] = []


def _end_offsets(workload: Workload) -> dict[int, int]:
    consumer = Consumer({**librdkafka(workload.bootstrap, workload.ca), "group.id": "orders-ends"})
    try:
        return {
            p: consumer.get_watermark_offsets(CkTopicPartition(TOPIC, p), timeout=30)[1]
            for p in range(PARTITIONS)
        }
    finally:
        consumer.close()


def _audit(workload: Workload) -> None:
    ends = workload.host.call(_end_offsets, workload)
    extra = {**librdkafka(workload.bootstrap, workload.ca), "group.id": "orders-audit"}
    log: Audit = workload.host.call(
        lambda: confluent_consume(
            workload.bootstrap, TOPIC, ends, isolation="read_committed", extra=extra
        )
    )
    read = collections.Counter(data for entries in log.records.values() for _, data in entries)
    exact = [a for a in workload.producers if a.exactly_once]
    only_exact = Audit()
    names = {a.name for a in exact}
    for partition, entries in log.records.items():
        for offset, data in entries:
            if data.decode().partition(":")[0] in names:
                only_exact.add(partition, offset, data)
    only_exact.check({a.name: [s for _, s in a.acked] for a in exact})
    for acks in workload.producers:
        if not acks.exactly_once:
            missing = [s for _, s in acks.acked if read[value(acks.name, s)] == 0]
            assert not missing, f"{acks.name}: {len(missing)} acknowledged records missing"
    for record, code in _probes:
        # REQUEST_TIMED_OUT leaves the outcome open (the write goes on); any other error is a
        # write that never happened.
        allowed = {0: {1}, int(ErrorCode.request_timed_out): {0, 1}}.get(code, {0})
        assert read[record] in allowed, (record, ErrorCode(code).name, read[record])


def _lagging(
    workload: Workload, partitions: Sequence[int], since: dict[str, collections.Counter[int]]
) -> str:
    """Which producers were acknowledged fewer than `MOVED` records on `partitions` since, and
    how many on each partition (all of them, for comparison)."""
    lines = []
    for acks in workload.producers:
        counts = acks.partitions()
        gained = {p: counts[p] - since[acks.name][p] for p in sorted(counts | since[acks.name])}
        behind = sum(gained.get(p, 0) for p in partitions) < MOVED
        mark = "LAGGING" if behind and acks.name != TRANSACTIONAL else "ok"
        lines.append(f"\n  {acks.name} ({mark}) on partitions {list(partitions)}: {gained}")
    return "".join(lines)


def _one_epoch(workload: Workload, brokers: Sequence[HostBroker]) -> bool:
    """Whether every broker's Metadata names one leader epoch, the same, for every partition."""
    epochs = set()
    for broker in brokers:
        connection = _connect(workload, broker)
        try:
            epochs |= {epoch for _, epoch, _ in connection.leaders().values()}
        finally:
            connection.close()
    return len(epochs) == 1


def _metadata_of(workload: Workload, brokers: Sequence[HostBroker]) -> str:
    """What each broker's Metadata answers now: (leader, leader epoch, error) by partition."""
    lines = []
    for broker in brokers:
        try:
            connection = _connect(workload, broker)
            try:
                answer: object = connection.leaders()
            finally:
                connection.close()
        except (OSError, AssertionError) as error:
            answer = repr(error)
        lines.append(f"\n  broker {broker.node_id} answers Metadata: {answer}")
    return "".join(lines)


def _named_by(host: Host, broker: HostBroker, ca: Path) -> dict[int, int]:
    """The partition leaders `broker` names in its own Metadata."""
    connection = DirectConnection(host, broker.address, ca, PROBE_WAIT_S)
    try:
        return {p: leader for p, (leader, _, _) in connection.leaders().items()}
    finally:
        connection.close()


def _led_by(broker: HostBroker, led: dict[int, int]) -> list[int]:
    return [p for p, leader in led.items() if leader == broker.node_id]


def _acked_on(acks: Acks, partitions: Sequence[int]) -> int:
    counts = acks.partitions()
    return sum(counts[p] for p in partitions)


def test_a_cluster_across_hosts_rides_out_cut_links(
    network_of: NetworkFactory, tmp_path: Path
) -> None:
    _probes.clear()
    net = network_of(5)
    broker_hosts, infra, clients = net.hosts[:3], net.hosts[3], net.hosts[4]
    certs = make_host_certs(tmp_path / "certs", [h.address for h in broker_hosts])
    with postgres_in(infra) as pg, s3_server_in(infra) as endpoint:
        dsn = pg.dsn(pg.database(tmp_path, "cluster"))
        bucket = infra.call(asyncio.run, create_bucket(endpoint))
        with brokers_in(broker_hosts, certs.keystores, tmp_path, dsn, endpoint, bucket) as brokers:
            addresses = [b.address for b in brokers]
            bootstrap = ",".join(addresses)
            clients.call(set_up, bootstrap, certs.ca)
            wait_authorized(clients, addresses, certs.ca)
            # Broker 1 is cut from PostgreSQL and S3, then the clients from broker 3, its rack's
            # other broker: each leads some partitions for the clients of their rack.
            victim = brokers[0]
            led = _named_by(clients, victim, certs.ca)
            print(f"partition leaders named by broker {victim.node_id}: {led}")
            assert set(led.values()) == {1, 3}, led
            workload = Workload(clients, bootstrap, certs.ca, list(range(PARTITIONS)))
            workload.start()
            try:
                _phases(net, infra, brokers, victim, led, workload)
            finally:
                workload.stop.set()
                workload.stop_consumers.set()
                for thread in workload.threads:
                    thread.join(timeout=60)
    print(f"acknowledged: {workload.counts()}; the group read {sum(workload.consumed.values())}")
    _collect_client_library_leaks()


def _collect_client_library_leaks() -> None:
    """A client library may leave behind the socket of a connection it was opening when the link
    to its broker was cut (aiokafka's producer `stop` does not close one; a bare socket to the
    broker cut from the clients was seen once more, owner unknown). Every client of this test
    has ended by now, so a socket of this process still open to a test host is such a leak: it is
    closed here, where that is known, rather than reported by the garbage collector in whichever
    later test it happens to run."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ResourceWarning)
        gc.collect()
        for leaked in [o for o in gc.get_objects() if isinstance(o, socket.socket)]:
            if leaked.fileno() != -1 and _to_a_test_host(leaked):
                leaked.close()


def _to_a_test_host(sock: socket.socket) -> bool:
    """Whether `sock` is connected, or connecting, to an address of the test's network."""
    if sock.family != socket.AF_INET:
        return False
    for address in (sock.getpeername, sock.getsockname):
        try:
            host = address()[0]
        except OSError:  # not connected (yet)
            continue
        if ipaddress.IPv4Address(host) in SUBNET:
            return True
    return False


def _phases(
    net: Network,
    infra: Host,
    brokers: list[HostBroker],
    victim: HostBroker,
    led: dict[int, int],
    workload: Workload,
) -> None:
    clients = workload.host
    _wait(_all_advanced(workload, collections.defaultdict(int)), "warm-up", workload)

    # (a) the broker leading most partitions loses PostgreSQL and S3.
    its = _led_by(victim, led)
    for acks in workload.producers:
        assert _acked_on(acks, its) > 0, f"{acks.name} did not use the broker to be cut"
    connection = _connect(workload, victim)
    assert _probe(connection, victim, its[0], "before the cut") == 0
    connection.close()
    net.cut_between(victim.host, infra)
    since = workload.counts()
    on_its = {a.name: _acked_on(a, its) for a in workload.producers}
    # A known user logs in while the broker is cut off: it checks the login against its own
    # copy of the SCRAM credentials.
    connection = _connect(workload, victim)
    code = _probe(
        connection, victim, its[0], "while cut from PostgreSQL and S3", CUT_PROBE_TIMEOUT_MS
    )
    connection.close()
    assert ErrorCode(code).retriable, ErrorCode(code)
    _wait(_all_advanced(workload, since), "producing while a broker is cut off", workload)
    on_each = {a.name: a.partitions() for a in workload.producers}
    _wait(
        lambda: all(
            _acked_on(a, its) >= on_its[a.name] + MOVED
            for a in workload.producers
            if a.name != TRANSACTIONAL
        ),
        "producing to the cut broker's partitions through the others",
        workload,
        lambda: _lagging(workload, its, on_each) + _metadata_of(workload, brokers),
    )
    net.restore_between(victim.host, infra)
    _wait(
        lambda: _serves_again(workload, victim, its[0]),
        "the broker taking produces again",
        workload,
    )
    _wait(_all_advanced(workload, workload.counts()), "producing after the cut", workload)

    # (b) the clients lose another broker.
    other = next(b for b in brokers if b is not victim and _led_by(b, led))
    net.cut_between(clients, other.host)
    since, consumed = workload.counts(), sum(workload.consumed.values())
    # A transaction waits for every record of it (as in Kafka), and the transactional producer
    # writes that broker's partitions too: it carries on once the link is back.
    _wait(
        _all_advanced(workload, since, but=TRANSACTIONAL),
        "producing without one broker",
        workload,
        lambda: _metadata_of(workload, brokers),
    )
    _wait(
        lambda: sum(workload.consumed.values()) >= consumed + PROGRESS,
        "consuming without one broker",
        workload,
    )
    net.restore_between(clients, other.host)
    _wait(_all_advanced(workload, workload.counts()), "producing after the clients' cut", workload)

    workload.finish()
    for acks in workload.producers:
        if acks.exactly_once and acks.name != TRANSACTIONAL:
            assert not acks.failed, (acks.name, acks.failed[:3])
    _audit(workload)
    expected = {value(a.name, s) for a in workload.producers for _, s in a.acked}
    _wait(lambda: expected <= workload.consumed.keys(), "the group reading all", workload)
    _wait(
        lambda: _one_epoch(workload, brokers),
        "every broker naming one leader epoch",
        workload,
        lambda: _metadata_of(workload, brokers),
    )
    workload.stop_reading()
    assert not workload.errors, workload.errors
    for broker in brokers:
        assert broker.running(), broker.log_tail()
