"""The command line's values, checked before anything starts.

A bad value is reported as one line that names its flag, the value and, where the value is a
number, the range it may take; never as a traceback from deep inside a constructor. The range
comes from the rule that refused the value, not from a copy of it: the values are tried by
building the configuration objects they end up in (`WalConfig`, `BrokerConfig`, `LifecycleConfig`,
`ConsolidatorConfig`, `ServerConfig`) and checking the broker's against the coordinator's bounds as
a broker does when it is created (`check_commit_bounds`), and the range of a refused value is found
by bisecting that same check around an admitted one. So the largest `--upload-timeout-ms` is
whatever keeps the WAL's commit budget below the coordinator's commit-age bound, and it follows
either of them when they change.
"""

from __future__ import annotations

import argparse
import logging
import urllib.parse
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Final, NamedTuple, NoReturn, TypeVar

import msgspec

from diskless import BrokerConfig
from diskless._limits import LEASE_TTL_MS_MAX, CommitBounds
from diskless.broker import TXN_LEASE_TTL_FROM_WAL, check_commit_bounds
from diskless.coordinator import check_topic_name
from diskless.kafka_server._handlers.context import MAX_PARTITIONS_PER_REQUEST
from diskless.kafka_server._server.process.cluster import BROKER_ID_MAX, PORT_MAX, check_broker_id
from diskless.kafka_server._server.process.services import LifecycleConfig
from diskless.kafka_server._server.settings.config import ServerConfig
from diskless.lifecycle import ConsolidatorConfig
from diskless.wal import WalConfig

T = TypeVar("T")

SEARCH_MIN: Final = -(2**63)
SEARCH_MAX: Final = 2**63 - 1
"""Where the search for a range's ends gives up: an end past these is reported as no bound."""
POSTGRESQL_SCHEMES: Final = ("postgresql://", "postgres://")
LOG_FORMATS: Final = ("text", "json")


class UsageError(Exception):
    """A bad command-line value; the message is one line and starts with the flag."""


class Parser(argparse.ArgumentParser):
    """argparse, whose errors are one line (`PROG: error: --flag: ...`, exit status 2) rather
    than a usage summary and an error."""

    def error(self, message: str) -> NoReturn:
        message = message.removeprefix("argument ")
        self.exit(2, f"{self.prog}: error: {' '.join(message.split())}\n")


# --- ranges ---------------------------------------------------------------------------------------
def admitted_range(
    accepts: Callable[[int], bool],
    inside: int,
    low: int = SEARCH_MIN,
    high: int = SEARCH_MAX,
) -> tuple[int | None, int | None]:
    """The lowest and highest values that `accepts` admits around `inside` (which it admits),
    searched within [low, high]; None for an end not found there.

    The admitted values must form one interval around `inside`, as those of a rule made of lower
    and upper bounds do.
    """
    assert accepts(inside), inside

    def edge(admitted: int, refused: int) -> int:
        while abs(refused - admitted) > 1:
            middle = (admitted + refused) // 2
            if accepts(middle):
                admitted = middle
            else:
                refused = middle
        return admitted

    lowest = None if accepts(low) else edge(inside, low)
    highest = None if accepts(high) else edge(inside, high)
    return lowest, highest


def range_text(lowest: int | None, highest: int | None) -> str:
    if lowest is None:
        return "any integer" if highest is None else f"<= {highest}"
    return f">= {lowest}" if highest is None else f"{lowest}..{highest}"


@dataclass(frozen=True)
class Setting:
    """One number of the command line, as a field of the configuration it goes into."""

    flag: str
    value: int
    default: int
    """What the field is when the flag is not given."""
    inside: int
    """A value the rule admits (with the others as given, or at their defaults): the range is
    searched around it."""
    special: int | None = None
    """A value with a meaning of its own, outside the range (admitted whatever the range)."""
    special_text: str = ""
    field: str = ""
    """`FIELD=` before the value in messages, for a flag that sets several fields."""


