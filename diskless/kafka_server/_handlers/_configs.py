"""Configs of topics, brokers and groups: DescribeConfigs, AlterConfigs, IncrementalAlterConfigs.

A topic's configs are its `TopicConfig` in the batch coordinator; a broker's (by id, or the
cluster-wide default: the empty name) and a group's are names and values there
(`alter_resource_configs`). So whichever process a change goes through, every process reads it:
retention, the produce checks and reads follow a topic's (the change feed names it), the group
coordinator reads a group's (`_coordination.group_configs`).

A change is read, decided and written: the resource's dynamic set (a topic's own settings, as
DescribeConfigs reports them DYNAMIC_TOPIC_CONFIG), changed as the request says, checked whole by
the rule that checks it at creation (`parse_topic_config`, `group_config_error`,
`broker_config_error`), then stored only if nothing changed it meanwhile (else decided again).
IncrementalAlterConfigs changes the set entry by entry: SET, DELETE (back to the default),
APPEND and SUBTRACT (list configs only, else INVALID_CONFIG); AlterConfigs replaces it whole
(entries without a value are left out, as Kafka leaves them). `validate_only` checks and stores
nothing. Refusals, per resource, with Kafka's codes: a resource or a config name given twice
INVALID_REQUEST; an unknown config or a bad value INVALID_CONFIG (a broker config Kafka does not
change at run time, or a bad value of one, INVALID_REQUEST as Kafka's `DynamicBrokerConfig`
answers); an unknown topic UNKNOWN_TOPIC_OR_PARTITION.

Authorization, per resource before anything else is asked of it (Kafka's table): a topic needs
DESCRIBE_CONFIGS / ALTER_CONFIGS on it (TOPIC_AUTHORIZATION_FAILED), a broker the same on the
cluster (CLUSTER_AUTHORIZATION_FAILED), a group on the group (GROUP_AUTHORIZATION_FAILED).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping, Sequence
from typing import Final, Protocol

import kio.schema.describe_configs.v1 as describe_configs_v1
import kio.schema.describe_configs.v2 as describe_configs_v2
from kio.schema.errors import ErrorCode as WireError
from kio.static.protocol import Entity, ResponsePayload

from diskless._kafka_errors import admin_error
from diskless.coordinator import AclOperation, ConfigResourceType, TopicConfig
from diskless.errors import DisklessError
from diskless.kafka_server._coordination.group_configs import (
    GROUP_CONFIGS,
    KAFKA_GROUP_DEFAULTS,
    GroupConfigs,
    group_config_error,
)
from diskless.kafka_server._handlers._access import DESCRIBE_CONFIGS, Access
from diskless.kafka_server._handlers._broker_configs import (
    Refusal,
    broker_config_error,
    broker_id_error,
    describe_broker_config,
    topic_defaults,
)
from diskless.kafka_server._handlers._errors import failure
from diskless.kafka_server._handlers._route import NO_THROTTLE, Response
from diskless.kafka_server._handlers._topic_configs import (
    ConfigEntry,
    ConfigSource,
    ConfigType,
    InvalidConfig,
    Synonym,
    describe_topic_config,
    dynamic_topic_configs,
    parse_topic_config,
    topic_config_type,
)
from diskless.kafka_server._handlers.context import BrokerContext, Session, TopicDefaults
from diskless.kafka_server._protocol.fields import build, nested
from diskless.kafka_server._protocol.messages_admin import (
    AlterConfigsRequest,
    DescribeConfigsRequest,
    IncrementalAlterConfigsRequest,
)

_log = logging.getLogger(__name__)

TOPIC: Final = 2
BROKER: Final = int(ConfigResourceType.BROKER)
GROUP: Final = int(ConfigResourceType.GROUP)
SET: Final = 0
DELETE: Final = 1
APPEND: Final = 2
SUBTRACT: Final = 3
_OPERATIONS: Final = {SET: "set", DELETE: "delete", APPEND: "append", SUBTRACT: "subtract"}
ALTER_CONFIGS: Final = AclOperation.ALTER_CONFIGS
DECISIONS_MAX: Final = 16
"""A change decided again this many times (each losing to another change of the same resource)
gives up, answering that the coordinator is busy."""
_NOT_AUTHORIZED: Final = "Authorization failed."
_UNAVAILABLE: Final = "the batch coordinator is unavailable; try again"
_REFUSED: Final = {
    TOPIC: WireError.topic_authorization_failed,
    BROKER: WireError.cluster_authorization_failed,
    GROUP: WireError.group_authorization_failed,
}
_WITHOUT_DOCUMENTATION: Final = (
    describe_configs_v1.DescribeConfigsRequest,
    describe_configs_v2.DescribeConfigsRequest,
)
"""DescribeConfigs v3 added `include_documentation`."""

Edit = tuple[str, int, str | None]
"""(config name, operation, value): one entry of a change."""


class _Refused(Exception):
    def __init__(self, code: WireError, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message


def _allowed(access: Access, operation: AclOperation, resource_type: int, name: str) -> bool:
    if resource_type == TOPIC:
        return access.topic(operation, name)
    if resource_type == GROUP:
        return access.group(operation, name)
    if resource_type == BROKER:
        return access.cluster(operation)
    return True  # refused as an unsupported resource type


# --- DescribeConfigs ------------------------------------------------------------------------------
class _Described(Protocol):
    @property
    def resource_type(self) -> int: ...

    @property
    def resource_name(self) -> str: ...

    @property
    def configuration_keys(self) -> Sequence[str] | None: ...


async def handle_describe_configs(
    context: BrokerContext, session: Session, request: DescribeConfigsRequest, response: Response
) -> ResponsePayload:
    access = Access(context, session)
    documented = not isinstance(request, _WITHOUT_DOCUMENTATION) and bool(
        request.include_documentation
    )
    synonyms = bool(request.include_synonyms)
    result_entry = nested(response, "DescribeConfigsResult")
    results = []
    for resource in request.resources:
        kind, name = int(resource.resource_type), resource.resource_name
        entries: tuple[Entity, ...] = ()
        message: str | None
        if not _allowed(access, DESCRIBE_CONFIGS, kind, name):
            error, message = _REFUSED[kind], _NOT_AUTHORIZED
        else:
            try:
                error, message, found = await _describe(context, kind, name)
            except DisklessError as e:
                found = []
                error = failure(admin_error, e, f"describing the configs of {name!r}")
                message = _UNAVAILABLE
            entries = _entries(response, resource, found, synonyms, documented)
        results.append(
            build(
                result_entry,
                error_code=error,
                error_message=message,
                resource_type=resource.resource_type,
                resource_name=name,
                configs=entries,
            )
        )
    return build(response, throttle_time=NO_THROTTLE, results=tuple(results))


async def _describe(
    context: BrokerContext, kind: int, name: str
) -> tuple[WireError, str | None, list[ConfigEntry]]:
    if kind == BROKER:
        return await describe_broker_config(context, name)
    if kind == GROUP:
        stored = await context.broker.describe_resource_configs(ConfigResourceType.GROUP, [name])
        return (
            WireError.none,
            None,
            describe_group_config(stored.get(name, {}), context.config.group_defaults),
        )
    if kind != TOPIC:
        return WireError.invalid_request, f"resource type {kind} is not supported", []
    described = await context.broker.describe_topics([name])
    if not described:
        return WireError.unknown_topic_or_partition, f"unknown topic {name!r}", []
    defaults = await topic_defaults(context)
    return WireError.none, None, describe_topic_config(described[0].config, defaults)


def describe_group_config(
    configs: Mapping[str, str], defaults: GroupConfigs = KAFKA_GROUP_DEFAULTS
) -> list[ConfigEntry]:
    """Every group config: the group's own (GROUP_CONFIG), else the broker's default (its
    property, STATIC_BROKER_CONFIG, where it sets one)."""
    entries = []
    for name, setting in GROUP_CONFIGS.items():
        kind = ConfigType.STRING if setting.choices else ConfigType.INT
        value = str(getattr(defaults, name.replace(".", "_")))
        given = value != setting.default
        source = ConfigSource.STATIC_BROKER_CONFIG if given else ConfigSource.DEFAULT_CONFIG
        default = Synonym(setting.broker_default, value, source)
        chain: tuple[Synonym, ...] = (default,)
        if name in configs:
            chain = (Synonym(name, configs[name], ConfigSource.GROUP_CONFIG), default)
        source = chain[0].source
        entries.append(ConfigEntry(name, chain[0].value, kind, source, False, False, chain))
    return entries


def _entries(
    response: Response,
    resource: _Described,
    found: list[ConfigEntry],
    synonyms: bool,
    documented: bool,
) -> tuple[Entity, ...]:
    config_entry = nested(response, "DescribeConfigsResourceResult")
    synonym_entry = nested(response, "DescribeConfigsSynonym")
    keys = resource.configuration_keys
    return tuple(
        build(
            config_entry,
            name=config.name,
            value=None if config.sensitive else config.value,
            read_only=config.read_only,
            config_source=int(config.source),
            is_sensitive=config.sensitive,
            synonyms=tuple(
                build(
                    synonym_entry,
                    name=s.name,
                    value=None if config.sensitive else s.value,
                    source=int(s.source),
                )
                for s in (config.synonyms if synonyms else ())
            ),
            config_type=int(config.type),
            documentation="" if documented else None,
        )
        for config in found
        if keys is None or config.name in keys
    )


# --- AlterConfigs, IncrementalAlterConfigs -------------------------------------------------------
async def handle_incremental_alter_configs(
    context: BrokerContext,
    session: Session,
    request: IncrementalAlterConfigsRequest,
    response: Response,
) -> ResponsePayload:
    changes = [
        (
            int(r.resource_type),
            r.resource_name,
            [(c.name, int(c.config_operation), c.value) for c in r.configs],
        )
        for r in request.resources
    ]
    answers = await _alter(context, session, changes, bool(request.validate_only), True)
    return _encode(response, changes, answers)


async def handle_alter_configs(
    context: BrokerContext, session: Session, request: AlterConfigsRequest, response: Response
) -> ResponsePayload:
    changes = [
        (int(r.resource_type), r.resource_name, [(c.name, SET, c.value) for c in r.configs])
        for r in request.resources
    ]
    answers = await _alter(context, session, changes, bool(request.validate_only), False)
    return _encode(response, changes, answers)


def _encode(
    response: Response,
    changes: Sequence[tuple[int, str, list[Edit]]],
    answers: Sequence[tuple[WireError, str | None]],
) -> ResponsePayload:
    entry = nested(response, "AlterConfigsResourceResponse")
    return build(
        response,
        throttle_time=NO_THROTTLE,
        responses=tuple(
            build(
                entry,
                error_code=error,
                error_message=message,
                resource_type=kind,
                resource_name=name,
            )
            for (kind, name, _), (error, message) in zip(changes, answers, strict=True)
        ),
    )


async def _alter(
    context: BrokerContext,
    session: Session,
    changes: Sequence[tuple[int, str, list[Edit]]],
    validate_only: bool,
    incremental: bool,
) -> list[tuple[WireError, str | None]]:
    access = Access(context, session)
    keys = [(kind, name) for kind, name, _ in changes]
    answers: list[tuple[WireError, str | None]] = []
    for kind, name, edits in changes:
        try:
            if keys.count((kind, name)) > 1:
                raise _Refused(WireError.invalid_request, "Error due to duplicate resources")
            if not _allowed(access, ALTER_CONFIGS, kind, name):
                raise _Refused(_REFUSED[kind], _NOT_AUTHORIZED)
            names = [n for n, _, _ in edits]
            if len(set(names)) < len(names):
                raise _Refused(WireError.invalid_request, "Error due to duplicate config keys")
            if not incremental:
                edits = [e for e in edits if e[2] is not None]
            await _alter_resource(context, kind, name, edits, validate_only, incremental)
            answers.append((WireError.none, None))
        except _Refused as refused:
            answers.append((refused.code, refused.message))
        except DisklessError as e:
            code = failure(admin_error, e, f"altering the configs of {name!r}")
            answers.append((code, _UNAVAILABLE))
    return answers


async def _alter_resource(
    context: BrokerContext,
    kind: int,
    name: str,
    edits: list[Edit],
    validate_only: bool,
    incremental: bool,
) -> None:
    """Decide and store one resource's change; raises `_Refused` (or `DisklessError`)."""
    for _ in range(DECISIONS_MAX):
        if kind == TOPIC:
            done = await _alter_topic(context, name, edits, validate_only, incremental)
        elif kind in (BROKER, GROUP):
            done = await _alter_named(context, kind, name, edits, validate_only, incremental)
        else:
            raise _Refused(WireError.invalid_request, f"resource type {kind} is not supported")
        if done:
            if not validate_only:
                _log.info("altered the configs of resource %d %r: %s", kind, name, edits)
            return
    raise _Refused(WireError.request_timed_out, "the configs kept changing; try again")


