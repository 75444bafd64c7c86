"""What the handler tests share: a `BrokerContext` of real parts, as `BrokerServer` provides one,
and requests built from their schemas that reach their library call."""

from __future__ import annotations

import dataclasses
import datetime
from typing import Any, Final

from kio.schema.errors import ErrorCode as WireError
from kio.serial._introspect import EntityField, EntityTupleField, classify_field

from diskless import DisklessBroker
from diskless.coordinator import BatchCoordinator
from diskless.kafka_server import (
    ClusterView,
    ServerConfig,
    TransactionFront,
)
from diskless.kafka_server._coordination.acl_cache import AclCache
from diskless.kafka_server._coordination.cluster_view import BrokerAddress
from diskless.kafka_server._coordination.credentials import Credentials
from diskless.kafka_server._coordination.group_configs import KAFKA_GROUP_DEFAULTS
from diskless.kafka_server._coordination.group_coordinator import GroupCoordinator
from diskless.kafka_server._coordination.share_front import ShareFront
from diskless.storage import MemoryObjectStore
from testkit.wal import build_batch


@dataclasses.dataclass
class Context:
    """A `BrokerContext` of real parts, as `BrokerServer` provides one."""

    broker: DisklessBroker
    cluster: ClusterView
    transactions: TransactionFront
    groups: GroupCoordinator
    config: ServerConfig
    credentials: Credentials
    acls: AclCache | None = None
    share_front: ShareFront | None = None

    @property
    def shares(self) -> ShareFront:
        assert self.share_front is not None, "a context made by context_of fronts share groups"
        return self.share_front

    @property
    def broker_id(self) -> int:
        return self.broker.broker_id

    @property
    def rack(self) -> str | None:
        return self.broker.rack

    @property
    def address(self) -> BrokerAddress:
        return BrokerAddress(self.broker_id, "127.0.0.1", 9092, self.rack)


TOPIC: Final = "t"


async def started_broker(coordinator: BatchCoordinator, partitions: int) -> DisklessBroker:
    """Broker 0 on `coordinator` (objects in memory), started, with `TOPIC` of `partitions`."""
    broker = DisklessBroker(0, MemoryObjectStore(), coordinator)
    await broker.start()
    await broker.create_topic(TOPIC, partitions)
    return broker


def context_of(
    broker: DisklessBroker,
    coordinator: BatchCoordinator,
    config: ServerConfig | None = None,
    acls: AclCache | None = None,
) -> Context:
    """`broker`'s context in a cluster of it alone, on `coordinator`."""
    view = ClusterView("test")
    view.join(BrokerAddress(0, "127.0.0.1", 9092, None))
    return Context(
        broker,
        view,
        TransactionFront(coordinator),
        GroupCoordinator(coordinator, view),
        ServerConfig() if config is None else config,
        Credentials(coordinator),
        acls,
        ShareFront(coordinator, lambda _: KAFKA_GROUP_DEFAULTS),
    )


_VALUES: Final[dict[str, object]] = {
    "acks": -1,  # acks=0 has no response
    "isolation_level": 0,
    "key_type": 0,  # a group
    "resource_type": 2,  # a topic
    "partition_index": 0,
    "partition": 0,
    "index": 0,
    "max_wait": datetime.timedelta(0),
    "transaction_timeout": datetime.timedelta(seconds=60),
    "configs": (),  # a topic config named `t` is refused before the call
    "election_type": 0,  # preferred
}
"""Field values (by kio's names) that make a request reach its library call; the others get a
value of their type."""


def _value(field: dataclasses.Field[Any]) -> object:
    if field.name in _VALUES:
        return _VALUES[field.name]
    kind = classify_field(field)
    if isinstance(kind, (EntityField, EntityTupleField)):
        item = request_of(kind.type_)
        return (item,) if kind.is_array else item
    kafka_type = field.metadata["kafka_type"]
    value: object = {
        "string": TOPIC,
        "bytes": b"",
        "records": build_batch([b"v"]),
        "bool": False,
        "uuid": None,
        "error_code": WireError.none,
        "timedelta_i32": datetime.timedelta(seconds=1),
        "timedelta_i64": datetime.timedelta(seconds=1),
    }.get(kafka_type, -1)
    return (value,) if kind.is_array else value


def request_of(schema: type[Any]) -> Any:
    """An entity of `schema` with one entry in every array: topic `t`, partition 0, group `t`."""
    return schema(**{f.name: _value(f) for f in dataclasses.fields(schema)})


def error_codes(entity: object) -> set[WireError]:
    """Every error code in a response except NONE (a response of only NONE answered nothing)."""
    found: set[WireError] = set()
    for field in dataclasses.fields(entity):  # type: ignore[arg-type]
        value = getattr(entity, field.name)
        items = value if isinstance(value, tuple) else (value,)
        for item in items:
            if field.name.endswith("error_code") and item is not WireError.none:
                found.add(item)
            elif dataclasses.is_dataclass(item):
                found |= error_codes(item)
    return found
