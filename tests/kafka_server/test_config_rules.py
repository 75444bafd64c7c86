"""Unit: the rules AlterConfigs and IncrementalAlterConfigs decide with.

- A topic's own configs (`dynamic_topic_configs`), read back through the rule that parses them
  at creation (`parse_topic_config`), give the topic's config again: an incremental change that
  sets nothing changes nothing, whatever the topic was created with.
- The cleaner's topic configs are checked within Kafka's bounds.
- Group configs are checked as Kafka's `GroupConfig.validate` checks them: names, types, the
  broker's bounds and each session timeout above its heartbeat interval, with the defaults
  filling in; the effective configs are the group's own over the defaults, also as a
  process's copy of them has them once refreshed.
"""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from diskless.coordinator import ConfigResourceType, InMemoryBatchCoordinator
from diskless.kafka_server._coordination.group_configs import (
    GroupConfigCopy,
    GroupConfigs,
    effective_group_configs,
    group_config_error,
)
from diskless.kafka_server._handlers._topic_configs import (
    KAFKA_DEFAULTS,
    InvalidConfig,
    dynamic_topic_configs,
    parse_topic_config,
)

_VALUES = {
    "retention.ms": st.integers(-1, 10**12).map(str),
    "retention.bytes": st.integers(-1, 10**12).map(str),
    "max.message.bytes": st.integers(0, 10**8).map(str),
    "message.timestamp.type": st.sampled_from(["CreateTime", "LogAppendTime"]),
    "compression.type": st.sampled_from(["producer", "gzip", "lz4", "zstd", "snappy"]),
    "compression.gzip.level": st.integers(1, 9).map(str),
    "segment.bytes": st.integers(1, 10**9).map(str),
    "min.insync.replicas": st.integers(1, 3).map(str),
    "cleanup.policy": st.sampled_from(["delete", "compact", "compact,delete", "delete,compact"]),
    "min.cleanable.dirty.ratio": st.sampled_from(["0", "0.25", "1"]),
    "delete.retention.ms": st.integers(0, 10**12).map(str),
    "max.compaction.lag.ms": st.integers(10**9, 10**12).map(str),
    "min.compaction.lag.ms": st.integers(0, 10**9).map(str),
}


@given(st.fixed_dictionaries({}, optional=_VALUES))
def test_a_topics_own_configs_parse_back_to_its_config(configs: dict[str, str]) -> None:
    config = parse_topic_config(configs.items(), KAFKA_DEFAULTS)
    own = dynamic_topic_configs(config, KAFKA_DEFAULTS)
    assert parse_topic_config(own.items(), KAFKA_DEFAULTS) == config
    assert set(own) <= set(configs)


def test_the_cleaners_configs_are_checked_within_kafkas_bounds() -> None:
    """Kafka's `LogConfig`: the policies, a ratio in [0, 1], lags of at least 0 (the maximum
    at least 1) and the minimum lag not above the maximum."""
    config = parse_topic_config([("cleanup.policy", "delete, compact")], KAFKA_DEFAULTS)
    assert config.kept_config("cleanup.policy") == "compact,delete"
    assert config.compacted and config.deletes
    assert not parse_topic_config([], KAFKA_DEFAULTS).compacted
    compact = parse_topic_config([("cleanup.policy", "compact")], KAFKA_DEFAULTS)
    assert compact.compacted and not compact.deletes
    for name, value in [
        ("cleanup.policy", "shrink"),
        ("cleanup.policy", "compact,compact"),
        ("cleanup.policy", ""),
        ("min.cleanable.dirty.ratio", "1.01"),
        ("min.cleanable.dirty.ratio", "-0.1"),
        ("min.cleanable.dirty.ratio", "half"),
        ("min.compaction.lag.ms", "-1"),
        ("max.compaction.lag.ms", "0"),
        ("delete.retention.ms", "-1"),
        ("delete.retention.ms", str(1 << 63)),
    ]:
        with pytest.raises(InvalidConfig, match=f"invalid value .* for config '{name}'"):
            parse_topic_config([(name, value)], KAFKA_DEFAULTS)
    lags = [("min.compaction.lag.ms", "10"), ("max.compaction.lag.ms", "9")]
    conflict = r"min\.compaction\.lag\.ms .* > max\.compaction\.lag\.ms"
    with pytest.raises(InvalidConfig, match=conflict):
        parse_topic_config(lags, KAFKA_DEFAULTS)


