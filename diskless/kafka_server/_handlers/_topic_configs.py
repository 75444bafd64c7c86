"""Topic configs under Kafka's names: parsed from CreateTopics, listed for DescribeConfigs.

Three kinds, so that what provisioning tools (Terraform's and Strimzi's topic operators) send at
creation is taken as Kafka takes it:
- `SETTINGS`, what `TopicConfig` holds: applied. A topic created without one gets the broker's
  default (`TopicDefaults`: `log.retention.*`, `log.retention.bytes`, `message.max.bytes`, under
  their dynamic values), stored with the topic; AlterConfigs and IncrementalAlterConfigs change
  it later through the same rule (`parse_topic_config` over the topic's own configs,
  `dynamic_topic_configs`). DescribeConfigs reports the value in force, and as its source the
  topic (DYNAMIC_TOPIC_CONFIG) when it differs from the broker's default, else where that
  default came from (DYNAMIC_BROKER_CONFIG, DYNAMIC_DEFAULT_BROKER_CONFIG: the broker's or the
  cluster's dynamic config; STATIC_BROKER_CONFIG: the broker's properties; DEFAULT_CONFIG:
  Kafka's default), with that chain as its synonyms.
- `NOT_APPLICABLE`, Kafka's topic configs whose whole meaning is a part a diskless topic does
  not have (replicas, segments, flushes, the local log's index): accepted with any value of
  their type and not applied, but kept (`TopicConfig.inapplicable_configs`): DescribeConfigs
  lists them, read-only, as given (DYNAMIC_TOPIC_CONFIG) or at Kafka's defaults, so that a
  provisioning tool reading a topic back finds what it asked for.
  KIP-1150's `diskless.enable` is accepted when true (every topic here is diskless) and
  refused when false.
- `COMPACTION`, the log cleaner's (`cleanup.policy`, `min.cleanable.dirty.ratio`,
  `min.compaction.lag.ms`, `max.compaction.lag.ms`, `delete.retention.ms`): checked against
  Kafka's bounds and kept by name with the inapplicable ones, where the lifecycle's cleaner and
  the produce path read them (`TopicConfig.compacted`, `TopicConfig.kept_config`); alterable,
  listed at Kafka's defaults when unset.
- `FIXED`, settings a diskless topic cannot change: asking for their one value is accepted.
Any other name is refused with INVALID_CONFIG and a message naming it, as Kafka refuses an
unknown config.
"""

from __future__ import annotations

import enum
from collections.abc import Callable, Iterable
from typing import Final, NamedTuple

import msgspec

from diskless._types import CompressionType, TimestampType
from diskless.coordinator import MIRROR_CONFIGS, TopicConfig
from diskless.kafka_server._handlers.context import RETENTION_MS_DEFAULT, TopicDefaults
from diskless.records import compression_level_error


class ConfigType(enum.IntEnum):
    """Kafka's `DescribeConfigsResponse.ConfigType` (DescribeConfigs v3+)."""

    BOOLEAN = 1
    STRING = 2
    INT = 3
    LONG = 5
    DOUBLE = 6
    LIST = 7
    PASSWORD = 9


DISKLESS_ENABLE: Final = "diskless.enable"
"""KIP-1150's topic config: true makes a topic diskless, which every topic here is."""


class ConfigSource(enum.IntEnum):
    """Kafka's `DescribeConfigsResponse.ConfigSource`."""

    DYNAMIC_TOPIC_CONFIG = 1
    DYNAMIC_BROKER_CONFIG = 2
    DYNAMIC_DEFAULT_BROKER_CONFIG = 3
    STATIC_BROKER_CONFIG = 4
    DEFAULT_CONFIG = 5
    GROUP_CONFIG = 8


class Synonym(NamedTuple):
    """One of the configs a config's value may come from, in DescribeConfigs' `synonyms`."""

    name: str
    value: str | None
    source: ConfigSource


KAFKA_DEFAULTS: Final = TopicDefaults(TopicConfig(retention_ms=RETENTION_MS_DEFAULT))
"""Kafka's own: 7 days' retention, no size limit, 1048588-byte batches."""


class ConfigEntry(NamedTuple):
    name: str
    value: str | None
    type: ConfigType
    source: ConfigSource
    read_only: bool
    sensitive: bool = False
    """A secret: listed without its value."""
    synonyms: tuple[Synonym, ...] = ()
    """Where its value may come from, the one in force first (Kafka's `include_synonyms`)."""


class InvalidConfig(ValueError):
    """A config CreateTopics cannot apply; the message says which and why."""


_TIMESTAMP_TYPES: Final = {"CreateTime": TimestampType.CREATE_TIME}
_TIMESTAMP_TYPES["LogAppendTime"] = TimestampType.LOG_APPEND_TIME
_TIMESTAMP_NAMES: Final = {v: k for k, v in _TIMESTAMP_TYPES.items()}


