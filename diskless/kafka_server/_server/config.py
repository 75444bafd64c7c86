"""The wire server's settings: Kafka's names and defaults, and what each one protects against."""

from __future__ import annotations

from typing import Final

import msgspec

from diskless.kafka_server._handlers.context import MAX_PARTITIONS_PER_REQUEST
from diskless.kafka_server._protocol.codec import FRAME_BYTES_MAX

QUEUED_REQUEST_BYTES_MAX: Final = 100 * 1024 * 1024
CONNECTIONS_IDLE_MS_MAX: Final = 600_000
FRAME_RECEIVE_MS_MAX: Final = 30_000
INLINE_FRAME_BYTES_MAX: Final = 64 * 1024


class ServerConfig(msgspec.Struct, frozen=True, kw_only=True):
    frame_bytes_max: int = FRAME_BYTES_MAX
    """Kafka's `socket.request.max.bytes` (100 MiB): a larger size prefix closes the connection."""
    queued_request_bytes_max: int = QUEUED_REQUEST_BYTES_MAX
    """Kafka's `queued.max.request.bytes`: frame bytes read and not yet answered, over all
    connections (of the whole `KafkaCluster`, which shares one budget). A frame's size is reserved
    when its size prefix is read, before its body, and reading pauses while it does not fit, so
    the bound holds however many clients send at once. Kafka's default is -1 (unbounded); 100 MiB
    here is its `socket.request.max.bytes` default: one largest frame always fits, and a broker
    process is not taken down by a few clients each sending most of one. Kafka's rule that it is
    at least `socket.request.max.bytes` is kept, so every admissible frame fits alone and none
    waits forever."""
    connections_idle_ms_max: int = CONNECTIONS_IDLE_MS_MAX
    """Kafka's `connections.max.idle.ms` (10 min): a connection with nothing sent to it, nothing
    unanswered and no request arriving for this long is closed (quietly, as Kafka does)."""
    frame_receive_ms_max: int = FRAME_RECEIVE_MS_MAX
    """Once its size prefix has been read (and its bytes reserved), a frame's body must arrive
    within this, or the connection is closed: one byte a second would otherwise hold a connection
    and its reservation forever. Kafka has no such setting; 30 s is the clients'
    `request.timeout.ms` default, after which a real client has given up on the request anyway."""
    inline_frame_bytes_max: int = INLINE_FRAME_BYTES_MAX
    """Larger requests are decoded, and their responses encoded, in a worker thread, so that one
    huge request (100,000 topics) does not hold the event loop all brokers share; below this the
    hand-off would cost more than the work (64 KiB decode or encode in a few ms)."""
    requests_inflight_max: int = 16
    """Requests of one connection decoded but not yet answered."""
    fetch_wait_ms_max: int = 5_000
    """Caps a Fetch's max_wait: how long an empty fetch may be held before answering."""
    auto_create_topic_partitions: int = 0
    """Metadata for an unknown topic creates it with this many partitions when the client allows
    it (Kafka's auto.create.topics.enable with num.partitions); 0 never creates."""
    broker_session_timeout_ms: int = 9_000
    """Kafka's `broker.session.timeout.ms`: a broker whose process stops renewing its
    registration (every third of this) leaves the cluster after this long, and with it what it
    held (transaction leases, consumer groups). A process starting a broker whose id another
    incarnation holds waits this long for that registration to expire, then gives up."""
    close_warning_interval_ms: int = 10_000
    close_warnings_max: int = 10
    """At most this many warnings per `close_warning_interval_ms` about connections closed for a
    client's fault; the others are counted and reported once at the end of the interval."""

    def __post_init__(self) -> None:
        if not 0 < self.frame_bytes_max <= 2**31 - 1:
            raise ValueError("frame_bytes_max must be in (0, 2**31)")
        if self.queued_request_bytes_max < self.frame_bytes_max:
            raise ValueError(
                f"queued_request_bytes_max (queued.max.request.bytes, "
                f"{self.queued_request_bytes_max}) must be >= frame_bytes_max "
                f"(socket.request.max.bytes, {self.frame_bytes_max})"
            )
        if self.connections_idle_ms_max < 1 or self.frame_receive_ms_max < 1:
            raise ValueError("connections_idle_ms_max and frame_receive_ms_max must be >= 1")
        if self.inline_frame_bytes_max < 0:
            raise ValueError("inline_frame_bytes_max must be >= 0")
        if self.requests_inflight_max < 1:
            raise ValueError("requests_inflight_max must be >= 1")
        if self.fetch_wait_ms_max < 0:
            raise ValueError("fetch_wait_ms_max must be >= 0")
        if not 0 <= self.auto_create_topic_partitions <= MAX_PARTITIONS_PER_REQUEST:
            raise ValueError(
                f"auto_create_topic_partitions must be in 0..{MAX_PARTITIONS_PER_REQUEST}: a"
                " request may add no more partitions"
            )
        if self.broker_session_timeout_ms < 1:
            raise ValueError("broker_session_timeout_ms must be >= 1")
        if self.close_warning_interval_ms < 1 or self.close_warnings_max < 1:
            raise ValueError("close_warning_interval_ms and close_warnings_max must be >= 1")
