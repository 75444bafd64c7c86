"""diskless: Kafka's leaderless produce path for diskless topics, as an asyncio library."""

from diskless._types import (
    ControlType,
    ErrorCode,
    IsolationLevel,
    OffsetSpec,
    TimestampType,
    TopicPartition,
)
from diskless.clock import Clock, ManualClock, SystemClock

__all__ = [
    # Kafka vocabulary
    "ControlType",
    "ErrorCode",
    "IsolationLevel",
    "OffsetSpec",
    "TimestampType",
    "TopicPartition",
    # time
    "Clock",
    "ManualClock",
    "SystemClock",
]