def _long(minimum: int) -> Callable[[str], int]:
    def parse(text: str) -> int:
        number = int(text)
        if number < minimum:
            raise ValueError(f"must be at least {minimum}")
        return number

    return parse


def _timestamp_type(text: str) -> TimestampType:
    if text not in _TIMESTAMP_TYPES:
        raise ValueError(f"must be one of {', '.join(_TIMESTAMP_TYPES)}")
    return _TIMESTAMP_TYPES[text]


_COMPRESSION_TYPES: Final = {kind.name.lower(): kind for kind in CompressionType}
"""Kafka's `compression.type` values: producer, uncompressed, gzip, snappy, lz4, zstd."""


def _compression_type(text: str) -> CompressionType:
    if text not in _COMPRESSION_TYPES:
        raise ValueError(f"must be one of {', '.join(_COMPRESSION_TYPES)}")
    return _COMPRESSION_TYPES[text]


def _level(codec: CompressionType) -> Callable[[str], int]:
    def parse(text: str) -> int:
        level = int(text)
        problem = compression_level_error(codec, level)
        if problem is not None:
            raise ValueError(problem)
        return level

    return parse


class _Setting(NamedTuple):
    field: str
    parse: Callable[[str], object]
    type: ConfigType


SETTINGS: Final[dict[str, _Setting]] = {
    "retention.ms": _Setting("retention_ms", _long(-1), ConfigType.LONG),
    "retention.bytes": _Setting("retention_bytes", _long(-1), ConfigType.LONG),
    "max.message.bytes": _Setting("max_message_bytes", _long(0), ConfigType.INT),
    "message.timestamp.type": _Setting("timestamp_type", _timestamp_type, ConfigType.STRING),
    "message.timestamp.before.max.ms": _Setting(
        "message_timestamp_before_max_ms", _long(0), ConfigType.LONG
    ),
    "message.timestamp.after.max.ms": _Setting(
        "message_timestamp_after_max_ms", _long(0), ConfigType.LONG
    ),
    "compression.type": _Setting("compression_type", _compression_type, ConfigType.STRING),
    "compression.gzip.level": _Setting(
        "compression_gzip_level", _level(CompressionType.GZIP), ConfigType.INT
    ),
    "compression.lz4.level": _Setting(
        "compression_lz4_level", _level(CompressionType.LZ4), ConfigType.INT
    ),
    "compression.zstd.level": _Setting(
        "compression_zstd_level", _level(CompressionType.ZSTD), ConfigType.INT
    ),
}
"""Kafka's name -> the `TopicConfig` field, how to parse a value, and its Kafka type."""

BROKER_SYNONYMS: Final = {
    "retention.ms": ("log.retention.ms", "log.retention.hours", "168"),
    "retention.bytes": ("log.retention.bytes", "log.retention.bytes", None),
    "max.message.bytes": ("message.max.bytes", "message.max.bytes", None),
    "message.timestamp.type": ("log.message.timestamp.type",) * 2 + (None,),
    "message.timestamp.before.max.ms": ("log.message.timestamp.before.max.ms",) * 2 + (None,),
    "message.timestamp.after.max.ms": ("log.message.timestamp.after.max.ms",) * 2 + (None,),
    "compression.type": ("compression.type", "compression.type", None),
    "compression.gzip.level": ("compression.gzip.level",) * 2 + (None,),
    "compression.lz4.level": ("compression.lz4.level",) * 2 + (None,),
    "compression.zstd.level": ("compression.zstd.level",) * 2 + (None,),
}
"""A topic setting -> the broker config giving its default (Kafka's `TopicConfigSynonyms`), and
the name and value under which Kafka's own default is reported among DescribeConfigs' synonyms
(None: the topic setting's Kafka default, `KAFKA_DEFAULTS`)."""

NOT_APPLICABLE: Final = {
    "min.insync.replicas": ("1", ConfigType.INT),
    "unclean.leader.election.enable": ("false", ConfigType.BOOLEAN),
    "leader.replication.throttled.replicas": ("", ConfigType.LIST),
    "follower.replication.throttled.replicas": ("", ConfigType.LIST),
    "segment.bytes": ("1073741824", ConfigType.INT),
    "segment.ms": ("604800000", ConfigType.LONG),
    "segment.jitter.ms": ("0", ConfigType.LONG),
    "segment.index.bytes": ("10485760", ConfigType.INT),
    "index.interval.bytes": ("4096", ConfigType.INT),
    "file.delete.delay.ms": ("60000", ConfigType.LONG),
    "flush.messages": ("9223372036854775807", ConfigType.LONG),
    "flush.ms": ("9223372036854775807", ConfigType.LONG),
    "preallocate": ("false", ConfigType.BOOLEAN),
    "local.retention.ms": ("-2", ConfigType.LONG),
    "local.retention.bytes": ("-2", ConfigType.LONG),
    DISKLESS_ENABLE: ("true", ConfigType.BOOLEAN),
}
"""Kafka's topic configs that mean nothing to a diskless topic (replication, the local log's
segments, flushes and index) -> Kafka's default and type; values are checked against the type.
`segment.ms` and `segment.bytes` among them: a diskless partition has no active segment, and
the part they play for the cleaner (how long records stay uncleanable) is the lifecycle's
consolidation age."""

