"""The wire server's settings: Kafka's names and defaults, and what each one protects against."""

from __future__ import annotations

from typing import Final

import msgspec

from diskless.coordinator import TopicConfig
from diskless.kafka_server._coordination.group_configs import KAFKA_GROUP_DEFAULTS, GroupConfigs
from diskless.kafka_server._handlers.context import (
    MAX_PARTITIONS_PER_REQUEST,
    RETENTION_MS_DEFAULT,
    TopicDefaults,
)
from diskless.kafka_server._protocol.codec import FRAME_BYTES_MAX
from diskless.kafka_server._server.auth._jaas import plain_users
from diskless.kafka_server._server.auth.tls import DEFAULT_PROTOCOLS, Hidden, TlsSettings
from diskless.kafka_server._server.settings.listeners import DEFAULT_PROTOCOL_MAP, listener_plan
from diskless.txn import TRANSACTION_TIMEOUT_MS_MAX

SASL_MECHANISMS: Final = ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512")
SCRAM_MECHANISMS: Final = ("SCRAM-SHA-256", "SCRAM-SHA-512")
QUEUED_REQUEST_BYTES_MAX: Final = 100 * 1024 * 1024
CONNECTIONS_IDLE_MS_MAX: Final = 600_000
FRAME_RECEIVE_MS_MAX: Final = 30_000
INLINE_FRAME_BYTES_MAX: Final = 64 * 1024
AUTHORIZER_CLASS_NAMES: Final = (
    "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
    "kafka.security.authorizer.AclAuthorizer",
)
"""The `authorizer.class.name` values that enable the authorizer: Kafka's own two, whose
semantics it reproduces (`_coordination.authorizer`), with ACLs kept in the batch coordinator."""


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
    auto_create_topics_enable: bool = False
    """Kafka's `auto.create.topics.enable`: Metadata for an unknown topic creates it (with
    `num_partitions` partitions) when the client allows it. Kafka's default is true, which the
    command (`python -m diskless.kafka_server`) keeps; a `KafkaCluster` embedded in a program
    creates topics only when asked, unless this says otherwise."""
    num_partitions: int = 1
    """Kafka's `num.partitions`: the partitions of a topic created on first use, or by
    CreateTopics asking for the broker's default (-1)."""
    log_retention_ms: int | None = None
    log_retention_minutes: int | None = None
    log_retention_hours: int | None = None
    """Kafka's `log.retention.{ms,minutes,hours}`: the `retention.ms` of a topic created without
    its own, the first one given in that order (a negative value: no time limit); none given,
    Kafka's 168 hours (`topic_defaults`)."""
    log_retention_bytes: int | None = None
    """Kafka's `log.retention.bytes`: the `retention.bytes` of a topic created without its own;
    not given, Kafka's -1 (no size limit)."""
    message_max_bytes: int | None = None
    """Kafka's `message.max.bytes`: the `max.message.bytes` of a topic created without its own;
    not given, Kafka's 1048588."""
    socket_send_buffer_bytes: int = -1
    socket_receive_buffer_bytes: int = -1
    """Kafka's `socket.send.buffer.bytes` / `socket.receive.buffer.bytes`: SO_SNDBUF / SO_RCVBUF
    of the listeners' sockets (those they accept inherit them); -1, the operating system's
    default (which Linux tunes to the connection). Kafka's defaults are 102400, as its sample
    `server.properties` sets them; unset here, a fixed buffer would cap a fast link's throughput
    for nothing."""
    broker_session_timeout_ms: int = 9_000
    """Kafka's `broker.session.timeout.ms`: a broker whose process stops renewing its
    registration (every third of this) leaves the cluster after this long, and with it what it
    held (transaction leases, consumer groups). A process starting a broker whose id another
    incarnation holds waits this long for that registration to expire, then gives up."""
    group_consumer_session_timeout_ms: int = 45_000
    """Kafka's `group.consumer.session.timeout.ms`: a consumer-protocol member (KIP-848) not
    heard from for this long is removed from its group, unless its group sets its own
    `consumer.session.timeout.ms`."""
    group_consumer_heartbeat_interval_ms: int = 5_000
    """Kafka's `group.consumer.heartbeat.interval.ms`: how often a consumer-protocol member is
    told to heartbeat (it learns of a rebalance from its next one), unless its group sets its
    own `consumer.heartbeat.interval.ms`."""
    group_share_session_timeout_ms: int = 45_000
    """Kafka's `group.share.session.timeout.ms`: a share group member not heard from for this
    long is removed from its group, unless its group sets its own `share.session.timeout.ms`."""
    group_share_heartbeat_interval_ms: int = 5_000
    """Kafka's `group.share.heartbeat.interval.ms`: how often a share group member is told to
    heartbeat, unless its group sets its own `share.heartbeat.interval.ms`."""
    group_share_max_size: int = 200
    """Kafka's `group.share.max.size`: a share group's members beyond it are refused
    (GROUP_MAX_SIZE_REACHED)."""
    group_share_record_lock_duration_ms: int = 30_000
    """Kafka's `group.share.record.lock.duration.ms`: how long a share consumer holds the records
    it acquired, unless its group sets its own `share.record.lock.duration.ms`."""
    group_share_min_record_lock_duration_ms: int = 15_000
    """Kafka's `group.share.min.record.lock.duration.ms`: the least `share.record.lock.duration.ms`
    a group may set."""
    group_share_delivery_count_limit: int = 5
    """Kafka's `group.share.delivery.count.limit`: a record delivered this often and released
    again is archived, never delivered more."""
    group_share_partition_max_record_locks: int = 2_000
    """Kafka's `group.share.partition.max.record.locks`: the most records of a share-partition
    in flight (acquired, or released and waiting between acquired ones)."""
    group_share_max_share_sessions: int = 2_000
    """Kafka's `group.share.max.share.sessions`: the share sessions one process holds; a new one
    beyond is refused (SHARE_SESSION_LIMIT_REACHED)."""
    transaction_max_timeout_ms: int = TRANSACTION_TIMEOUT_MS_MAX
    """Kafka's `transaction.max.timeout.ms` (15 min): InitProducerId asking for a longer
    `transaction.timeout.ms` is refused with INVALID_TRANSACTION_TIMEOUT, so that a producer
    that dies mid-transaction cannot keep the consumers of its partitions waiting longer."""
    close_warning_interval_ms: int = 10_000
    close_warnings_max: int = 10
    """At most this many warnings per `close_warning_interval_ms` about connections closed for a
    client's fault; the others are counted and reported once at the end of the interval."""
    listeners: str = ""
    """Kafka's `listeners` (`NAME://HOST:PORT,...`); empty: one PLAINTEXT listener on 127.0.0.1
    at the port the cluster gives each broker. Broker k of a process listens on PORT + k
    (`_server.settings.listeners`)."""
    advertised_listeners: str = ""
    """Kafka's `advertised.listeners`; empty: `listeners`."""
    listener_security_protocol_map: str = DEFAULT_PROTOCOL_MAP
    """Kafka's `listener.security.protocol.map`."""
    broker_rack: str = ""
    """Kafka's `broker.rack`: the rack of every broker of this process; empty: broker i is in
    rack `rack-(i mod racks)`."""
    ssl_keystore_type: str = "PEM"
    """Kafka's `ssl.keystore.type`; PEM only (`_server.auth.tls` describes every `ssl_` field)."""
    ssl_keystore_location: str = ""
    """Kafka's `ssl.keystore.location`: a PEM file with the private key and certificate chain."""
    ssl_keystore_certificate_chain: str = ""
    """Kafka's `ssl.keystore.certificate.chain`: the certificate chain, inline PEM."""
    ssl_keystore_key: str = ""
    """Kafka's `ssl.keystore.key`: the private key, inline PEM (never shown)."""
    ssl_key_password: str = ""
    """Kafka's `ssl.key.password`: the private key's password (never shown)."""
    ssl_truststore_type: str = "PEM"
    """Kafka's `ssl.truststore.type`; PEM only."""
    ssl_truststore_location: str = ""
    """Kafka's `ssl.truststore.location`: PEM CA certificates client certificates must chain to."""
    ssl_truststore_certificates: str = ""
    """Kafka's `ssl.truststore.certificates`: the same, inline PEM."""
    ssl_client_auth: str = "none"
    """Kafka's `ssl.client.auth`: none, requested or required."""
    ssl_principal_mapping_rules: str = "DEFAULT"
    """Kafka's `ssl.principal.mapping.rules`: how a client certificate's subject becomes the
    principal's name (DEFAULT: the whole DN, `User:<DN>`; or Kafka's RULE:.../.../ rules)."""
    ssl_enabled_protocols: str = DEFAULT_PROTOCOLS
    """Kafka's `ssl.enabled.protocols`: TLSv1.2 and/or TLSv1.3, never older."""
    ssl_handshake_timeout_ms: int = 10_000
    """A TLS handshake not done within this closes the connection (Kafka bounds it by its
    request timeout; a client that never finishes must not hold a connection)."""
    listener_settings: dict[str, dict[str, str]] = msgspec.field(default_factory=dict)
    """Kafka's `listener.name.<name>.<property>` values: listener name (upper case) ->
    property -> value, over the broker-wide value for that listener."""

    sasl_enabled_mechanisms: str = ",".join(SCRAM_MECHANISMS)
    """Kafka's `sasl.enabled.mechanisms` (also per listener, `listener.name.<name>.` prefixed):
    what SASL listeners offer, comma-separated, of PLAIN, SCRAM-SHA-256 and SCRAM-SHA-512.
    Kafka's default, GSSAPI (Kerberos), is not offered here; the SCRAM ones are the default
    instead, since their credentials live in the cluster (PLAIN's in a JAAS line)."""
    plain_sasl_jaas_config: str = ""
    """Kafka's `listener.name.<name>.plain.sasl.jaas.config`: a PlainLoginModule line whose
    `user_<name>="<password>"` options are the users PLAIN accepts on that listener
    (`_server.auth._jaas`). Without the prefix, the line of every listener that has none of its own
    (where Kafka would read its static JAAS file's KafkaServer section)."""
    connection_failed_authentication_delay_ms: int = 100
    """Kafka's `connection.failed.authentication.delay.ms`: a failed authentication is answered
    (SASL_AUTHENTICATION_FAILED) and its connection closed only after this long, which slows a
    client guessing passwords down."""
    sasl_handshake_ms_max: int = 10_000
    """A connection on a SASL listener must have authenticated within this long after it was
    accepted, or it is closed: an unauthenticated client may not hold a connection open. Kafka
    has no such setting (its idle timeout applies)."""
    sasl_server_max_receive_size: int = 524_288
    """Kafka's `sasl.server.max.receive.size`: a larger frame before authentication closes the
    connection (an unauthenticated client cannot make the broker read 100 MiB)."""

    metrics_address: str = ""
    """`metrics.address` (HOST:PORT): where the process serves Prometheus metrics (`/metrics`)
    and its health (`/healthz`, `/readyz`); empty: no endpoint. Port 0 picks a free one."""
    metrics_topics_max: int = 1000
    """`metrics.topics.max`: topics with series of their own in the per-topic metrics; the
    topics seen after these are counted together under `topic="__other__"`."""
    metrics_lag_groups_max: int = 1000
    """`metrics.lag.groups.max`: consumer groups whose lag a scrape computes (the others are
    counted in `diskless_consumer_lag_groups_omitted`)."""
    metrics_lag_partitions_max: int = 10_000
    """`metrics.lag.partitions.max`: lag series per scrape; past it, each group's remaining lag
    is summed into one series with `topic` and `partition` "__other__"."""

    authorizer_class_name: str = ""
    """Kafka's `authorizer.class.name`: empty, no authorization (everything is allowed and the
    ACL APIs answer SECURITY_DISABLED); one of `AUTHORIZER_CLASS_NAMES`, ACLs are enforced on
    every API. Any other value fails at start."""
    super_users: str = ""
    """Kafka's `super.users`: principals allowed everything, separated by semicolons
    (`User:admin;User:CN=ops`)."""
    allow_everyone_if_no_acl_found: bool = False
    """Kafka's `allow.everyone.if.no.acl.found`: a resource with no ACL at all allows anyone."""
    acl_refresh_ms: int = 1_000
    """How often each broker process checks the coordinator's ACL version (one small read) and
    reloads the ACLs when it changed: an ACL change takes effect on every process within this
    (plus one coordinator read), and at once on the process it was made through. Each process's
    copy of the SCRAM credentials is refreshed the same way. No Kafka property (Kafka's brokers
    follow the metadata log)."""

    def sasl_mechanisms_for(self, listener: str) -> tuple[str, ...]:
        """The SASL mechanisms `listener` offers: its own `sasl.enabled.mechanisms` over the
        broker's."""
        text = self.listener_settings.get(listener.upper(), {}).get(
            "sasl.enabled.mechanisms", self.sasl_enabled_mechanisms
        )
        return tuple(m.strip() for m in text.split(",") if m.strip())

    def plain_jaas_config_for(self, listener: str) -> str:
        """The JAAS line of PLAIN's users on `listener`: its own over the broker's."""
        own = self.listener_settings.get(listener.upper(), {})
        return own.get("plain.sasl.jaas.config", self.plain_sasl_jaas_config)

    def tls_for(self, listener: str) -> TlsSettings:
        """The `ssl.*` settings of `listener`: its own over the broker's."""
        return TlsSettings(
            keystore_type=self.ssl_keystore_type,
            keystore_location=self.ssl_keystore_location,
            keystore_certificate_chain=self.ssl_keystore_certificate_chain,
            keystore_key=self.ssl_keystore_key,
            key_password=self.ssl_key_password,
            truststore_type=self.ssl_truststore_type,
            truststore_location=self.ssl_truststore_location,
            truststore_certificates=self.ssl_truststore_certificates,
            client_auth=self.ssl_client_auth,
            principal_mapping_rules=self.ssl_principal_mapping_rules,
            enabled_protocols=self.ssl_enabled_protocols,
        ).overridden(self.listener_settings.get(listener.upper(), {}))

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
        if self.transaction_max_timeout_ms < 1:
            raise ValueError("transaction_max_timeout_ms must be >= 1")
        if (
            not 1
            <= self.group_consumer_heartbeat_interval_ms
            < (self.group_consumer_session_timeout_ms)
        ):
            raise ValueError(
                "group_consumer_heartbeat_interval_ms must be >= 1 and below"
                " group_consumer_session_timeout_ms"
            )
        if not 1 <= self.group_share_heartbeat_interval_ms < self.group_share_session_timeout_ms:
            raise ValueError(
                "group_share_heartbeat_interval_ms must be >= 1 and below"
                " group_share_session_timeout_ms"
            )
        if self.group_share_max_size < 1:
            raise ValueError("group_share_max_size must be >= 1")
        share = (
            self.group_share_record_lock_duration_ms,
            self.group_share_min_record_lock_duration_ms,
            self.group_share_delivery_count_limit,
            self.group_share_partition_max_record_locks,
            self.group_share_max_share_sessions,
        )
        if min(share) < 1:
            raise ValueError("the group.share.* settings must be >= 1")
        if self.inline_frame_bytes_max < 0:
            raise ValueError("inline_frame_bytes_max must be >= 0")
        if self.requests_inflight_max < 1:
            raise ValueError("requests_inflight_max must be >= 1")
        if self.fetch_wait_ms_max < 0:
            raise ValueError("fetch_wait_ms_max must be >= 0")
        if not 1 <= self.num_partitions <= MAX_PARTITIONS_PER_REQUEST:
            raise ValueError(
                f"num.partitions must be in 1..{MAX_PARTITIONS_PER_REQUEST}: a request may add"
                " no more partitions"
            )
        if self.log_retention_bytes is not None and self.log_retention_bytes < -1:
            raise ValueError("log.retention.bytes must be >= -1 (-1: no size limit)")
        if self.message_max_bytes is not None and self.message_max_bytes < 0:
            raise ValueError("message.max.bytes must be >= 0")
        for name, size in (
            ("socket.send.buffer.bytes", self.socket_send_buffer_bytes),
            ("socket.receive.buffer.bytes", self.socket_receive_buffer_bytes),
        ):
            if size < -1 or size == 0 or size > 2**31 - 1:
                raise ValueError(f"{name} must be -1 (the system's default) or 1..{2**31 - 1}")
        if self.broker_session_timeout_ms < 1:
            raise ValueError("broker_session_timeout_ms must be >= 1")
        if self.close_warning_interval_ms < 1 or self.close_warnings_max < 1:
            raise ValueError("close_warning_interval_ms and close_warnings_max must be >= 1")
        if self.metrics_address:
            parse_host_port(self.metrics_address)
        if min(self.metrics_topics_max, self.metrics_lag_groups_max) < 0:
            raise ValueError("metrics_topics_max and metrics_lag_groups_max must be >= 0")
        if self.metrics_lag_partitions_max < 0:
            raise ValueError("metrics_lag_partitions_max must be >= 0")
        for secret in ("ssl_keystore_key", "ssl_key_password"):  # shown as [hidden], however set
            value = getattr(self, secret)
            if value and not isinstance(value, Hidden):
                msgspec.structs.force_setattr(self, secret, Hidden(value))
        plan = listener_plan(
            self.listeners, self.advertised_listeners, self.listener_security_protocol_map
        )
        if self.ssl_handshake_timeout_ms < 1:
            raise ValueError("ssl_handshake_timeout_ms must be >= 1")
        self.tls_for("").check("", tls=False)
        for listener in plan.listeners:
            tls = plan.protocols[listener.name].uses_tls
            self.tls_for(listener.name).check(listener.name, tls=tls)
        if self.authorizer_class_name not in ("", *AUTHORIZER_CLASS_NAMES):
            raise ValueError(
                f"authorizer.class.name: {self.authorizer_class_name!r} is not supported"
                f" (use {' or '.join(AUTHORIZER_CLASS_NAMES)})"
            )
        if self.acl_refresh_ms < 1:
            raise ValueError("acl_refresh_ms must be >= 1")

        sasl = [
            listener.name for listener in plan.listeners if plan.protocols[listener.name].uses_sasl
        ]
        check_sasl_settings(self, [listener.name for listener in plan.listeners], sasl)

    @property
    def authorizer_enabled(self) -> bool:
        return bool(self.authorizer_class_name)

    @property
    def group_defaults(self) -> GroupConfigs:
        """What a group without its own `consumer.session.timeout.ms`,
        `consumer.heartbeat.interval.ms`, `share.session.timeout.ms` or
        `share.heartbeat.interval.ms` gets: these properties' values (Kafka's defaults)."""
        return KAFKA_GROUP_DEFAULTS._replace(
            consumer_session_timeout_ms=self.group_consumer_session_timeout_ms,
            consumer_heartbeat_interval_ms=self.group_consumer_heartbeat_interval_ms,
            share_session_timeout_ms=self.group_share_session_timeout_ms,
            share_heartbeat_interval_ms=self.group_share_heartbeat_interval_ms,
            share_record_lock_duration_ms=self.group_share_record_lock_duration_ms,
        )

    @property
    def group_bounds(self) -> dict[str, int]:
        """The bounds on the group configs that these properties set (`group_config_error`)."""
        return {
            "group.share.min.record.lock.duration.ms": self.group_share_min_record_lock_duration_ms
        }

    @property
    def topic_defaults(self) -> TopicDefaults:
        """What a topic created without its own `retention.ms`, `retention.bytes` or
        `max.message.bytes` gets: these properties' values, else Kafka's defaults."""
        retention_ms = RETENTION_MS_DEFAULT
        if self.log_retention_ms is not None:
            retention_ms = self.log_retention_ms
        elif self.log_retention_minutes is not None:
            retention_ms = self.log_retention_minutes * 60_000
        elif self.log_retention_hours is not None:
            retention_ms = self.log_retention_hours * 3_600_000
        given = {
            "retention.ms": (self.log_retention_ms, self.log_retention_minutes,
                             self.log_retention_hours),
            "retention.bytes": (self.log_retention_bytes,),
            "max.message.bytes": (self.message_max_bytes,),
        }  # fmt: skip
        base = TopicConfig()
        return TopicDefaults(
            TopicConfig(
                retention_ms=max(retention_ms, -1),  # negative: no time limit, as Kafka's
                retention_bytes=_or(self.log_retention_bytes, base.retention_bytes),
                max_message_bytes=_or(self.message_max_bytes, base.max_message_bytes),
            ),
            frozenset(name for name, values in given.items() if any(v is not None for v in values)),
        )