def test_group_configs_are_checked_as_kafka_checks_them() -> None:
    assert group_config_error({}) is None
    assert group_config_error({"consumer.session.timeout.ms": "60000"}) is None
    assert group_config_error({"session.timeout.ms": "1"}) == (
        "Unknown group config name: session.timeout.ms"
    )
    assert group_config_error({"consumer.session.timeout.ms": "60001"}) == (
        "consumer.session.timeout.ms must be less than or equal to"
        " group.consumer.max.session.timeout.ms"
    )
    assert group_config_error({"consumer.heartbeat.interval.ms": "4999"}) == (
        "consumer.heartbeat.interval.ms must be greater than or equal to"
        " group.consumer.min.heartbeat.interval.ms"
    )
    assert group_config_error({"share.record.lock.duration.ms": "soon"}) == (
        "Invalid value soon for configuration share.record.lock.duration.ms:"
        " Not a number of type INT"
    )
    assert group_config_error({"share.auto.offset.reset": "none"}) is not None
    # Kafka 4's share.auto.offset.reset: latest, earliest or by_duration:<ISO-8601 duration>.
    for accepted in ("latest", "earliest", "by_duration:PT1H", "by_duration:P1DT2M3.5S"):
        assert group_config_error({"share.auto.offset.reset": accepted}) is None, accepted
    assert group_config_error({"share.auto.offset.reset": "EARLIEST"}) is not None
    assert group_config_error({"share.auto.offset.reset": "by_duration:-PT1H"}) == (
        "Invalid value by_duration:-PT1H for configuration share.auto.offset.reset: Invalid value"
        " `by_duration:-PT1H` for configuration share.auto.offset.reset. The value must be either"
        " 'earliest', 'latest' or of the format 'by_duration:<PnDTnHnMn.nS>'."
    )
    assert effective_group_configs(
        {"share.auto.offset.reset": "by_duration:PT10M"}
    ).share_auto_offset_reset == ("by_duration:PT10M")
    # (With Kafka's bounds, every session timeout within them is above every heartbeat
    # interval within theirs.)
    assert (
        group_config_error(
            {"share.session.timeout.ms": "45000", "share.heartbeat.interval.ms": "15000"}
        )
        is None
    )
    assert effective_group_configs({}) == GroupConfigs()
    assert effective_group_configs(
        {"consumer.heartbeat.interval.ms": "6000", "share.isolation.level": "read_committed"}
    ) == GroupConfigs(consumer_heartbeat_interval_ms=6000, share_isolation_level="read_committed")


async def test_a_processs_copy_of_group_configs_follows_the_coordinator() -> None:
    coordinator = InMemoryBatchCoordinator()
    copy = GroupConfigCopy(coordinator, refresh_ms=60_000)
    await copy.start()
    try:
        assert copy.configs("orders") == GroupConfigs()
        await coordinator.alter_resource_configs(
            ConfigResourceType.GROUP, "orders", {"consumer.session.timeout.ms": "50000"}
        )
        assert copy.configs("orders") == GroupConfigs()  # until refreshed
        await copy.refresh()
        assert copy.configs("orders") == GroupConfigs(consumer_session_timeout_ms=50_000)
        assert copy.configs("other") == GroupConfigs()
        assert copy.version == await coordinator.config_version() == 1
    finally:
        await copy.close()
        await coordinator.close()
