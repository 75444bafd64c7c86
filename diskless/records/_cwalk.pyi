"""The record walk of a v2 records section (C extension; `_cwalk.c` holds the rules)."""

def walk(
    buffer: bytes | bytearray | memoryview,
    start: int,
    end: int,
    count: int,
    base_timestamp: int,
    max_timestamp: int,
    create_time: bool,
    now_ms: int,
    before_max_ms: int,
    after_max_ms: int,
    /,
) -> tuple[int, str] | int | None:
    """None when `count` records fill buffer[start:end] exactly and pass every check, and (for
    CreateTime) `max_timestamp` is right; the maxTimestamp the batch must carry instead when only
    that differs; otherwise (Kafka error code, message)."""