def build_checked(build: Callable[[dict[str, int]], T], settings: Mapping[str, Setting]) -> T:
    """`build` (configuration objects from field values) of the given values; UsageError for the
    value to blame when it refuses them.

    The value blamed is the first one outside the range that the others, as given, leave for
    it; else (when some other value leaves no room at all) the first one refused with the others
    at their defaults. Its message gives that range and `build`'s own reason.
    """
    given = {name: s.value for name, s in settings.items()}
    refusal = _refusal(build, given)
    if refusal is None:
        return build(given)
    defaults = {name: s.default for name, s in settings.items()}
    for others in (given, defaults):
        for name, setting in settings.items():
            if setting.value == setting.special:
                continue

            def accepts(
                value: int,
                name: str = name,
                setting: Setting = setting,
                others: dict[str, int] = others,
            ) -> bool:
                return value != setting.special and _refusal(build, {**others, name: value}) is None

            reason = _refusal(build, {**others, name: setting.value})
            if reason is not None and accepts(setting.inside):
                allowed = range_text(*admitted_range(accepts, setting.inside))
                value = f"{setting.field}{setting.value}"
                raise UsageError(
                    f"{setting.flag}: {value} is outside the allowed range {allowed}"
                    f"{setting.special_text} ({reason})"
                )
    flags = ", ".join(s.flag for s in settings.values())
    raise UsageError(f"{flags}: {refusal}")


def _refusal(build: Callable[[dict[str, int]], object], values: dict[str, int]) -> str | None:
    """Why `build` refuses `values` (one line), None when it builds."""
    try:
        build(values)
    except ValueError as error:
        return " ".join(str(error).split())
    return None


# --- argparse types: a value checked on its own ---------------------------------------------------
def _int_at_least(low: int, high: int | None = None) -> Callable[[str], int]:
    allowed = range_text(low, high)

    def convert(spec: str) -> int:
        try:
            value = int(spec)
        except ValueError:
            raise argparse.ArgumentTypeError(
                f"expected an integer ({allowed}), got {spec!r}"
            ) from None
        if value < low or (high is not None and value > high):
            raise argparse.ArgumentTypeError(f"{value} is outside the allowed range {allowed}")
        return value

    return convert


broker_count = _int_at_least(1, BROKER_ID_MAX + 1)
"""--brokers N runs brokers 0..N-1."""
rack_count = _int_at_least(1)


def topic(spec: str) -> tuple[str, int]:
    name, _, partitions = spec.rpartition(":")
    if not name or not partitions.strip().lstrip("-").isdigit():
        raise argparse.ArgumentTypeError(f"expected NAME:PARTITIONS, got {spec!r}")
    try:
        check_topic_name(name)
    except ValueError as error:
        raise argparse.ArgumentTypeError(f"{spec}: {error}") from None
    count = int(partitions)
    if not 1 <= count <= MAX_PARTITIONS_PER_REQUEST:
        allowed = range_text(1, MAX_PARTITIONS_PER_REQUEST)
        raise argparse.ArgumentTypeError(
            f"{spec}: {count} partitions is outside the allowed range {allowed}"
        )
    return name, count


def broker_ids(spec: str) -> list[int]:
    ids = [i.strip() for i in spec.split(",")]
    if not all(i.isdigit() for i in ids) or len(set(map(int, ids))) != len(ids):
        raise argparse.ArgumentTypeError(f"expected distinct ids like 4,5, got {spec!r}")
    try:
        for i in ids:
            check_broker_id(int(i))
    except ValueError as error:
        raise argparse.ArgumentTypeError(str(error)) from None
    return [int(i) for i in ids]


def postgresql_url(spec: str) -> str:
    """The URL's form only: whether the server answers is known when the brokers start."""
    if not spec.startswith(POSTGRESQL_SCHEMES):
        raise argparse.ArgumentTypeError(f"expected postgresql://USER@HOST:PORT/DB, got {spec!r}")
    hosts = urllib.parse.urlsplit(spec).netloc.rpartition("@")[2]
    for host in hosts.split(","):
        port = host.rpartition("]")[2].rpartition(":")[2] if ":" in host else ""
        if port and not (port.isdigit() and 1 <= int(port) <= PORT_MAX):
            raise argparse.ArgumentTypeError(
                f"port {port!r} of {spec!r} is not a number in the allowed range 1..{PORT_MAX}"
            )
    return spec


def _s3_location(part: str) -> Callable[[str], str]:
    def convert(spec: str) -> str:
        from diskless.storage import S3ObjectStore  # only when S3 is asked for: see its package

        try:
            S3ObjectStore.check_location(**{part: spec})
        except ValueError as error:
            raise argparse.ArgumentTypeError(str(error)) from None
        return spec

    return convert


