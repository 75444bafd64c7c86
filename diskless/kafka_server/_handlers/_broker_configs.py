"""The broker's configs under Kafka's names: DescribeConfigs of a BROKER resource, and the
dynamic ones AlterConfigs and IncrementalAlterConfigs change (Kafka's KIP-226).

Listed: Kafka's broker properties a diskless broker applies (the server's property table, each
with its value: the configured one, else the default), the broker's id (`node.id`, and its
older name `broker.id`) and its rack (`broker.rack`, which clients read for rack-aware reads,
KIP-392). A secret is listed as sensitive, without its value.

Dynamic: the configs of `DYNAMIC` may be set at run time for one broker (its id) or for every
broker (the cluster-wide default, the empty name), kept in the batch coordinator so that every
process reads the same ones; a broker's own value wins over the cluster's, which wins over its
properties. They are the defaults of topic settings (Kafka's `DynamicLogConfig`): a topic
created without its own `retention.ms` takes `log.retention.ms` as it is then, and
DescribeConfigs reports a topic's settings against it. (A topic stores the settings it was
created with whole, so a later change of a default applies to the topics created after it.)
Every other property is refused as Kafka refuses it: a known one with INVALID_REQUEST and
"Cannot update these configs dynamically", an unknown name with INVALID_CONFIG.

As in Kafka (`ConfigHelper.describeConfigs`), the resource names a broker by its id: the broker
asked answers for itself; an empty name asks for the cluster-wide dynamic defaults; another
broker's id, or a name that is no id, is an invalid request.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Final, NamedTuple

import msgspec
from kio.schema.errors import ErrorCode as WireError

from diskless.coordinator import ConfigResourceType
from diskless.kafka_server._handlers._topic_configs import (
    SETTINGS,
    ConfigEntry,
    ConfigSource,
    ConfigType,
    Synonym,
)
from diskless.kafka_server._handlers.context import BrokerContext, BrokerSetting, TopicDefaults

_BROKER: Final = ConfigResourceType.BROKER


class Dynamic(NamedTuple):
    """A broker config that may change at run time: the topic setting it is the default of."""

    topic_config: str
    type: ConfigType


DYNAMIC: Final = {
    "log.retention.ms": Dynamic("retention.ms", ConfigType.LONG),
    "log.retention.bytes": Dynamic("retention.bytes", ConfigType.LONG),
    "message.max.bytes": Dynamic("max.message.bytes", ConfigType.INT),
}
"""Kafka's dynamic broker configs this broker applies: broker config -> the topic setting it
gives the default of (whose rule parses it: `_topic_configs.SETTINGS`)."""
_IDENTITY: Final = ("broker.id", "node.id", "broker.rack")


class Refusal(NamedTuple):
    error: WireError
    message: str


def broker_id_error(resource_name: str) -> Refusal | None:
    """Why a BROKER resource name is refused: neither empty (the cluster-wide default) nor a
    broker id."""
    if not resource_name:
        return None
    try:
        int(resource_name)
    except ValueError:
        message = f"Broker id must be an integer, but it is: {resource_name}"
        return Refusal(WireError.invalid_request, message)
    return None


def broker_config_error(
    context: BrokerContext, configs: Mapping[str, str | None]
) -> Refusal | None:
    """Why a broker's (or the cluster's) dynamic configs are refused, as Kafka refuses them
    (`DynamicBrokerConfig.validateConfigs`), or None (a value None: only the name is checked)."""
    known = {s.name for s in context.broker_settings} | set(_IDENTITY)
    unknown = sorted(n for n in configs if n not in DYNAMIC and n not in known)
    if unknown:
        message = f"Unknown broker configs: {', '.join(unknown)}"
        return Refusal(WireError.invalid_config, message)
    static = sorted(n for n in configs if n not in DYNAMIC)
    if static:
        message = f"Cannot update these configs dynamically: Set({', '.join(static)})"
        return Refusal(WireError.invalid_request, message)
    for name, text in configs.items():
        kind = DYNAMIC[name].type
        if text is None:
            continue
        try:
            SETTINGS[DYNAMIC[name].topic_config].parse(text)
        except ValueError as e:
            why = str(e) if str(e).startswith("must") else f"Not a number of type {kind.name}"
            message = f"Invalid value {text} for configuration {name}: {why}"
            return Refusal(WireError.invalid_request, message)
    return None


async def topic_defaults(context: BrokerContext) -> TopicDefaults:
    """What a topic created through this broker now gets: the broker's properties
    (`Settings.topic_defaults`) under its dynamic configs and the cluster's. Raises what the
    coordinator raises."""
    static = context.config.topic_defaults
    own = str(context.broker_id)
    stored = await context.broker.describe_resource_configs(_BROKER, ["", own])
    layers = (
        (stored.get(own, {}), ConfigSource.DYNAMIC_BROKER_CONFIG),
        (stored.get("", {}), ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG),
    )
    dynamic = tuple(
        (name, value, int(source))
        for configs, source in layers
        for name, value in sorted(configs.items())
        if name in DYNAMIC
    )
    values: dict[str, object] = {}
    for name, value, _ in reversed(dynamic):  # the broker's own last: it wins
        setting = SETTINGS[DYNAMIC[name].topic_config]
        try:
            values[setting.field] = setting.parse(value)
        except ValueError:
            continue  # stored before a rule changed: the next layer's value holds
    config = msgspec.structs.replace(static.config, **values)
    return TopicDefaults(config, static.static, dynamic)


async def describe_broker_config(
    context: BrokerContext, resource_name: str
) -> tuple[WireError, str | None, list[ConfigEntry]]:
    """The answer for the BROKER resource `resource_name`: its error, message and entries.
    Raises what the coordinator raises."""
    refused = broker_id_error(resource_name)
    if refused is not None:
        return refused.error, refused.message, []
    if not resource_name:
        cluster = (await context.broker.describe_resource_configs(_BROKER, [""])).get("", {})
        return WireError.none, None, [_cluster_entry(n, v) for n, v in sorted(cluster.items())]
    broker_id = int(resource_name)
    if broker_id != context.broker_id:
        message = (
            f"Unexpected broker id, expected {context.broker_id} or empty string, "
            f"but received {resource_name}"
        )
        return WireError.invalid_request, message, []
    static = ConfigSource.STATIC_BROKER_CONFIG
    rack = context.rack
    entries = [
        ConfigEntry("broker.id", str(broker_id), ConfigType.INT, static, True),
        ConfigEntry("node.id", str(broker_id), ConfigType.INT, static, True),
        ConfigEntry(
            "broker.rack",
            rack,
            ConfigType.STRING,
            static if rack is not None else ConfigSource.DEFAULT_CONFIG,
            True,
        ),
    ]
    defaults = await topic_defaults(context)
    entries.extend(_entry(s, defaults) for s in context.broker_settings if s.name not in _IDENTITY)
    return WireError.none, None, sorted(entries, key=lambda e: e.name)


def _cluster_entry(name: str, value: str) -> ConfigEntry:
    source = ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG
    kind = DYNAMIC[name].type if name in DYNAMIC else ConfigType.STRING
    return ConfigEntry(name, value, kind, source, False, False, (Synonym(name, value, source),))


def _entry(setting: BrokerSetting, defaults: TopicDefaults) -> ConfigEntry:
    value = setting.value
    source = ConfigSource.DEFAULT_CONFIG if setting.default else ConfigSource.STATIC_BROKER_CONFIG
    own = Synonym(setting.name, None if value is None else _text(value), source)
    if setting.secret:
        return ConfigEntry(setting.name, None, ConfigType.PASSWORD, source, True, True, (own,))
    if setting.name in DYNAMIC:
        layers = [
            Synonym(name, text, ConfigSource(code))
            for name, text, code in defaults.dynamic
            if name == setting.name
        ]
        chain = (*layers, own) if own.value is not None else tuple(layers)
        if not chain:
            chain = (own,)
        kind = DYNAMIC[setting.name].type
        return ConfigEntry(setting.name, chain[0].value, kind, chain[0].source, False, False, chain)
    if isinstance(value, bool):
        kind = ConfigType.BOOLEAN
    elif isinstance(value, int):
        kind = ConfigType.LONG if setting.name.endswith(".ms") else ConfigType.INT
    else:
        kind = ConfigType.STRING
    text = None if value is None else _text(value)
    return ConfigEntry(setting.name, text, kind, source, True, False, (own,) if text else ())


def _text(value: str | int | bool) -> str:
    return str(value).lower() if isinstance(value, bool) else str(value)
