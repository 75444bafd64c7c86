"""Topic configs under Kafka's names: parsed from CreateTopics, listed for DescribeConfigs.

Only what `TopicConfig` holds can be set; any other name is refused with INVALID_CONFIG and a
message naming it, as Kafka refuses an unknown config. DescribeConfigs lists the same settings,
plus the fixed values of a few settings clients commonly read (a diskless topic is never
compacted), read-only.
"""

from __future__ import annotations

import enum
from collections.abc import Callable, Iterable
from typing import Final, NamedTuple

import msgspec

from diskless._types import CompressionType, TimestampType
from diskless.coordinator import TopicConfig
from diskless.records import compression_level_error


class ConfigType(enum.IntEnum):
    """Kafka's `DescribeConfigsResponse.ConfigType` (DescribeConfigs v3+)."""

    BOOLEAN = 1
    STRING = 2
    INT = 3
    LONG = 5
    PASSWORD = 9


class ConfigSource(enum.IntEnum):
    """Kafka's `DescribeConfigsResponse.ConfigSource`."""

    DYNAMIC_TOPIC_CONFIG = 1
    STATIC_BROKER_CONFIG = 4
    DEFAULT_CONFIG = 5


class ConfigEntry(NamedTuple):
    name: str
    value: str | None
    type: ConfigType
    source: ConfigSource
    read_only: bool
    sensitive: bool = False
    """A secret: listed without its value."""


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

FIXED: Final = (
    ConfigEntry("cleanup.policy", "delete", ConfigType.STRING, ConfigSource.DEFAULT_CONFIG, True),
)
"""Settings a diskless topic cannot change, listed so that clients reading them find them."""


def parse_topic_config(configs: Iterable[tuple[str, str | None]]) -> TopicConfig:
    """The `TopicConfig` of CreateTopics' `(name, value)` pairs; raises `InvalidConfig`."""
    values: dict[str, object] = {}
    for name, text in configs:
        setting = SETTINGS.get(name)
        if setting is None:
            fixed = next((f for f in FIXED if f.name == name), None)
            if fixed is not None and text == fixed.value:
                continue  # asking for what a diskless topic does anyway
            raise InvalidConfig(f"config {name!r} is not supported by diskless topics")
        if text is None:
            continue  # null: the default, as Kafka treats it
        try:
            values[setting.field] = setting.parse(text)
        except ValueError as e:
            raise InvalidConfig(f"invalid value {text!r} for config {name!r}: {e}") from None
    return msgspec.structs.replace(TopicConfig(), **values)


def _text(value: object) -> str:
    if isinstance(value, TimestampType):
        return _TIMESTAMP_NAMES[value]
    if isinstance(value, CompressionType):
        return value.name.lower()
    return str(value)


def describe_topic_config(config: TopicConfig) -> list[ConfigEntry]:
    """Every setting of a topic under its Kafka name; a value that differs from the default
    reads as set on the topic."""
    default = TopicConfig()
    entries = []
    for name, setting in SETTINGS.items():
        value = getattr(config, setting.field)
        source = (
            ConfigSource.DEFAULT_CONFIG
            if value == getattr(default, setting.field)
            else ConfigSource.DYNAMIC_TOPIC_CONFIG
        )
        entries.append(ConfigEntry(name, _text(value), setting.type, source, False))
    return entries + list(FIXED)
