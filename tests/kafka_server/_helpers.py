"""What several Kafka server test modules share: admin answers read, ACLs granted, and produced
batches read back over the wire."""

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
