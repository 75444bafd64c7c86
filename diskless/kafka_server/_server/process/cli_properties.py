"""`--config server.properties` and `--override NAME=VALUE`: Kafka's property names on the
command line.

The file is read first, then each `--override` (Kafka's `kafka-server-start.sh --override`)
over it; the flags of this command override both (`--server-option`, `--auto-create-partitions`,
`--broker-ids`). What is refused is one line naming the file or `--override`, the property and
why (`server_properties`), before anything starts; so is TLS key material that cannot be loaded.

Kafka's properties that do not apply to a diskless broker (`inapplicable_properties`) are
accepted; `log_ignored` names them in one line once logging is set up.

Besides the `ServerConfig` properties, the command applies three itself, each under its flag:
`node.id` (or Kafka's older `broker.id`) names this process's first broker (with `--brokers N`
it runs N...); `log.dirs` (or `log.dir`), the first directory, is the embedded cluster's data
directory when `--data-dir` is not given (named as not applied when the coordinator and the
objects are both elsewhere); and each of `FLAG_PROPERTIES` (`log.retention.check.interval.ms`,
`log.cleaner.dedupe.buffer.size`, and the WAL's `diskless.produce.*` settings) sets its flag's
value when the flag is not given.

`COMMAND_DEFAULTS` are Kafka's defaults where a `ServerConfig` embedded in a program has its
own: the command starts as a Kafka broker would, topics created on first use. Without
`listeners` or `--base-port`, its listener is Kafka's default, `PLAINTEXT://:9092` (every
interface; advertised under this host's name, as Kafka does).
"""

from __future__ import annotations

import argparse
import logging
from collections.abc import Sequence
from pathlib import Path
from typing import Final

from diskless.kafka_server._server.process.cli import UsageError
from diskless.kafka_server._server.process.cluster import PORT_MAX, check_broker_id
from diskless.kafka_server._server.settings.config import ServerConfig
from diskless.kafka_server._server.settings.inapplicable_properties import ignored
from diskless.kafka_server._server.settings.listeners import listener_plan
from diskless.kafka_server._server.settings.properties import PropertiesError, read_properties
from diskless.kafka_server._server.settings.server_properties import server_config

BROKER_ID_PROPERTIES: Final = ("node.id", "broker.id")
DATA_DIR_PROPERTIES: Final = ("log.dirs", "log.dir")
"""Kafka's `log.dirs` wins over `log.dir`."""
FLAG_PROPERTIES: Final = {
    "log.retention.check.interval.ms": "--retention-check-interval-ms",
    "diskless.produce.commit.interval.ms": "--commit-interval-ms",
    "diskless.produce.linger.ms": "--linger-ms",
    "diskless.produce.rotate.interval.min.ms": "--rotate-interval-min-ms",
    "diskless.produce.rotate.floor.bytes": "--rotate-floor-bytes",
    "diskless.produce.upload.timeout.ms": "--upload-timeout-ms",
    "log.cleaner.dedupe.buffer.size": "--cleaner-dedupe-buffer-bytes",
}
"""Properties that stand for a flag of this command: an integer each, the flag winning."""
DEFAULT_BROKERS: Final = 1
DEFAULT_LISTENERS: Final = "PLAINTEXT://:9092"
"""Kafka's default `listeners`."""
COMMAND_DEFAULTS: Final = {"auto.create.topics.enable": "true"}
"""Kafka's default, under the file and the overrides."""

_log = logging.getLogger(__name__)


def override(spec: str) -> tuple[str, str]:
    """An argparse type: `NAME=VALUE`."""
    name, equals, value = spec.partition("=")
    if not equals or not name.strip():
        raise argparse.ArgumentTypeError(f"expected NAME=VALUE, got {spec!r}")
    return name.strip(), value