s3_endpoint = _s3_location("endpoint_url")
s3_bucket = _s3_location("bucket")
s3_prefix = _s3_location("prefix")
s3_region = _s3_location("region")


def readable_file(spec: str) -> str:
    try:
        with open(spec, "rb"):
            pass
    except OSError as error:
        reason = error.strerror or type(error).__name__
        raise argparse.ArgumentTypeError(f"cannot read {spec!r}: {reason}") from None
    return spec


def server_option(spec: str) -> tuple[str, int]:
    name, _, value = spec.partition("=")
    # The numbers; the others have flags of their own (--metrics-address).
    fields = {f.name: f for f in msgspec.structs.fields(ServerConfig) if f.type is int}
    if name not in fields or not value:
        raise argparse.ArgumentTypeError(
            f"expected FIELD=VALUE with FIELD one of {', '.join(fields)}, got {spec!r}"
        )
    try:
        return name, int(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{spec}: expected an integer, got {value!r}") from None


def log_level(spec: str) -> str:
    levels = [name for name in logging.getLevelNamesMapping() if name not in ("WARN", "FATAL")]
    if spec.upper() not in levels:
        raise argparse.ArgumentTypeError(f"{spec!r} is not one of {', '.join(levels)}")
    return spec.upper()


# --- the configurations: values checked together --------------------------------------------------
class Configs(NamedTuple):
    server: ServerConfig
    broker: BrokerConfig
    lifecycle: LifecycleConfig


def configs(
    args: argparse.Namespace,
    ids: Sequence[int],
    bounds: CommitBounds,
    base: ServerConfig | None = None,
    named: Mapping[str, str] | None = None,
) -> Configs:
    """Every configuration of the process; UsageError naming the flag of a refused value.
    `base`: the server settings the flags change (those of `--config`); `named`: the property
    that gave a flag's value, by flag, named instead of the flag when the value is refused."""
    check_places(args)  # and the data directory at the end: `check_storage_arguments`
    check_ports(args.base_port, ids)
    names = named or {}
    checked = Configs(
        _server_config(args, base or ServerConfig()),
        _broker_config(args, bounds, names),
        _lifecycle_config(args, min(ids), names),
    )
    check_data_dir(args.data_dir)
    return checked


def check_places(args: argparse.Namespace) -> None:
    """Every shared part has a place."""
    if args.s3_endpoint and not args.bucket:
        raise UsageError("--s3-endpoint needs --bucket")
    if args.bucket and not (args.s3_endpoint or args.region):
        raise UsageError("--bucket needs --s3-endpoint or --region")
    if args.data_dir is None and (args.coordinator is None or args.bucket is None):
        raise UsageError("--data-dir is needed unless both --coordinator and --bucket are given")


def check_ports(base: int | None, ids: Sequence[int]) -> None:
    """Broker i listens on BASE+i, so every one of them must be a port (0: ephemeral ports)."""
    highest = PORT_MAX - max(ids)
    if base and not 1 <= base <= highest:
        raise UsageError(
            f"--base-port: {base} is outside the allowed range 1..{highest} or 0 (ephemeral"
            f" ports; broker {max(ids)} listens on BASE+{max(ids)})"
        )


def check_data_dir(path: Path | None) -> None:
    if path is None:
        return
    if path.exists() and not path.is_dir():
        raise UsageError(f"--data-dir: {str(path)!r} is not a directory")
    try:
        path.mkdir(parents=True, exist_ok=True)
    except OSError as error:
        raise UsageError(f"--data-dir: cannot create {str(path)!r}: {error.strerror}") from None


def _server_config(args: argparse.Namespace, base: ServerConfig) -> ServerConfig:
    """`base` with the flags' values over it."""
    settings = {}
    if args.auto_create_partitions is not None:  # N: num.partitions N, and 0 never creates
        creates = args.auto_create_partitions != 0
        base = msgspec.structs.replace(base, auto_create_topics_enable=creates)
        if creates:
            default = base.num_partitions
            settings["num_partitions"] = Setting(
                "--auto-create-partitions", args.auto_create_partitions, default, default
            )
    for name, value in args.server_option:  # a later one of the same field wins
        default = getattr(base, name)
        settings.pop(name, None)
        settings[name] = Setting("--server-option", value, default, default, field=f"{name}=")
    authorizer = {
        field: value
        for field, value in (
            ("authorizer_class_name", args.authorizer_class_name),
            ("super_users", args.super_users),
            ("allow_everyone_if_no_acl_found", args.allow_everyone_if_no_acl_found),
        )
        if value is not None  # given: over the file's
    }
    try:
        base = msgspec.structs.replace(base, **authorizer)
    except ValueError as error:
        raise UsageError(f"--authorizer-class-name: {error}") from None
    config = build_checked(lambda values: msgspec.structs.replace(base, **values), settings)
    if not args.metrics_address:  # the file's, if it has one
        return config
    try:
        return msgspec.structs.replace(config, metrics_address=args.metrics_address)
    except ValueError as error:
        raise UsageError(f"--metrics-address: {error}") from None


def _or(value: int | None, default: int) -> int:
    """A flag's value, or `default` when not given."""
    return default if value is None else value


def log_format(spec: str) -> str:
    if spec not in LOG_FORMATS:
        raise argparse.ArgumentTypeError(f"{spec!r} is not one of {', '.join(LOG_FORMATS)}")
    return spec


def _broker_config(
    args: argparse.Namespace, bounds: CommitBounds, names: Mapping[str, str]
) -> BrokerConfig:
    def build(values: dict[str, int]) -> BrokerConfig:
        wal = WalConfig(
            commit_interval_ms=values["commit_interval_ms"],
            linger_ms=values["linger_ms"],
            rotate_interval_min_ms=values["rotate_interval_min_ms"],
            rotate_floor_bytes=values["rotate_floor_bytes"],
            upload_timeout_ms=values["upload_timeout_ms"],
        )
        config = BrokerConfig(wal=wal, txn_lease_ttl_ms=values["txn_lease_ttl_ms"])
        check_commit_bounds(config, bounds)
        return config

    wal_defaults = WalConfig()
    settings = {
        name: Setting(names.get(flag, flag), _or(getattr(args, name), default), default, default)
        for name, flag, default in (
            ("commit_interval_ms", "--commit-interval-ms", wal_defaults.commit_interval_ms),
            ("linger_ms", "--linger-ms", wal_defaults.linger_ms),
            (
                "rotate_interval_min_ms",
                "--rotate-interval-min-ms",
                wal_defaults.rotate_interval_min_ms,
            ),
            ("rotate_floor_bytes", "--rotate-floor-bytes", wal_defaults.rotate_floor_bytes),
            ("upload_timeout_ms", "--upload-timeout-ms", wal_defaults.upload_timeout_ms),
        )
    }
    settings["txn_lease_ttl_ms"] = Setting(
        "--txn-lease-ttl-ms",
        args.txn_lease_ttl_ms,
        TXN_LEASE_TTL_FROM_WAL,
        inside=LEASE_TTL_MS_MAX,
        special=TXN_LEASE_TTL_FROM_WAL,
        special_text=f", or {TXN_LEASE_TTL_FROM_WAL} for the WAL's whole budget",
    )
    return build_checked(build, settings)


def _lifecycle_config(
    args: argparse.Namespace, node_id: int, names: Mapping[str, str]
) -> LifecycleConfig:
    def build(values: dict[str, int]) -> LifecycleConfig:
        consolidation = ConsolidatorConfig(
            node_id=node_id, age_ms=values["age_ms"], period_ms=values["period_ms"]
        )
        return LifecycleConfig(
            enabled=args.lifecycle,
            retention_check_interval_ms=values["retention_check_interval_ms"],
            consolidation=consolidation,
            cleaner_map_bytes=values["cleaner_map_bytes"],
        )

    defaults = LifecycleConfig()
    settings = {
        name: Setting(
            names.get(flag, flag), _or(getattr(args, attribute), default), default, default
        )
        for name, flag, attribute, default in (
            (
                "retention_check_interval_ms",
                "--retention-check-interval-ms",
                "retention_check_interval_ms",
                defaults.retention_check_interval_ms,
            ),
            (
                "age_ms",
                "--consolidation-age-ms",
                "consolidation_age_ms",
                defaults.consolidation.age_ms,
            ),
            (
                "period_ms",
                "--consolidation-period-ms",
                "consolidation_period_ms",
                defaults.consolidation.period_ms,
            ),
            (
                "cleaner_map_bytes",
                "--cleaner-dedupe-buffer-bytes",
                "cleaner_dedupe_buffer_bytes",
                defaults.cleaner_map_bytes,
            ),
        )
    }
    return build_checked(build, settings)
