"""Kafka's property names, mapped onto `ServerConfig` fields: what `--config server.properties`
and `--override NAME=VALUE` accept.

`PROPERTIES` is the table: one line per property, its name as Kafka spells it and the field it
sets. A feature with settings of its own adds its `ServerConfig` fields and its lines here (or
calls `register`); the value's form follows the field's type: an integer, `true`/`false`, or
text (trimmed, as Kafka trims its string settings). `LISTENER_PROPERTIES` are those that may also
be given for one listener as `listener.name.<name>.<property>` (Kafka's per-listener form); such
values are kept, checked, in `ServerConfig.listener_settings` by listener name. A property that
Kafka knows only per listener (`listener.name.<name>.plain.sasl.jaas.config`) is registered
with no field (`register(name, None, per_listener=True)`): its value is text.

Kafka's properties that mean nothing to a diskless broker (`inapplicable_properties`: the KRaft
quorum, replication, the local log's segments, thread pools, ...) are accepted and not applied.
A few are applied outside `ServerConfig`, by the command (`cli_properties`: `node.id`,
`log.dirs`, `log.retention.check.interval.ms`).

What is refused, each with one line naming the property: a Kafka property a diskless broker
does not support (saying why: `inapplicable_properties.UNSUPPORTED`), a name that is neither
Kafka's nor this broker's, a value not of its field's form, and a value the configuration itself
refuses (the property to blame is found by applying the given ones one at a time).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Final

import msgspec

from diskless.kafka_server._handlers.context import BrokerSetting
from diskless.kafka_server._server.auth.tls import Hidden
from diskless.kafka_server._server.settings.config import ServerConfig
from diskless.kafka_server._server.settings.inapplicable_properties import applicable, refusal_of

PROPERTIES: Final[dict[str, str]] = {
    "socket.request.max.bytes": "frame_bytes_max",
    "queued.max.request.bytes": "queued_request_bytes_max",
    "connections.max.idle.ms": "connections_idle_ms_max",
    "broker.session.timeout.ms": "broker_session_timeout_ms",
    "transaction.max.timeout.ms": "transaction_max_timeout_ms",
    "group.consumer.session.timeout.ms": "group_consumer_session_timeout_ms",
    "group.consumer.heartbeat.interval.ms": "group_consumer_heartbeat_interval_ms",
    "group.share.session.timeout.ms": "group_share_session_timeout_ms",
    "group.share.heartbeat.interval.ms": "group_share_heartbeat_interval_ms",
    "group.share.max.size": "group_share_max_size",
    "group.share.record.lock.duration.ms": "group_share_record_lock_duration_ms",
    "group.share.min.record.lock.duration.ms": "group_share_min_record_lock_duration_ms",
    "group.share.delivery.count.limit": "group_share_delivery_count_limit",
    "group.share.partition.max.record.locks": "group_share_partition_max_record_locks",
    "group.share.max.share.sessions": "group_share_max_share_sessions",
    "listeners": "listeners",
    "advertised.listeners": "advertised_listeners",
    "listener.security.protocol.map": "listener_security_protocol_map",
    "broker.rack": "broker_rack",
    "ssl.keystore.type": "ssl_keystore_type",
    "ssl.keystore.location": "ssl_keystore_location",
    "ssl.keystore.certificate.chain": "ssl_keystore_certificate_chain",
    "ssl.keystore.key": "ssl_keystore_key",
    "ssl.key.password": "ssl_key_password",
    "ssl.truststore.type": "ssl_truststore_type",
    "ssl.truststore.location": "ssl_truststore_location",
    "ssl.truststore.certificates": "ssl_truststore_certificates",
    "ssl.client.auth": "ssl_client_auth",
    "ssl.principal.mapping.rules": "ssl_principal_mapping_rules",
    "ssl.enabled.protocols": "ssl_enabled_protocols",
    "sasl.enabled.mechanisms": "sasl_enabled_mechanisms",
    "plain.sasl.jaas.config": "plain_sasl_jaas_config",
    "connection.failed.authentication.delay.ms": "connection_failed_authentication_delay_ms",
    "sasl.server.max.receive.size": "sasl_server_max_receive_size",
    "metrics.address": "metrics_address",
    "metrics.topics.max": "metrics_topics_max",
    "metrics.lag.groups.max": "metrics_lag_groups_max",
    "metrics.lag.partitions.max": "metrics_lag_partitions_max",
    "authorizer.class.name": "authorizer_class_name",
    "super.users": "super_users",
    "allow.everyone.if.no.acl.found": "allow_everyone_if_no_acl_found",
    "auto.create.topics.enable": "auto_create_topics_enable",
    "num.partitions": "num_partitions",
    "log.retention.ms": "log_retention_ms",
    "log.retention.minutes": "log_retention_minutes",
    "log.retention.hours": "log_retention_hours",
    "log.retention.bytes": "log_retention_bytes",
    "message.max.bytes": "message_max_bytes",
    "socket.send.buffer.bytes": "socket_send_buffer_bytes",
    "socket.receive.buffer.bytes": "socket_receive_buffer_bytes",
}
"""Kafka property name -> `ServerConfig` field."""
LISTENER_PROPERTIES: Final[set[str]] = {
    *(name for name in PROPERTIES if name.startswith("ssl.")),
    "sasl.enabled.mechanisms",
    "plain.sasl.jaas.config",
}
"""Properties that `listener.name.<name>.` may prefix."""
SECRETS: Final = ("password", "jaas.config", "ssl.keystore.key")
"""Properties whose values are never shown (`Hidden`): a name containing one of these."""
LISTENER_PREFIX: Final = "listener.name."


def register(name: str, field: str | None, *, per_listener: bool = False) -> None:
    """Map Kafka's property `name` onto the `ServerConfig` field `field`; `field` None: a
    property given only per listener (`per_listener`), kept in `listener_settings`."""
    if field is None and not per_listener:
        raise ValueError(f"{name}: a property without a field exists only per listener")
    if field is not None:
        if field not in _fields():
            raise ValueError(f"ServerConfig has no field {field!r}")
        PROPERTIES[name] = field
    if per_listener:
        LISTENER_PROPERTIES.add(name)


def _fields() -> dict[str, msgspec.structs.FieldInfo]:
    return {f.name: f for f in msgspec.structs.fields(ServerConfig)}


def is_secret(name: str) -> bool:
    return any(part in name for part in SECRETS)


def convert(name: str, text: str) -> object:
    """The value of property `name` in its field's form; ValueError (one line, naming it)."""
    value = text.strip()
    if name not in PROPERTIES:  # a per-listener property without a field: text
        return Hidden(value) if is_secret(name) else value
    field = _fields()[PROPERTIES[name]]
    if field.type in (int, int | None):  # None: not given, the field's default applies
        try:
            return int(value)
        except ValueError:
            raise ValueError(f"{name}: expected an integer, got {value!r}") from None
    if field.type is bool:
        if value.lower() not in ("true", "false"):
            raise ValueError(f"{name}: expected true or false, got {value!r}")
        return value.lower() == "true"
    return Hidden(value) if is_secret(name) else value