class Properties:
    """The properties of the file and the overrides, remembering where each came from."""

    def __init__(self, args: argparse.Namespace) -> None:
        self._file: Path | None = args.config
        self.values: dict[str, str] = {}
        if self._file is not None:
            try:
                self.values.update(read_properties(self._file))
            except PropertiesError as error:
                raise UsageError(f"--config: {error}") from None
            except OSError as error:
                reason = error.strerror or type(error).__name__
                raise UsageError(f"--config: cannot read {str(self._file)!r}: {reason}") from None
        self._overridden = dict(args.override)
        self.values.update(args.override)
        self._unused: list[str] = []
        """Properties the command takes but this start does not use (`log.dirs`)."""

    def refusal(self, message: str) -> UsageError:
        """A refusal of the property `message` starts with, from where it was given."""
        name, _, reason = message.partition(": ")
        if name in self._overridden:
            return UsageError(f"--override: {name}={self._overridden[name]}: {reason}")
        if self._file is None:
            return UsageError(f"--override: {message}")
        return UsageError(f"--config: {self._file}: {message}")

    def broker_ids(self, args: argparse.Namespace) -> list[int]:
        """`--broker-ids`, else `--brokers N` from `node.id` (or 0)."""
        given = [name for name in BROKER_ID_PROPERTIES if name in self.values]
        first = 0
        for name in given:
            text = self.values.pop(name).strip()
            try:
                first = int(text)
                check_broker_id(first)
            except ValueError as error:
                reason = error if text.lstrip("-").isdigit() else "expected an integer"
                raise self.refusal(f"{name}: {text!r}: {reason}") from None
        if args.broker_ids is not None:
            return list(args.broker_ids)
        count = args.brokers if args.brokers is not None else (1 if given else DEFAULT_BROKERS)
        ids = list(range(first, first + count))
        try:
            check_broker_id(ids[-1])
        except ValueError as error:
            raise self.refusal(f"{given[0]}: {error}") from None
        return ids

    def data_dir(self, args: argparse.Namespace) -> Path | None:
        """`--data-dir`, else the first directory of `log.dirs` (or `log.dir`) when the cluster
        is embedded (not both `--coordinator` and `--bucket`)."""
        given = [name for name in DATA_DIR_PROPERTIES if name in self.values]
        texts = {name: self.values.pop(name) for name in given}
        if args.data_dir is not None or not given or (args.coordinator and args.bucket):
            self._unused.extend(given)
            return args.data_dir  # type: ignore[no-any-return]
        name = given[0]
        first = texts[name].split(",")[0].strip()
        if not first:
            raise self.refusal(f"{name}: {texts[name]!r}: expected a directory")
        return Path(first)

    def flag_values(self, args: argparse.Namespace) -> dict[str, str]:
        """Sets each flag of `FLAG_PROPERTIES` that was not given (None) from its property;
        returns the property's name by flag, for the messages that refuse a value."""
        named: dict[str, str] = {}
        for name, flag in FLAG_PROPERTIES.items():
            text = self.values.pop(name, None)
            attribute = flag.removeprefix("--").replace("-", "_")
            if text is None or getattr(args, attribute) is not None:
                continue
            try:
                setattr(args, attribute, int(text.strip()))
            except ValueError:
                raise self.refusal(f"{name}: expected an integer, got {text.strip()!r}") from None
            named[flag] = name
        return named

    def log_ignored(self) -> None:
        """One line naming the given properties that do not apply here, if there are any."""
        names = [*self._unused, *ignored(self.values)]
        if names:
            _log.info(
                "ignoring Kafka properties that do not apply to a diskless broker: %s",
                ", ".join(names),
            )

    def server_config(self, args: argparse.Namespace) -> ServerConfig:
        """The file's and the overrides' settings over `COMMAND_DEFAULTS`; without `listeners`
        or `--base-port`, Kafka's default listener."""
        values = {**COMMAND_DEFAULTS, **self.values}
        if "listeners" not in values and args.base_port is None:
            values["listeners"] = DEFAULT_LISTENERS
        try:
            return server_config(values)
        except ValueError as error:
            raise self.refusal(str(error)) from None


def check_listeners(
    config: ServerConfig, properties: Properties, base_port: int | None, ids: Sequence[int]
) -> None:
    """Every broker's ports exist, and TLS listeners' key material loads."""
    plan = listener_plan(
        config.listeners, config.advertised_listeners, config.listener_security_protocol_map
    )
    if plan.listeners and base_port is not None:
        raise UsageError(
            "--base-port: not with listeners (each broker k of this process listens on each"
            " listener's port + k)"
        )
    highest = plan.highest_port(len(ids))
    if highest > PORT_MAX:
        raise properties.refusal(
            f"listeners: broker {len(ids) - 1} of this process would use port {highest}"
            f" (each listener's port + k), above {PORT_MAX}"
        )
    for listener in plan.listeners:
        if plan.protocols[listener.name].uses_tls:
            try:
                config.tls_for(listener.name).server_context()
            except ValueError as error:
                raise properties.refusal(str(error)) from None
