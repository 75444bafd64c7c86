"""What several Kafka server test modules share: admin answers read, ACLs granted, a process's
group coordinator, and produced batches read back over the wire."""

from __future__ import annotations

import warnings
from typing import Any

from confluent_kafka import KafkaException
from confluent_kafka.admin import (
    AclBinding,
    AclOperation,
    AclPermissionType,
    ResourcePatternType,
    ResourceType,
)
from kio.schema.errors import ErrorCode as WireError

from diskless import Clock
from diskless._types import GroupOwnership
from diskless.coordinator import BatchCoordinator
from diskless.kafka_server._coordination.cluster_view import BrokerAddress, ClusterView
from diskless.kafka_server._coordination.consumer_steps import ConsumerConfigOf
from diskless.kafka_server._coordination.group_coordinator import (
    GroupCoordinator,
    default_group_configs,
)
from testkit.wire import WireClient, fetch_request

with warnings.catch_warnings():
    warnings.simplefilter("ignore", DeprecationWarning)
    from kafka.record import MemoryRecords

TIMEOUT_S = 30


def error_code_of(future: object) -> int:
    """The Kafka error code a confluent admin future failed with (0 if it succeeded)."""
    try:
        future.result(TIMEOUT_S)  # type: ignore[attr-defined]
    except KafkaException as e:
        return int(e.args[0].code())
    return 0


def allow_alice(resource_type: ResourceType, name: str, operation: AclOperation) -> AclBinding:
    """An ACL that allows User:alice `operation` on the resource literally named `name`."""
    return AclBinding(
        resource_type,
        name,
        ResourcePatternType.LITERAL,
        "User:alice",
        "*",
        operation,
        AclPermissionType.ALLOW,
    )


async def group_process(
    coordinator: BatchCoordinator,
    broker_id: int = 0,
    *,
    clock: Clock | None = None,
    group_configs: ConsumerConfigOf = default_group_configs,
) -> tuple[GroupCoordinator, GroupOwnership, ClusterView]:
    """A process of broker `broker_id` over `coordinator`, registered and live in its cluster
    view: its started group coordinator, its incarnation, and the view."""
    epoch = await coordinator.register_broker(broker_id)
    view = ClusterView("test", coordinator)
    view.join(BrokerAddress(broker_id, "127.0.0.1", 9092 + broker_id, None), epoch)
    await view.renew()
    groups = GroupCoordinator(coordinator, view, clock=clock, group_configs=group_configs)
    await groups.start()
    return groups, GroupOwnership(broker_id, epoch, -1), view


async def fetch_partitions(
    client: WireClient, topic: str, partitions: int
) -> dict[int, tuple[int, bytes]]:
    """(high watermark, records) per partition, from offset 0."""
    response = await client.request(fetch_request(topic, partitions))
    [answer] = response.responses
    out = {}
    for p in answer.partitions:
        assert p.error_code == WireError.none, p
        out[p.partition_index] = (p.high_watermark, bytes(p.records or b""))
    return out


def batches_of(records: bytes) -> list[Any]:
    """kafka-python's batches of a fetched partition's records, each CRC checked."""
    memory, batches = MemoryRecords(records), []
    while (batch := memory.next_batch()) is not None:
        assert batch.validate_crc(), "kafka-python rejects the CRC"
        batches.append(batch)
    return batches