def settings(config: ServerConfig) -> list[BrokerSetting]:
    """Every property of the table with its value in `config`, by name; an empty text is not
    set (Kafka's null), a secret's value is never given."""
    default = ServerConfig()
    found = []
    for name, field in sorted(PROPERTIES.items()):
        value = getattr(config, field)
        secret = is_secret(name)
        shown = None if secret or value == "" else value
        found.append(BrokerSetting(name, shown, secret, value == getattr(default, field)))
    return found


def server_config(properties: Mapping[str, str], base: ServerConfig | None = None) -> ServerConfig:
    """`base` (default: the defaults) with `properties` applied; ValueError naming the property
    to blame: a value not of its field's form at once, else the first property without which
    the others are accepted. Inapplicable properties are left out (`applicable`)."""
    config = base if base is not None else ServerConfig()
    properties = applicable(properties)
    converted: dict[str, tuple[str | None, str, object]] = {}
    """Property -> (listener or None, property name without the listener prefix, value)."""
    for name, text in properties.items():
        if name.startswith(LISTENER_PREFIX):
            listener, prop = _listener_property(name)
            value = convert(prop, text)
            converted[name] = (
                listener,
                prop,
                Hidden(str(value)) if is_secret(prop) else str(value),
            )
        elif name in PROPERTIES:
            converted[name] = (None, name, convert(name, text))
        else:
            raise ValueError(f"{name}: {refusal_of(name)}")
    try:
        return _applied(config, converted.values())
    except ValueError as error:
        refusal = " ".join(str(error).split())
    for name in converted:
        others = [change for other, change in converted.items() if other != name]
        try:
            _applied(config, others)
        except ValueError:
            continue
        named = refusal.split(":")[0] in PROPERTIES or refusal.startswith(name)
        raise ValueError(refusal if named else f"{name}: {refusal}") from None
    raise ValueError(refusal)


def _applied(
    config: ServerConfig, changes: Iterable[tuple[str | None, str, object]]
) -> ServerConfig:
    fields: dict[str, object] = {}
    per_listener = {listener: dict(v) for listener, v in config.listener_settings.items()}
    for listener, prop, value in changes:
        if listener is None:
            fields[PROPERTIES[prop]] = value
        else:
            per_listener.setdefault(listener, {})[prop] = (
                value if isinstance(value, str) else str(value)  # a Hidden stays hidden
            )
    return msgspec.structs.replace(config, **fields, listener_settings=per_listener)


def _listener_property(name: str) -> tuple[str, str]:
    """`listener.name.<name>.<property>` -> (NAME, property)."""
    listener, _, prop = name.removeprefix(LISTENER_PREFIX).partition(".")
    if not listener or prop not in LISTENER_PROPERTIES:
        known = ", ".join(sorted(LISTENER_PROPERTIES))
        raise ValueError(
            f"{name}: unknown property (per-listener properties: {LISTENER_PREFIX}<name>."
            f"<property> with <property> one of {known})"
        )
    return listener.upper(), prop
