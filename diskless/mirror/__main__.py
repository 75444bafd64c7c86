"""Mirror a source cluster's topics into diskless topics: `python -m diskless.mirror --source
BOOTSTRAP --topic NAME [--topic NAME ...] [--group-include REGEX] [--group-exclude REGEX]`, with
the destination's storage as `python -m diskless.kafka_server` takes it (`--data-dir DIR`, or
`--coordinator postgresql://... --s3-endpoint URL --bucket NAME`).

Runs until interrupted (SIGINT, SIGTERM), leaving the topics mirrored: started again, it resumes
where the coordinator says it stopped. Once it mirrors, it prints `mirroring` and then, every
`--status-interval-ms`, one line per partition: `lag TOPIC-P MIRRORED_END SOURCE_END LAG`.

`--stop` is the failover: the mirror's processes are fenced, what mirrored producers left open
is aborted, and the topics become writable; it prints `stopped TOPIC` for each. `--status`
prints each topic's mirror state and each partition's lag, and exits.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import re
import signal
import sys
from collections.abc import Iterable

from prometheus_client import CollectorRegistry, start_http_server
from prometheus_client.core import Metric
from prometheus_client.registry import Collector

from diskless.coordinator import BatchCoordinator
from diskless.kafka_server import (
    CommandParser,
    PrometheusMetrics,
    UsageError,
    add_storage_arguments,
    check_storage_arguments,
    open_coordinator,
    open_store,
)
from diskless.metrics import NULL_METRICS
from diskless.mirror._groups import GroupFilter
from diskless.mirror._mirror import FETCH_BYTES_MAX, FETCHERS_MAX, Mirror, MirrorConfig, MirrorError
from diskless.mirror._source import SourceCluster, SourceError


def _parser() -> argparse.ArgumentParser:
    parser = CommandParser(prog="python -m diskless.mirror", description=__doc__)
    parser.add_argument("--source", type=_bootstrap, required=True, metavar="HOST:PORT[,...]")
    parser.add_argument("--topic", action="append", required=True, metavar="NAME")
    parser.add_argument("--name", default="mirror", help="the mirror's name (default: mirror)")
    parser.add_argument("--group-include", type=_pattern, default=".*", metavar="REGEX")
    parser.add_argument("--group-exclude", type=_pattern, default=None, metavar="REGEX")
    parser.add_argument("--fetchers", type=_within(1, FETCHERS_MAX), default=1)
    parser.add_argument(
        "--fetch-max-bytes", type=_within(1, FETCH_BYTES_MAX), default=8 * 1024 * 1024
    )
    parser.add_argument("--status-interval-ms", type=_within(1, 86_400_000), default=5_000)
    parser.add_argument("--group-sync-interval-ms", type=_within(1, 86_400_000), default=5_000)
    parser.add_argument(
        "--metrics-address",
        type=_address,
        default=None,
        metavar="HOST:PORT",
        help="serve Prometheus metrics there (/metrics: diskless_mirror_lag_records)",
    )
    action = parser.add_mutually_exclusive_group()
    action.add_argument("--stop", action="store_true", help="fail over: make the topics writable")
    action.add_argument("--status", action="store_true", help="print states and lag, and exit")
    add_storage_arguments(parser)
    return parser


def _bootstrap(spec: str) -> str:
    for part in spec.split(","):
        host, _, port = part.strip().rpartition(":")
        if not host or not port.isdigit() or int(port) > 65535:
            raise argparse.ArgumentTypeError(f"{part.strip()!r} is not HOST:PORT")
    return spec


def _pattern(spec: str) -> str:
    try:
        re.compile(spec)
    except re.error as error:
        raise argparse.ArgumentTypeError(f"{spec!r} is not a regular expression: {error}") from None
    return spec


def _address(spec: str) -> tuple[str, int]:
    host, _, port = spec.rpartition(":")
    if not port.isdigit() or int(port) > 65535:
        raise argparse.ArgumentTypeError(f"{spec!r} is not HOST:PORT")
    return host or "0.0.0.0", int(port)


def _serve_metrics(address: tuple[str, int]) -> PrometheusMetrics:
    """The mirror's metrics, served at http://HOST:PORT/metrics from a thread of their own."""
    metrics = PrometheusMetrics()
    registry = CollectorRegistry(auto_describe=False)

    class _Families(Collector):
        def collect(self) -> Iterable[Metric]:
            return list(metrics.families())

    registry.register(_Families())
    server, _ = start_http_server(address[1], address[0], registry=registry)
    print(f"metrics=http://{address[0]}:{server.server_port}/metrics", flush=True)
    return metrics