async def _alter_topic(
    context: BrokerContext, name: str, edits: list[Edit], validate_only: bool, incremental: bool
) -> bool:
    described = await context.broker.describe_topics([name])
    if not described:
        raise _Refused(WireError.unknown_topic_or_partition, f"unknown topic {name!r}")
    current = described[0].config
    defaults: TopicDefaults = await topic_defaults(context)
    own = dynamic_topic_configs(current, defaults) if incremental else {}
    for config_name, _, _ in edits:
        if topic_config_type(config_name) is None:
            raise _Refused(WireError.invalid_config, f"Unknown topic config name: {config_name}")
    changed = _edited(own, edits, topic_config_type)
    try:
        config: TopicConfig = parse_topic_config(changed.items(), defaults)
    except InvalidConfig as e:
        raise _Refused(WireError.invalid_config, str(e)) from None
    if validate_only:
        return True
    stored = await context.broker.alter_topic_config(name, config, expected=current)
    if stored is None:
        raise _Refused(WireError.unknown_topic_or_partition, f"unknown topic {name!r}")
    return stored == config


async def _alter_named(
    context: BrokerContext,
    kind: int,
    name: str,
    edits: list[Edit],
    validate_only: bool,
    incremental: bool,
) -> bool:
    resource_type = ConfigResourceType(kind)
    refusal: Refusal | None = None
    if kind == BROKER:
        refusal = broker_id_error(name)
    elif not name:
        refusal = Refusal(WireError.invalid_request, "a group is named by a non-empty id")
    if refusal is not None:
        raise _Refused(refusal.error, refusal.message)
    stored = (await context.broker.describe_resource_configs(resource_type, [name])).get(name, {})
    changed = _edited(stored if incremental else {}, edits, _no_lists)
    named = dict.fromkeys(n for n, _, _ in edits)
    if kind == BROKER:
        refusal = broker_config_error(context, named) or broker_config_error(context, changed)
    else:
        bounds = context.config.group_bounds
        message = group_config_error(named, bounds) or group_config_error(changed, bounds)
        refusal = None if message is None else Refusal(WireError.invalid_config, message)
    if refusal is not None:
        raise _Refused(refusal.error, refusal.message)
    if validate_only:
        return True
    now = await context.broker.alter_resource_configs(resource_type, name, changed, stored)
    return now == changed


