"""Group configs (KIP-848's and KIP-932's per-group settings): Kafka's names, defaults and
bounds, the checks IncrementalAlterConfigs applies to a GROUP resource, and the effective
configs of a group, which the group coordinator reads (`group_configs`).

A group's dynamic configs are kept in the batch coordinator (`alter_resource_configs` on
`ConfigResourceType.GROUP`), so every broker process reads the same ones: one read each
(`group_configs`), or from a process's copy of all of them (`GroupConfigCopy`), refreshed as the
ACLs are when the coordinator's `config_version` grows. A name a group does
not set has the broker's default (Kafka's `group.consumer.session.timeout.ms` and its kin, at
Kafka's defaults here). As in Kafka (`GroupConfig.validate`), a group's whole set is checked with
the defaults filling in what it does not set: each value within the broker's bounds
(`group.consumer.min.session.timeout.ms`...), and each session timeout above its heartbeat
interval; a refusal is INVALID_CONFIG with Kafka's message.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping, Sequence
from types import MappingProxyType
from typing import Final, NamedTuple, Protocol

from diskless.clock import Clock
from diskless.coordinator import BatchCoordinator, ConfigResourceType, parse_offset_reset
from diskless.errors import DisklessError
from diskless.kafka_server._coordination.refresher import ForwardCopy

_log = logging.getLogger(__name__)


class GroupSetting(NamedTuple):
    """One group config: its default and, for a number, the broker's bounds on it."""

    default: str
    broker_default: str
    """The broker config whose value is the default (a synonym in DescribeConfigs)."""
    bounds: tuple[str, int, str, int] | None = None
    """(name of the lower bound, its value, name of the upper bound, its value)."""
    choices: tuple[str, ...] = ()
    """A text config's allowed values (with `parse`, its fixed ones)."""
    parse: Callable[[str], object] | None = None
    """A text config whose values are not a list only: what reads one (None: refused)."""
    refusal: str = ""
    """Why a value `parse` refuses is refused (Kafka's validator's message)."""


GROUP_CONFIGS: Final[dict[str, GroupSetting]] = {
    "consumer.session.timeout.ms": GroupSetting(
        "45000",
        "group.consumer.session.timeout.ms",
        (
            "group.consumer.min.session.timeout.ms", 45_000,
            "group.consumer.max.session.timeout.ms", 60_000,
        ),
    ),
    "consumer.heartbeat.interval.ms": GroupSetting(
        "5000",
        "group.consumer.heartbeat.interval.ms",
        (
            "group.consumer.min.heartbeat.interval.ms", 5_000,
            "group.consumer.max.heartbeat.interval.ms", 15_000,
        ),
    ),
    "share.session.timeout.ms": GroupSetting(
        "45000",
        "group.share.session.timeout.ms",
        (
            "group.share.min.session.timeout.ms", 45_000,
            "group.share.max.session.timeout.ms", 60_000,
        ),
    ),
    "share.heartbeat.interval.ms": GroupSetting(
        "5000",
        "group.share.heartbeat.interval.ms",
        (
            "group.share.min.heartbeat.interval.ms", 5_000,
            "group.share.max.heartbeat.interval.ms", 15_000,
        ),
    ),
    "share.record.lock.duration.ms": GroupSetting(
        "30000",
        "group.share.record.lock.duration.ms",
        (
            "group.share.min.record.lock.duration.ms", 15_000,
            "group.share.max.record.lock.duration.ms", 60_000,
        ),
    ),
    "share.auto.offset.reset": GroupSetting(
        "latest",
        "share.auto.offset.reset",
        choices=("latest", "earliest"),
        parse=parse_offset_reset,
        refusal=(
            "Invalid value `{value}` for configuration {name}. The value must be either"
            " 'earliest', 'latest' or of the format 'by_duration:<PnDTnHnMn.nS>'."
        ),
    ),
    "share.isolation.level": GroupSetting(
        "read_uncommitted",
        "share.isolation.level",
        choices=("read_committed", "read_uncommitted"),
    ),
}  # fmt: skip
"""Kafka's group configs (`GroupConfig`) -> default, the broker config giving it, bounds."""
_SESSION_ABOVE_HEARTBEAT: Final = (
    ("consumer.session.timeout.ms", "consumer.heartbeat.interval.ms"),
    ("share.session.timeout.ms", "share.heartbeat.interval.ms"),
)
_INT_MAX: Final = (1 << 31) - 1


class GroupConfigs(NamedTuple):
    """A group's effective configs: its own where it sets them, else the defaults."""

    consumer_session_timeout_ms: int = 45_000
    consumer_heartbeat_interval_ms: int = 5_000
    share_session_timeout_ms: int = 45_000
    share_heartbeat_interval_ms: int = 5_000
    share_record_lock_duration_ms: int = 30_000
    share_auto_offset_reset: str = "latest"
    share_isolation_level: str = "read_uncommitted"


KAFKA_GROUP_DEFAULTS: Final = GroupConfigs()
"""Kafka's defaults of the group configs, where the broker's properties set none."""


NO_BOUNDS: Final[Mapping[str, int]] = MappingProxyType({})