def _or(value: int | None, default: int) -> int:
    return default if value is None else value


def check_sasl_settings(config: ServerConfig, listeners: list[str], sasl: list[str]) -> None:
    """ValueError naming the property when a SASL setting is invalid (never quoting a value of a
    JAAS line: it holds passwords). A SASL listener (of `sasl`) offering PLAIN needs a JAAS
    line, as Kafka's does: without one, PLAIN could never succeed there."""
    for listener in dict.fromkeys(["", *listeners, *config.listener_settings]):
        prefix = f"listener.name.{listener.lower()}." if listener else ""
        mechanisms = config.sasl_mechanisms_for(listener)
        unknown = [m for m in mechanisms if m not in SASL_MECHANISMS]
        if unknown or not mechanisms:
            raise ValueError(
                f"{prefix}sasl.enabled.mechanisms: {', '.join(unknown) or 'empty'}; this server"
                f" offers {', '.join(SASL_MECHANISMS)}"
            )
        text = config.plain_jaas_config_for(listener)
        if text:
            try:
                plain_users(text)
            except ValueError as e:
                raise ValueError(f"{prefix}plain.sasl.jaas.config: {e}") from None
        elif listener in sasl and "PLAIN" in mechanisms:
            raise ValueError(
                f"{prefix}plain.sasl.jaas.config: required, since listener {listener} offers"
                " PLAIN (sasl.enabled.mechanisms)"
            )
    if config.connection_failed_authentication_delay_ms < 0:
        raise ValueError("connection.failed.authentication.delay.ms must be >= 0")
    if config.sasl_handshake_ms_max < 1 or config.sasl_server_max_receive_size < 1:
        raise ValueError("sasl_handshake_ms_max and sasl.server.max.receive.size must be >= 1")


def parse_host_port(address: str) -> tuple[str, int]:
    """HOST:PORT (an IPv6 host in brackets) as (host, port); ValueError naming what is wrong."""
    host, colon, port = address.rpartition(":")
    host = host.removeprefix("[").removesuffix("]")
    if not colon or not host or not port.isdigit() or not 0 <= int(port) <= 65535:
        raise ValueError(f"expected HOST:PORT with a port in 0..65535, got {address!r}")
    return host, int(port)
