"""Kafka broker properties that a diskless broker does not apply: those accepted (named in one
log line at start, so that Kafka's KRaft `server.properties` starts unchanged) and those refused.

The rule: a property whose whole meaning is a part diskless does not have is accepted and not
applied (`INAPPLICABLE`, `INAPPLICABLE_PREFIXES`): the KRaft quorum, replication (every replica
is the object store), the local log's segments, flushes and cleaner, the broker's thread pools,
the replication of internal topics (brokers never talk to each other). A property with a
diskless meaning is applied (`server_properties.PROPERTIES`, and `cli_properties` for the ones
the command applies), never listed here. A Kafka property whose meaning a diskless broker cannot
give, where running without it would not be what the operator asked for (Kerberos, ZooKeeper,
tiered storage, ...), is refused with the reason (`UNSUPPORTED`); any other name is unknown.

`controller.listener.names` is honoured in the one way that applies: the listeners it names are
the KRaft controller's, which a diskless broker does not run, so they are taken out of
`listeners` and `advertised.listeners` rather than served as client listeners.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Final

INAPPLICABLE: Final[dict[str, str]] = {
    "process.roles": "KRaft roles: a diskless process runs brokers only",
    "controller.listener.names": "the KRaft controller's listeners: left out of listeners",
    "inter.broker.listener.name": "brokers never connect to each other",
    "security.inter.broker.protocol": "brokers never connect to each other",
    "num.recovery.threads.per.data.dir": "no local log to recover",
    "num.network.threads": "one asyncio event loop per process, no thread pools",
    "num.io.threads": "one asyncio event loop per process, no thread pools",
    "background.threads": "one asyncio event loop per process, no thread pools",
    "default.replication.factor": "no replicas: the object store keeps every record",
    "min.insync.replicas": "no replicas: a write is acknowledged once in the object store",
    "num.replica.fetchers": "no replicas to fetch",
    "unclean.leader.election.enable": "no replicas: any broker serves any partition",
    "auto.leader.rebalance.enable": "no leaders to rebalance: any broker serves any partition",
    "delete.topic.enable": "topics can always be deleted, as in Kafka 4",
    "log.segment.bytes": "no local log segments: records live in the object store",
    "log.segment.delete.delay.ms": "no local log segments",
    "log.preallocate": "no local log segments",
    "log.message.format.version": "one record format (v2)",
    "group.initial.rebalance.delay.ms": "a group's first join is not delayed",
}
"""Property -> why it does not apply."""
INAPPLICABLE_PREFIXES: Final[dict[str, str]] = {
    "controller.quorum.": "the KRaft quorum: metadata lives in the batch coordinator",
    "metadata.log.": "the KRaft metadata log: none",
    "log.roll.": "no local log segments",
    "log.flush.": "no local log to flush: the object store keeps every record",
    "log.cleaner.": "the cleaner runs in the lifecycle services, with their settings",
    "log.index.": "no local log index",
    "replica.": "no replicas",
    "leader.imbalance.": "no leaders to rebalance",
    "offsets.topic.": "no internal topics: offsets live in the coordinator",
    "transaction.state.log.": "no internal topics: the coordinator keeps transactions",
    "share.coordinator.state.topic.": "no internal topics",
}
"""Every property starting so -> why it does not apply."""
UNSUPPORTED: Final[dict[str, str]] = {
    "zookeeper.": "ZooKeeper mode (gone in Kafka 4): the batch coordinator keeps the metadata",
    "sasl.kerberos.": "GSSAPI (Kerberos) is not offered; use SCRAM-SHA-256/512 or PLAIN",
    "sasl.oauthbearer.": "OAUTHBEARER is not offered; use SCRAM-SHA-256/512 or PLAIN",
    "sasl.login.": "only SCRAM and PLAIN are offered, which need no login module settings",
    "sasl.server.callback.handler.class": "no Java callback handlers",
    "principal.builder.class": "no Java principal builders; see ssl.principal.mapping.rules",
    "remote.log.": "tiered storage: every record is in the object store already",
    "log.cleanup.policy": "no broker-wide default: a topic is compacted by its own cleanup.policy",
    "delegation.token.": "delegation tokens are not supported",
    "client.quota.callback.class": "client quotas are not supported",
    "quota.": "client quotas are not supported",
    "create.topic.policy.class.name": "no Java policy classes",
    "alter.config.policy.class.name": "no Java policy classes",
    "metric.reporters": "no Java metric reporters; see metrics.address",
}
"""Kafka property (or, ending with a dot, every property starting so) -> why it is refused."""
CONTROLLER_LISTENERS: Final = "controller.listener.names"
LISTENER_LISTS: Final = ("listeners", "advertised.listeners")


def _reason(name: str, table: Mapping[str, str]) -> str | None:
    if name in table:
        return table[name]
    return next(
        (why for key, why in table.items() if key.endswith(".") and name.startswith(key)), None
    )


def is_inapplicable(name: str) -> bool:
    return name in INAPPLICABLE or any(name.startswith(p) for p in INAPPLICABLE_PREFIXES)


def refusal_of(name: str) -> str:
    """Why `name`, neither applied nor accepted, is refused (without the name)."""
    why = _reason(name, UNSUPPORTED)
    if why is not None:
        return f"a Kafka broker property that a diskless broker does not support: {why}"
    return "unknown property"


def ignored(properties: Iterable[str]) -> list[str]:
    """The names of `properties` that are accepted and not applied, in the order given."""
    return [name for name in properties if is_inapplicable(name)]


def applicable(properties: Mapping[str, str]) -> dict[str, str]:
    """`properties` without the inapplicable ones, and without the controller's listeners."""
    kept = {name: value for name, value in properties.items() if not is_inapplicable(name)}
    controllers = {
        name.strip().upper()
        for name in properties.get(CONTROLLER_LISTENERS, "").split(",")
        if name.strip()
    }
    if controllers:
        for prop in LISTENER_LISTS:
            if prop in kept:
                kept[prop] = ",".join(
                    entry
                    for entry in kept[prop].split(",")
                    if entry.strip().partition("://")[0].strip().upper() not in controllers
                )
    return kept
