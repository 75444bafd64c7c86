"""Start a diskless Kafka broker: `python -m diskless.kafka_server [--config server.properties]
[--data-dir DIR] [--brokers N] [--topic NAME:PARTITIONS ...]`.

With nothing else said, one broker (id 0) on Kafka's default listener, `PLAINTEXT://:9092` (every
interface, advertised under this host's name), topics created on first use with one partition
and kept 7 days, as a Kafka broker's defaults are.

Embedded (the default): objects go to DIR/objects (LocalObjectStore), batch metadata to
DIR/coordinator.sqlite (SqliteBatchCoordinator), which processes on one host can share; DIR is
`--data-dir`, else the first directory of `log.dirs`.

On several hosts: `--coordinator postgresql://USER@HOST:PORT/DB` puts the batch metadata in
PostgreSQL (PostgresBatchCoordinator), and `--s3-endpoint URL --bucket NAME` (or `--bucket NAME
--region R` for AWS) puts the objects in S3 (credentials from the usual AWS environment); with
both, no data directory is needed. Both may go over TLS: libpq's `sslmode` and `sslrootcert`
in the coordinator's URL (`?sslmode=verify-full&sslrootcert=/etc/diskless/ca.pem`), and an
https endpoint whose CA `--s3-ca-bundle` names.

`--broker-ids 4,5` runs those brokers instead of 0..N-1: a second process started so on the same
coordinator and store joins the first one's cluster; Metadata of either lists the live brokers of
both.

`--server-option` sets any numeric `ServerConfig` field, e.g.
`queued_request_bytes_max=104857600`.

`--config server.properties` reads Kafka's own property names (Java properties format): Kafka's
sample KRaft file starts unchanged. Applied: `listeners`, `advertised.listeners`,
`listener.security.protocol.map`, `broker.rack`, `node.id`, the `ssl.*` key and trust stores and
`ssl.client.auth`, `listener.name.<name>.ssl.*`, `socket.request.max.bytes`,
`socket.send.buffer.bytes`, `socket.receive.buffer.bytes`, `num.partitions`,
`auto.create.topics.enable`, `log.retention.{ms,minutes,hours,bytes}` and `message.max.bytes`
(the defaults of topics created without their own), `log.retention.check.interval.ms`,
`log.cleaner.dedupe.buffer.size`, `log.dirs`; `--override NAME=VALUE` sets one over the file,
and the other flags override both. Kafka's properties that mean nothing here (`process.roles`,
the KRaft quorum, replication, `log.segment.*`, `log.flush.*`, the other `log.cleaner.*`, thread
pools, ...) are accepted and named in one log line. A Kafka property a diskless broker does not
support (ZooKeeper, Kerberos, ...), an unknown name or a bad value stops the start with one line
naming it and why.

Listeners: with `--base-port BASE` instead of `listeners`, broker i listens on 127.0.0.1:BASE+i
(0: ephemeral ports). With `listeners=SASL_SSL://0.0.0.0:9093,PLAINTEXT://127.0.0.1:9092` and
`advertised.listeners` naming each host's own address, broker k of this process (k counting its
brokers from 0) listens on each listener's port + k and advertises each advertised port + k, so
one process may run several brokers from one file; clients are told the address of the listener
they came in on. On several hosts, run one process per host, each with its own `node.id`,
`broker.rack` and advertised address.

`--metrics-address HOST:PORT` (`metrics.address`) serves Prometheus metrics at `/metrics` and
the health checks `/healthz` (alive) and `/readyz` (can take writes: brokers registered, the
coordinator answering, the store taking a probe's write) there; `--log-format json` writes one
JSON object per log line.

A start that fails says why in one log line and exits with a status of its own (`startup`); a
coordinator that is not reachable yet is waited for, up to
`--initial-broker-registration-timeout-ms`, and the store is checked with a probe's write.

Every process also runs retention, consolidation and the file manager, each run in the process
holding the lowest live broker id only; `--no-lifecycle` leaves them to the others.

Prints the bootstrap addresses, overall, per rack and (with several listeners) per listener, then
serves until interrupted.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import importlib.metadata
import signal
import sys
from pathlib import Path

from diskless import BrokerConfig, ErrorCode
from diskless.broker import TXN_LEASE_TTL_FROM_WAL
from diskless.errors import BrokerIdInUseError
from diskless.kafka_server._server.process import (
    cli,
    cli_properties,
    heap,
    startup,
    storage_options,
)
from diskless.kafka_server._server.process.cluster import KafkaCluster
from diskless.kafka_server._server.process.log_format import configure_logging
from diskless.kafka_server._server.process.observability import Observability
from diskless.kafka_server._server.process.services import (
    LifecycleConfig,
    lowest_live_broker,
    running_lifecycle,
)
from diskless.kafka_server._server.settings.config import ServerConfig
from diskless.metrics import NULL_METRICS
from diskless.wal import WalConfig

COMMIT_BOUNDS = storage_options.COMMIT_BOUNDS


def _parser() -> argparse.ArgumentParser:
    parser = cli.Parser(prog="python -m diskless.kafka_server", description=__doc__)
    parser.add_argument(
        "--config",
        type=Path,
        default=None,
        metavar="server.properties",
        help="Kafka properties (listeners, advertised.listeners, ssl.*, node.id, ...) the other"
        " flags override",
    )
    parser.add_argument(
        "--override",
        type=cli_properties.override,
        action="append",
        default=[],
        metavar="NAME=VALUE",
        help="a Kafka property over --config's (repeatable)",
    )
    parser.add_argument(
        "--version", action="version", version=f"diskless {importlib.metadata.version('diskless')}"
    )
    parser.add_argument(
        "--brokers",
        type=cli.broker_count,
        default=None,
        help="how many brokers this process runs (default 1)",
    )
    parser.add_argument("--racks", type=cli.rack_count, default=3)
    parser.add_argument(
        "--broker-ids",
        type=cli.broker_ids,
        default=None,
        metavar="ID,ID",
        help="the ids of this process's brokers (default 0..N-1; sets --brokers)",
    )
    storage_options.add_storage_arguments(parser)
    parser.add_argument(
        "--base-port",
        type=int,
        default=None,
        help="instead of listeners: broker i listens on 127.0.0.1:BASE+i (0: ephemeral ports);"
        " neither given, Kafka's default listeners=PLAINTEXT://:9092",
    )
    parser.add_argument("--topic", type=cli.topic, action="append", default=[], metavar="NAME:N")
    parser.add_argument(
        "--auto-create-partitions",
        type=int,
        default=None,
        metavar="N",
        help="create unknown topics with N partitions when a client asks (0: never); default"
        " auto.create.topics.enable (true) and num.partitions (1)",
    )
    parser.add_argument(
        "--server-option",
        type=cli.server_option,
        action="append",
        default=[],
        metavar="FIELD=VALUE",
        help="a ServerConfig field, e.g. connections_idle_ms_max=600000 (repeatable)",
    )
    parser.add_argument(
        "--commit-interval-ms",
        type=int,
        default=None,
        metavar="MS",
        help="how long a WAL segment collects batches at most before it is uploaded and committed"
        f" (diskless.produce.commit.interval.ms; default {WalConfig().commit_interval_ms})",
    )
    parser.add_argument(
        "--linger-ms",
        type=int,
        default=None,
        metavar="MS",
        help="a WAL segment rotates sooner than the commit interval once no batch arrived for"
        f" this long (diskless.produce.linger.ms; default {WalConfig().linger_ms})",
    )
    parser.add_argument(
        "--rotate-interval-min-ms",
        type=int,
        default=None,
        metavar="MS",
        help="...but never sooner than this after the previous rotation: at most 1000 / MS"
        " objects per second at a trickle (diskless.produce.rotate.interval.min.ms; default"
        f" {WalConfig().rotate_interval_min_ms})",
    )
    parser.add_argument(
        "--rotate-floor-bytes",
        type=int,
        default=None,
        metavar="BYTES",
        help="...unless its connections can send no more and it holds at least this many bytes:"
        " at most 10^9 / BYTES such objects per GB (diskless.produce.rotate.floor.bytes; default"
        f" {WalConfig().rotate_floor_bytes})",
    )
    parser.add_argument(
        "--upload-timeout-ms",
        type=int,
        default=None,
        metavar="MS",
        help="the timeout of one WAL upload attempt (diskless.produce.upload.timeout.ms;"
        f" default {WalConfig().upload_timeout_ms})",
    )
    parser.add_argument(
        "--txn-lease-ttl-ms",
        type=int,
        default=TXN_LEASE_TTL_FROM_WAL,
        metavar="MS",
        help="how long a transactional batch's lease lasts, which bounds how long a transaction's"
        " end waits for the batches of a broker that died (default: the WAL's whole budget)",
    )
    lifecycle = LifecycleConfig()
    parser.add_argument(
        "--no-lifecycle",
        dest="lifecycle",
        action="store_false",
        help="run no retention, consolidation or file manager in this process",
    )
    parser.add_argument(
        "--retention-check-interval-ms",
        type=int,
        default=None,
        metavar="MS",
        help="how often retention runs (Kafka's log.retention.check.interval.ms; default"
        f" {lifecycle.retention_check_interval_ms})",
    )
    parser.add_argument(
        "--consolidation-age-ms",
        type=int,
        default=lifecycle.consolidation.age_ms,
        metavar="MS",
        help="batches committed longer ago than this move into consolidated objects",
    )
    parser.add_argument(
        "--consolidation-period-ms",
        type=int,
        default=lifecycle.consolidation.period_ms,
        metavar="MS",
        help="time between two consolidation runs",
    )
    parser.add_argument(
        "--cleaner-dedupe-buffer-bytes",
        type=int,
        default=None,
        metavar="BYTES",
        help="the cleaner's key-to-offset map of compacted topics (Kafka's"
        f" log.cleaner.dedupe.buffer.size; default {lifecycle.cleaner_map_bytes})",
    )
    parser.add_argument(
        "--authorizer-class-name",
        metavar="CLASS",
        help="Kafka's authorizer.class.name: org.apache.kafka.metadata.authorizer."
        "StandardAuthorizer (or kafka.security.authorizer.AclAuthorizer) enforces the ACLs kept"
        " in the batch coordinator on every API; an ACL change takes effect on every process"
        " within acl_refresh_ms (--server-option, default 1000 ms) and at once on the process"
        " it was made through",
    )
    parser.add_argument(
        "--super-users",
        metavar="PRINCIPALS",
        help="Kafka's super.users: principals allowed everything, e.g. 'User:admin;User:ops'",
    )
    parser.add_argument(
        "--allow-everyone-if-no-acl-found",
        action="store_true",
        default=None,
        help="Kafka's allow.everyone.if.no.acl.found: a resource without ACLs allows anyone",
    )
    parser.add_argument(
        "--initial-broker-registration-timeout-ms",
        dest="coordinator_wait_ms",
        type=startup.wait_ms,
        default=startup.COORDINATOR_WAIT_MS_DEFAULT,
        metavar="MS",
        help="how long the start waits for a coordinator that is down or does not answer"
        " (Kafka's initial.broker.registration.timeout.ms)",
    )
    parser.add_argument("--log-level", type=cli.log_level, default="INFO")
    parser.add_argument(
        "--log-format",
        type=cli.log_format,
        default="text",
        help="text, or json: one JSON object per line, for log collectors",
    )
    parser.add_argument(
        "--metrics-address",
        default=None,
        metavar="HOST:PORT",
        help="serve Prometheus metrics (/metrics) and health (/healthz, /readyz) there "
        "(metrics.address; port 0 picks a free one)",
    )
    return parser


async def _run(
    args: argparse.Namespace,
    ids: list[int],
    server_config: ServerConfig,
    broker_config: BrokerConfig,
    lifecycle: LifecycleConfig,
) -> None:
    ports = [args.base_port + i for i in ids] if args.base_port else None
    store = storage_options.open_store(args)
    coordinator = storage_options.open_coordinator(args)
    observability = (
        Observability(store, coordinator, server_config) if server_config.metrics_address else None
    )
    serving = False
    try:
        if observability is not None:
            await observability.start()
            print(f"metrics=http://{observability.endpoint.address}/metrics")
            sys.stdout.flush()
        await startup.wait_for_coordinator(
            coordinator,
            args.coordinator_wait_ms,
            observability.waiting if observability is not None else startup.unobserved,
        )
        await startup.check_store(store, COMMIT_BOUNDS.object_prefix, min(ids))
        async with (
            KafkaCluster(
                store,
                coordinator,
                brokers=len(ids),
                broker_ids=ids,
                racks=args.racks,
                ports=ports,
                server_config=server_config,
                broker_config=broker_config,
                metrics=observability.metrics if observability is not None else NULL_METRICS,
            ) as cluster,
            running_lifecycle(
                store, coordinator, lifecycle, lowest_live_broker(cluster.view, ids)
            ) as services,
        ):
            if observability is not None:
                observability.attach(cluster)
                observability.attach_services(services)
            for name, partitions in args.topic:
                created = await cluster.create_topic(name, partitions) is ErrorCode.NONE
                print(f"topic {name}: {partitions} partitions{'' if created else ' (existing)'}")
            if observability is not None:
                await observability.checked()
            heap.freeze_start_up_heap()
            serving = True
            print(f"bootstrap.servers={cluster.bootstrap()}")
            for rack in cluster.racks:
                print(f"  {rack}: {cluster.bootstrap(rack)}")
            for listener in cluster.listener_names:
                print(f"  listener {listener}: {cluster.bootstrap(listener=listener)}")
            sys.stdout.flush()
            stop = asyncio.Event()
            loop = asyncio.get_running_loop()
            for sig in (signal.SIGINT, signal.SIGTERM):
                with contextlib.suppress(NotImplementedError):
                    loop.add_signal_handler(sig, stop.set)
            watch = asyncio.ensure_future(cluster.lost.wait())  # a fenced broker stops us too
            watch.add_done_callback(lambda _: stop.set())
            await stop.wait()
            watch.cancel()
            if cluster.lost.is_set():
                fenced = ", ".join(str(b) for b in sorted(cluster.fenced))
                raise SystemExit(
                    f"broker {fenced} was fenced by a newer incarnation of its id; exiting"
                )
    except BrokerIdInUseError as e:
        raise SystemExit(f"cannot start: {e}; is another process serving it?") from None
    except Exception as error:
        if serving:
            raise
        raise startup.failure_of(error) from None
    finally:
        if observability is not None:
            await observability.close()
        await coordinator.close()
        await store.close()


def main(argv: list[str] | None = None) -> None:
    parser = _parser()
    args = parser.parse_args(argv)
    try:
        properties = cli_properties.Properties(args)
        ids = properties.broker_ids(args)
        args.data_dir = properties.data_dir(args)
        named = properties.flag_values(args)
        from_file = properties.server_config(args)
        cli_properties.check_listeners(from_file, properties, args.base_port, ids)
        configs = cli.configs(args, ids, COMMIT_BOUNDS, from_file, named)
    except cli.UsageError as error:
        parser.error(str(error))
    configure_logging(args.log_level, args.log_format)
    properties.log_ignored()
    try:
        asyncio.run(_run(args, ids, configs.server, configs.broker, configs.lifecycle))
    except startup.StartupFailure as failure:
        startup.report(failure)
        sys.exit(failure.status)


if __name__ == "__main__":
    main()