_LONG_MAX: Final = (1 << 63) - 1
_POLICIES: Final = frozenset({"delete", "compact"})


def _cleanup_policy(text: str) -> str:
    policies = [part.strip() for part in text.split(",")]
    if not policies or not set(policies) <= _POLICIES or len(set(policies)) != len(policies):
        raise ValueError("must be delete, compact or compact,delete")
    return ",".join(sorted(policies))


def _ratio(text: str) -> str:
    ratio = float(text)
    if not 0 <= ratio <= 1:
        raise ValueError("must be between 0 and 1")
    return text.strip()


def _long_text(minimum: int) -> Callable[[str], str]:
    parse = _long(minimum)

    def check(text: str) -> str:
        if parse(text) > _LONG_MAX:
            raise ValueError(f"must be at most {_LONG_MAX}")
        return text.strip()

    return check


COMPACTION: Final[dict[str, tuple[str, ConfigType, Callable[[str], str]]]] = {
    "cleanup.policy": ("delete", ConfigType.LIST, _cleanup_policy),
    "min.cleanable.dirty.ratio": ("0.5", ConfigType.DOUBLE, _ratio),
    "min.compaction.lag.ms": ("0", ConfigType.LONG, _long_text(0)),
    "max.compaction.lag.ms": (str(_LONG_MAX), ConfigType.LONG, _long_text(1)),
    "delete.retention.ms": ("86400000", ConfigType.LONG, _long_text(0)),
}
"""The log cleaner's topic configs (Kafka's `LogConfig`) -> Kafka's default, type, and the
check of a value within Kafka's bounds (its normal form: kept by name, as given)."""

FIXED: Final[tuple[ConfigEntry, ...]] = ()
"""Settings a diskless topic cannot change, listed so that clients reading them find them."""


def parse_topic_config(
    configs: Iterable[tuple[str, str | None]], defaults: TopicDefaults = KAFKA_DEFAULTS
) -> TopicConfig:
    """The `TopicConfig` of CreateTopics' `(name, value)` pairs over `defaults`; raises
    `InvalidConfig`."""
    values: dict[str, object] = {}
    kept: dict[str, str] = {}
    for name, text in configs:
        setting = SETTINGS.get(name)
        if name in COMPACTION:
            if text is not None:
                try:
                    kept[name] = COMPACTION[name][2](text)
                except ValueError as e:
                    raise InvalidConfig(
                        f"invalid value {text!r} for config {name!r}: {e}"
                    ) from None
            continue
        if setting is None:
            _check_accepted(name, text)
            if name in NOT_APPLICABLE and text is not None:
                kept[name] = text.strip()
            continue
        if text is None:
            continue  # null: the default, as Kafka treats it
        try:
            values[setting.field] = setting.parse(text)
        except ValueError as e:
            raise InvalidConfig(f"invalid value {text!r} for config {name!r}: {e}") from None
    lags = [int(kept.get(name, COMPACTION[name][0])) for name in _LAGS]
    if lags[0] > lags[1]:
        raise InvalidConfig(
            f"conflict topic config setting {_LAGS[0]} ({lags[0]}) > {_LAGS[1]} ({lags[1]})"
        )
    return msgspec.structs.replace(
        defaults.config, **values, inapplicable_configs=tuple(sorted(kept.items()))
    )


_LAGS: Final = ("min.compaction.lag.ms", "max.compaction.lag.ms")


def _check_accepted(name: str, text: str | None) -> None:
    """A config outside `SETTINGS`: accepted (not applied), or `InvalidConfig` saying why."""
    if name in NOT_APPLICABLE:
        if text is None:
            return
        if name == DISKLESS_ENABLE and text.strip().lower() == "false":
            raise InvalidConfig(
                f"config {name!r} cannot be false: every topic of this cluster is diskless"
                " (its records live in the object store; there is no local log to keep them in)"
            )
        kind = NOT_APPLICABLE[name][1]
        if not _of_type(text, kind):
            raise InvalidConfig(
                f"invalid value {text!r} for config {name!r}: expected {kind.name.lower()}"
            )
        return
    fixed = next((f for f in FIXED if f.name == name), None)
    if fixed is not None and text == fixed.value:
        return  # asking for what a diskless topic does anyway
    raise InvalidConfig(f"config {name!r} is not supported by diskless topics")