def group_config_error(
    configs: Mapping[str, str | None], bounds: Mapping[str, int] = NO_BOUNDS
) -> str | None:
    """Why a group's dynamic configs (name -> value) are refused (INVALID_CONFIG), or None (a
    value None: only the name is checked). `bounds`: the broker's own values of the bounds'
    configs (`group.share.min.record.lock.duration.ms`...), where it sets them."""
    for name in configs:
        if name not in GROUP_CONFIGS:
            return f"Unknown group config name: {name}"
    values = {
        name: s.default if (given := configs.get(name)) is None else given
        for name, s in GROUP_CONFIGS.items()
    }
    numbers: dict[str, int] = {}
    for name, setting in GROUP_CONFIGS.items():
        text = values[name].strip()
        if setting.parse is not None:
            if setting.parse(text) is None:
                refusal = setting.refusal.format(value=text, name=name)
                return f"Invalid value {text} for configuration {name}: {refusal}"
            continue
        if setting.choices:
            if text not in setting.choices:
                return (
                    f"Invalid value {text} for configuration {name}: String must be one of:"
                    f" {', '.join(setting.choices)}"
                )
            continue
        try:
            number = int(text)
        except ValueError:
            return f"Invalid value {text} for configuration {name}: Not a number of type INT"
        if not 1 <= number <= _INT_MAX:
            return f"Invalid value {text} for configuration {name}: Value must be at least 1"
        numbers[name] = number
    for name, number in numbers.items():
        limits = GROUP_CONFIGS[name].bounds
        assert limits is not None
        low_name, low, high_name, high = limits
        low, high = bounds.get(low_name, low), bounds.get(high_name, high)
        if number < low:
            return f"{name} must be greater than or equal to {low_name}"
        if number > high:
            return f"{name} must be less than or equal to {high_name}"
    for session, heartbeat in _SESSION_ABOVE_HEARTBEAT:
        if numbers[session] <= numbers[heartbeat]:
            return f"{session} must be greater than {heartbeat}"
    return None


def effective_group_configs(
    configs: Mapping[str, str],
    defaults: GroupConfigs = KAFKA_GROUP_DEFAULTS,
    bounds: Mapping[str, int] = NO_BOUNDS,
) -> GroupConfigs:
    """A group's effective configs from its dynamic ones (as checked by `group_config_error`;
    anything else falls back to `defaults`: Kafka's, or the broker's `group.*` properties)."""
    if group_config_error(configs, bounds) is not None:
        configs = {}
    own = {
        name.replace(".", "_"): configs[name].strip() for name in GROUP_CONFIGS if name in configs
    }
    typed = {field: type(getattr(defaults, field))(text) for field, text in own.items()}
    return defaults._replace(**typed)


class ResourceConfigs(Protocol):
    """Where dynamic configs are read: the batch coordinator, or a broker in front of it."""

    async def describe_resource_configs(
        self, resource_type: ConfigResourceType, names: Sequence[str] | None = None
    ) -> dict[str, dict[str, str]]: ...


async def group_configs(coordinator: ResourceConfigs, group_id: str) -> GroupConfigs:
    """The effective configs of `group_id`, as stored now (one coordinator read): what the group
    coordinator applies to the group's members (its session timeout, its heartbeat interval).
    Raises what the coordinator raises (`CoordinatorError`)."""
    stored = await coordinator.describe_resource_configs(ConfigResourceType.GROUP, [group_id])
    return effective_group_configs(stored.get(group_id, {}))


class GroupConfigSnapshot(NamedTuple):
    version: int
    """The coordinator's `config_version` read before the configs (they are at least that new)."""
    configs: Mapping[str, Mapping[str, str]]
    """Group id -> its dynamic configs, of the groups that have some."""


class GroupConfigCopy(ForwardCopy[GroupConfigSnapshot]):
    """A process's copy of every group's dynamic configs, for a group coordinator that reads
    them on every member's heartbeat without a coordinator read: `configs` answers from the
    copy. `start` loads it (or leaves it to the refreshes while the coordinator does not
    answer: the defaults meanwhile), `refresh` after a change made here, `close`."""

    def __init__(
        self,
        coordinator: BatchCoordinator,
        refresh_ms: int = 1_000,
        clock: Clock | None = None,
        defaults: GroupConfigs = KAFKA_GROUP_DEFAULTS,
        bounds: Mapping[str, int] = NO_BOUNDS,
    ) -> None:
        super().__init__("group configs", coordinator, refresh_ms, clock)
        self._defaults = defaults
        self._bounds = bounds
        self._configs: Mapping[str, Mapping[str, str]] = MappingProxyType({})

    async def start(self) -> None:
        try:
            await self.refresh()
        except DisklessError as error:
            _log.debug("group configs: the first load failed: %r", error)
        self._refresher.start()

    def configs(self, group_id: str) -> GroupConfigs:
        """The effective configs of `group_id` as the copy has them."""
        return effective_group_configs(
            self._configs.get(group_id, {}), self._defaults, self._bounds
        )

    async def _coordinator_version(self) -> int:
        return await self._coordinator.config_version()

    async def _read(self) -> GroupConfigSnapshot:
        version = await self._coordinator.config_version()
        stored = await self._coordinator.describe_resource_configs(ConfigResourceType.GROUP)
        return GroupConfigSnapshot(version, stored)

    def _take(self, snapshot: GroupConfigSnapshot) -> None:
        self._configs = MappingProxyType(dict(snapshot.configs))
