"""Kafka broker properties that mean nothing to a diskless broker: accepted, and named in one
log line at start, so that a KRaft `server.properties` starts unchanged.

Only properties whose whole meaning is a part diskless does not have are here (the KRaft quorum,
local log directories, the broker's thread pools, replication of internal topics; brokers never
talk to each other). Anything whose meaning a diskless broker should honour (retention,
partition counts, socket buffers, ...) is not: until it is implemented, it stays an unknown
property that stops the start, rather than a setting silently not applied.

`controller.listener.names` is honoured in the one way that applies: the listeners it names are
the KRaft controller's, which a diskless broker does not run, so they are taken out of
`listeners` and `advertised.listeners` rather than served as client listeners.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Final

INAPPLICABLE: Final[dict[str, str]] = {
    "process.roles": "KRaft roles: a diskless process runs brokers only",
    "controller.quorum.voters": "the KRaft quorum: metadata lives in the batch coordinator",
    "controller.quorum.bootstrap.servers": "the KRaft quorum, as above",
    "controller.listener.names": "the KRaft controller's listeners: left out of listeners",
    "metadata.log.dir": "the KRaft metadata log: none",
    "inter.broker.listener.name": "brokers never connect to each other",
    "security.inter.broker.protocol": "brokers never connect to each other",
    "log.dirs": "local log directories: records live in the object store",
    "log.dir": "local log directories: records live in the object store",
    "num.recovery.threads.per.data.dir": "no local log to recover",
    "num.network.threads": "one asyncio event loop per process, no thread pools",
    "num.io.threads": "one asyncio event loop per process, no thread pools",
    "offsets.topic.replication.factor": "no internal topics: offsets live in the coordinator",
    "transaction.state.log.replication.factor": "no internal topics: the coordinator keeps it",
    "transaction.state.log.min.isr": "no internal topics: the coordinator keeps it",
    "share.coordinator.state.topic.replication.factor": "no internal topics",
    "share.coordinator.state.topic.min.isr": "no internal topics",
}
"""Property -> why it does not apply."""
CONTROLLER_LISTENERS: Final = "controller.listener.names"
LISTENER_LISTS: Final = ("listeners", "advertised.listeners")


def ignored(properties: Mapping[str, str]) -> list[str]:
    """The names in `properties` that are accepted and not applied, in the order given."""
    return [name for name in properties if name in INAPPLICABLE]


def applicable(properties: Mapping[str, str]) -> dict[str, str]:
    """`properties` without the inapplicable ones, and without the controller's listeners."""
    kept = {name: value for name, value in properties.items() if name not in INAPPLICABLE}
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