def _of_type(text: str, kind: ConfigType) -> bool:
    if kind is ConfigType.BOOLEAN:
        return text.strip().lower() in ("true", "false")
    if kind in (ConfigType.INT, ConfigType.LONG):
        bits = 31 if kind is ConfigType.INT else 63
        try:
            return -(1 << bits) <= int(text.strip()) < 1 << bits
        except ValueError:
            return False
    if kind is ConfigType.DOUBLE:
        try:
            float(text)
        except ValueError:
            return False
    return True


def topic_config_type(name: str) -> ConfigType | None:
    """The Kafka type of a topic config this broker knows; None for a name it does not."""
    if name in SETTINGS:
        return SETTINGS[name].type
    if name in NOT_APPLICABLE:
        return NOT_APPLICABLE[name][1]
    if name in COMPACTION:
        return COMPACTION[name][1]
    fixed = next((f for f in FIXED if f.name == name), None)
    return None if fixed is None else fixed.type


def dynamic_topic_configs(
    config: TopicConfig, defaults: TopicDefaults = KAFKA_DEFAULTS
) -> dict[str, str]:
    """A topic's own configs, name -> value, as `parse_topic_config` takes them back: the
    settings whose value is not the broker's default, and the kept inapplicable ones (what
    DescribeConfigs reports as DYNAMIC_TOPIC_CONFIG)."""
    own = {
        name: _text(getattr(config, setting.field))
        for name, setting in SETTINGS.items()
        if getattr(config, setting.field) != getattr(defaults.config, setting.field)
    }
    # A mirrored topic's mark (`mirror.*`) is the coordinator's, kept whatever a change says.
    return own | {k: v for k, v in config.inapplicable_configs if k not in MIRROR_CONFIGS}


def _text(value: object) -> str:
    if isinstance(value, TimestampType):
        return _TIMESTAMP_NAMES[value]
    if isinstance(value, CompressionType):
        return value.name.lower()
    return str(value)


def describe_topic_config(
    config: TopicConfig, defaults: TopicDefaults = KAFKA_DEFAULTS
) -> list[ConfigEntry]:
    """Every setting of a topic under its Kafka name; a value that differs from the broker's
    default reads as set on the topic, one equal to it as that default's."""
    entries = []
    for name, setting in SETTINGS.items():
        value = getattr(config, setting.field)
        default = getattr(defaults.config, setting.field)
        synonyms = _broker_synonyms(name, _text(default), defaults)
        if value != default:
            synonyms = (Synonym(name, _text(value), ConfigSource.DYNAMIC_TOPIC_CONFIG), *synonyms)
        entries.append(
            ConfigEntry(
                name, _text(value), setting.type, synonyms[0].source, False, False, synonyms
            )
        )
    kept = dict(config.inapplicable_configs)
    not_applied = [
        ConfigEntry(name, kept[name], kind, ConfigSource.DYNAMIC_TOPIC_CONFIG, True)
        if name in kept
        else ConfigEntry(name, default, kind, ConfigSource.DEFAULT_CONFIG, True)
        for name, (default, kind) in NOT_APPLICABLE.items()
    ]
    compaction = [
        ConfigEntry(name, kept[name], kind, ConfigSource.DYNAMIC_TOPIC_CONFIG, False)
        if name in kept
        else ConfigEntry(name, default, kind, ConfigSource.DEFAULT_CONFIG, False)
        for name, (default, kind, _) in COMPACTION.items()
    ]
    return entries + compaction + not_applied + list(FIXED)


def _broker_synonyms(name: str, default: str, defaults: TopicDefaults) -> tuple[Synonym, ...]:
    """The broker configs a topic setting's default comes from, the one in force first: the
    dynamic ones (the broker's own, then the cluster's), the broker's properties, Kafka's."""
    broker_name, kafka_name, kafka_value = BROKER_SYNONYMS[name]
    if kafka_value is None:
        kafka_value = _text(getattr(KAFKA_DEFAULTS.config, SETTINGS[name].field))
    found = [
        Synonym(dynamic_name, value, ConfigSource(source))
        for dynamic_name, value, source in defaults.dynamic
        if dynamic_name == broker_name
    ]
    if name in defaults.static:
        static_value = default if not found else None
        found.append(Synonym(broker_name, static_value, ConfigSource.STATIC_BROKER_CONFIG))
    found.append(Synonym(kafka_name, kafka_value, ConfigSource.DEFAULT_CONFIG))
    return tuple(s for s in found if s.value is not None)
