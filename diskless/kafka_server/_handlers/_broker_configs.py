"""The broker's configs for DescribeConfigs of a BROKER resource, under Kafka's names.

Listed: Kafka's broker properties a diskless broker applies (the server's property table, each
with its value: the configured one, else the default), the broker's id (`node.id`, and its
older name `broker.id`) and its rack (`broker.rack`, which clients read for rack-aware reads,
KIP-392). Every one is read-only: a diskless broker changes no setting while it runs (Kafka's
dynamic broker configs). A secret is listed as sensitive, without its value.

As in Kafka (`ConfigHelper.describeConfigs`), the resource names a broker by its id: the broker
asked answers for itself; an empty name asks for the cluster-wide dynamic defaults, of which there
are none here; another broker's id, or a name that is no id, is an invalid request.
"""

from __future__ import annotations

from kio.schema.errors import ErrorCode as WireError

from diskless.kafka_server._handlers._topic_configs import ConfigEntry, ConfigSource, ConfigType
from diskless.kafka_server._handlers.context import BrokerContext, BrokerSetting


def describe_broker_config(
    context: BrokerContext, resource_name: str
) -> tuple[WireError, str | None, list[ConfigEntry]]:
    """The answer for the BROKER resource `resource_name`: its error, message and entries."""
    if not resource_name:
        return WireError.none, None, []
    try:
        broker_id = int(resource_name)
    except ValueError:
        return (
            WireError.invalid_request,
            f"Broker id must be an integer, but it is: {resource_name}",
            [],
        )
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
    entries.extend(_entry(s) for s in context.broker_settings if s.name != "broker.rack")
    return WireError.none, None, sorted(entries, key=lambda e: e.name)


def _entry(setting: BrokerSetting) -> ConfigEntry:
    value = setting.value
    source = ConfigSource.DEFAULT_CONFIG if setting.default else ConfigSource.STATIC_BROKER_CONFIG
    if setting.secret:
        return ConfigEntry(setting.name, None, ConfigType.PASSWORD, source, True, True)
    if isinstance(value, bool):
        return ConfigEntry(setting.name, str(value).lower(), ConfigType.BOOLEAN, source, True)
    if isinstance(value, int):
        kind = ConfigType.LONG if setting.name.endswith(".ms") else ConfigType.INT
        return ConfigEntry(setting.name, str(value), kind, source, True)
    return ConfigEntry(setting.name, value, ConfigType.STRING, source, True)