def _within(low: int, high: int) -> type[int]:
    def convert(spec: str) -> int:
        try:
            value = int(spec)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{spec!r} is not an integer") from None
        if not low <= value <= high:
            raise argparse.ArgumentTypeError(f"{value} is outside {low}..{high}")
        return value

    return convert  # type: ignore[return-value]


async def _run(args: argparse.Namespace, config: MirrorConfig) -> None:
    store = open_store(args)
    coordinator = open_coordinator(args)
    source = SourceCluster(args.source)
    try:
        if args.stop:
            for topic in config.topics:
                done = await coordinator.mirror_stop(topic, config.name)
                if done.refusal:
                    raise SystemExit(f"cannot stop {topic!r}: {done.refusal}")
                print(f"stopped {topic}", flush=True)
            return
        if args.status:
            await _print_status(coordinator, source, config)
            return
        metrics = (
            NULL_METRICS if args.metrics_address is None else _serve_metrics(args.metrics_address)
        )
        mirror = Mirror(source, coordinator, store, config, metrics=metrics)
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGINT, signal.SIGTERM):
            with contextlib.suppress(NotImplementedError):
                loop.add_signal_handler(sig, mirror.close)
        await mirror.prepare()
        print("mirroring", flush=True)
        reporter = asyncio.create_task(_report(mirror, args.status_interval_ms))
        try:
            await mirror.run()
        finally:
            reporter.cancel()
    except (MirrorError, SourceError) as error:
        raise SystemExit(f"mirror {config.name}: {error}") from None
    finally:
        await source.close()
        await coordinator.close()
        await store.close()


async def _report(mirror: Mirror, interval_ms: int) -> None:
    while True:
        await asyncio.sleep(interval_ms / 1000)
        for lag in mirror.lag():
            tp = lag.topic_partition
            print(
                f"lag {tp.topic}-{tp.partition} {lag.mirrored_end} {lag.source_end} {lag.records}",
                flush=True,
            )


async def _print_status(
    coordinator: BatchCoordinator, source: SourceCluster, config: MirrorConfig
) -> None:
    metadata = await source.metadata(config.topics)
    for topic in config.topics:
        mark = await coordinator.mirror_status(topic)
        state = "not mirrored" if mark is None else f"{mark.state.value} {mark.name} {mark.epoch}"
        print(f"topic {topic}: {state}")
    tps = sorted(metadata.leaders)
    ends = await coordinator.partition_offsets(tps)
    for tp, offsets in zip(tps, ends, strict=True):
        mirrored = -1 if offsets is None else offsets.high_watermark
        answer = await source.fetch(metadata.leaders[tp], {tp: max(0, mirrored)}, 1, 1, 0)
        source_end = answer[tp].high_watermark if tp in answer else -1
        lag = max(0, source_end - mirrored)
        print(f"lag {tp.topic}-{tp.partition} {mirrored} {source_end} {lag}")


def main(argv: list[str] | None = None) -> None:
    parser = _parser()
    args = parser.parse_args(argv)
    try:
        check_storage_arguments(args)
        config = MirrorConfig(
            name=args.name,
            topics=tuple(dict.fromkeys(args.topic)),
            groups=GroupFilter(args.group_include, args.group_exclude),
            fetchers=args.fetchers,
            fetch_max_bytes=args.fetch_max_bytes,
            partition_max_bytes=min(args.fetch_max_bytes, 1024 * 1024),
            group_sync_interval_ms=args.group_sync_interval_ms,
        )
    except (UsageError, ValueError) as error:
        parser.error(str(error))
    asyncio.run(_run(args, config))
    sys.stdout.flush()


if __name__ == "__main__":
    main()