def _no_lists(name: str) -> ConfigType | None:
    """The broker and group configs that change at run time hold no lists."""
    return ConfigType.STRING


def _edited(
    own: Mapping[str, str], edits: list[Edit], type_of: Callable[[str], ConfigType | None]
) -> dict[str, str]:
    """`own` with `edits` applied in order; raises `_Refused` for an edit Kafka refuses (a list
    config not set is empty, as Kafka's are by default)."""
    changed = dict(own)
    for name, operation, value in edits:
        if operation not in _OPERATIONS:
            raise _Refused(WireError.invalid_request, f"unknown config operation {operation}")
        if operation == DELETE:
            changed.pop(name, None)
            continue
        if value is None:
            raise _Refused(WireError.invalid_request, f"Null value not supported for : {name}")
        if operation == SET:
            changed[name] = value
            continue
        if type_of(name) is not ConfigType.LIST:
            raise _Refused(
                WireError.invalid_config,
                f"Config value {_OPERATIONS[operation]} is not allowed for config key: {name}",
            )
        items = [i for i in changed.get(name, "").split(",") if i]
        given = [i.strip() for i in value.split(",") if i.strip()]
        if operation == APPEND:
            items += [i for i in given if i not in items]
        else:
            items = [i for i in items if i not in given]
        changed[name] = ",".join(items)
    return changed
