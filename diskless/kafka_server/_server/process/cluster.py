"""A local cluster: N brokers in one process sharing one object store and one batch coordinator.

Broker i is in rack `rack-(i mod racks)` (or every broker in `broker.rack`, when set) and
listens on its own port of 127.0.0.1, or on its own ports of the configured listeners (broker k
of the process on each listener's port + k, `_server.settings.listeners`); ids are 0..N-1
unless given (`broker_ids`, to join other processes' brokers over the same coordinator and store:
the membership view announces each broker in the coordinator's registry and lists the others'). The
brokers share, besides the store and the coordinator, the cluster's membership view, its transaction
front end (producer ids and transactions) and its group coordinator, so any broker can answer any
coordinator request. `kill` takes a broker's listener down abruptly, as a crash would look to its
clients. Its `DisklessBroker` then either flushes what it had accepted (`flush=True`: commits whose
answers the clients never saw, so their retries elsewhere are duplicates) or fails it
(`flush=False`, a process crash: nothing unanswered is committed, the retries are first writes).

One incarnation per broker id: a broker starts only once no other incarnation of its id holds
a live registration (one that died is waited out, until the moment its registration said it
would expire; a live one, which renews it meanwhile, makes `start` fail with
`BrokerIdInUseError`). A broker fenced by a newer incarnation
stops serving at once (`fenced` tells which, and `lost` is set).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Sequence
from typing import Final

from diskless import BrokerConfig, DisklessBroker, ErrorCode
from diskless.coordinator import BatchCoordinator, TopicConfig
from diskless.errors import BrokerIdInUseError
from diskless.kafka_server._coordination.acl_cache import AclCache
from diskless.kafka_server._coordination.authorizer import AuthorizerSettings, parse_super_users
from diskless.kafka_server._coordination.cluster_view import ClusterView
from diskless.kafka_server._coordination.consumer_group_state import ConsumerGroupConfig
from diskless.kafka_server._coordination.credentials import Credentials
from diskless.kafka_server._coordination.group_configs import GroupConfigCopy
from diskless.kafka_server._coordination.group_coordinator import GroupCoordinator
from diskless.kafka_server._coordination.share_front import ShareFront
from diskless.kafka_server._coordination.share_group_state import ShareGroupConfig
from diskless.kafka_server._coordination.txn_front import TransactionFront
from diskless.kafka_server._server.network._request_budget import RequestBudget
from diskless.kafka_server._server.network.broker_server import BrokerServer
from diskless.kafka_server._server.settings.config import ServerConfig
from diskless.kafka_server._server.settings.listeners import listener_plan
from diskless.metrics import NULL_METRICS, Metrics
from diskless.storage import ObjectStore

_log = logging.getLogger(__name__)

BROKER_ID_MAX: Final = 2**31 - 1
"""Kafka's node ids are int32 on the wire (Metadata, FindCoordinator), and negative ones mean
"no broker"."""


def check_broker_id(broker_id: int) -> None:
    if not 0 <= broker_id <= BROKER_ID_MAX:
        raise ValueError(f"broker id {broker_id} is outside 0..{BROKER_ID_MAX}")


PORT_MAX: Final = 65535
REGISTRATION_RETRY_S: Final = 0.5
"""How often a broker whose id another incarnation holds tries to register again."""
REGISTRATION_WAIT_MARGIN_MS: Final = 1_000
"""Beyond the moment the old registration said it would expire: how much longer a start waits
for it (a renewal that was under way)."""


def rack_name(index: int) -> str:
    return f"rack-{index}"


class KafkaCluster:
    """`async with KafkaCluster(store, coordinator, brokers=3, racks=3) as cluster: ...`"""

    def __init__(
        self,
        store: ObjectStore,
        coordinator: BatchCoordinator,
        *,
        brokers: int = 3,
        racks: int = 3,
        ports: Sequence[int] | None = None,
        broker_ids: Sequence[int] | None = None,
        broker_config: BrokerConfig | None = None,
        server_config: ServerConfig | None = None,
        cluster_id: str = "diskless-local",
        metrics: Metrics = NULL_METRICS,
    ) -> None:
        """`metrics`: where the brokers and their servers report (`diskless.metrics`)."""
        if brokers < 1 or racks < 1:
            raise ValueError("a cluster needs at least one broker and one rack")
        if ports is not None and len(ports) != brokers:
            raise ValueError(f"{len(ports)} ports for {brokers} brokers")
        if ports is not None and not all(0 <= port <= PORT_MAX for port in ports):
            raise ValueError(f"ports must be in 0..{PORT_MAX} (0: any free one), not {ports}")
        if broker_ids is not None and (
            len(broker_ids) != brokers or len(set(broker_ids)) != brokers
        ):
            raise ValueError(f"{brokers} brokers need {brokers} distinct ids, not {broker_ids}")
        for broker_id in broker_ids or ():
            check_broker_id(broker_id)
        self._store = store
        self._coordinator = coordinator
        self._broker_count = brokers
        self._racks = racks
        self._ports = list(ports) if ports is not None else [0] * brokers
        self._broker_ids = list(broker_ids) if broker_ids is not None else list(range(brokers))
        self._broker_config = broker_config
        self._server_config = server_config
        self.metrics = metrics
        self.request_budget = RequestBudget(
            (server_config or ServerConfig()).queued_request_bytes_max
        )
        """One `queued_request_bytes_max` budget for all brokers: they share one process."""
        config = server_config or ServerConfig()
        self._listeners = listener_plan(
            config.listeners, config.advertised_listeners, config.listener_security_protocol_map
        )
        if self._listeners.highest_port(brokers) > PORT_MAX:
            raise ValueError(
                f"listeners: broker {brokers - 1} of this process would listen on port"
                f" {self._listeners.highest_port(brokers)} (each listener's port + k)"
            )
        self._fixed_rack = config.broker_rack or None
        self.view = ClusterView(
            cluster_id,
            coordinator,
            ttl_ms=config.broker_session_timeout_ms,
            on_fenced=self._fenced,
        )
        self.transactions = TransactionFront(
            coordinator, transaction_timeout_ms_max=config.transaction_max_timeout_ms
        )
        self.group_configs = GroupConfigCopy(
            coordinator, defaults=config.group_defaults, bounds=config.group_bounds
        )
        self._share_max_size = config.group_share_max_size
        """This process's copy of every group's configs (IncrementalAlterConfigs on GROUP)."""
        self.groups = GroupCoordinator(
            coordinator,
            self.view,
            group_configs=self._consumer_group_config,
            share_configs=self._share_group_config,
        )
        self.shares = ShareFront(
            coordinator,
            self.group_configs.configs,
            delivery_count_limit=config.group_share_delivery_count_limit,
            max_record_locks=config.group_share_partition_max_record_locks,
            sessions_max=config.group_share_max_share_sessions,
        )
        """This process's share fetches and share sessions (KIP-932)."""
        self.groups.shares.on_departure(self.shares.member_left)
        self.credentials = Credentials(coordinator, config.acl_refresh_ms)
        """The SCRAM credentials, and this process's copy of them (refreshed as the ACLs are)."""
        self.acls = (
            AclCache(
                coordinator,
                AuthorizerSettings(
                    parse_super_users(config.super_users), config.allow_everyone_if_no_acl_found
                ),
                config.acl_refresh_ms,
            )
            if config.authorizer_enabled
            else None
        )
        """The authorizer's ACLs, shared by the brokers (None: no authorizer configured)."""
        self.servers: dict[int, BrokerServer] = {}
        self._killed: set[int] = set()
        self.fenced: set[int] = set()
        """Brokers stopped because a newer incarnation of their id registered."""
        self.lost = asyncio.Event()
        """Set once any broker of this cluster was fenced: the process should exit."""
        self._stopping: set[asyncio.Task[None]] = set()

    @property
    def coordinator(self) -> BatchCoordinator:
        return self._coordinator

    def _consumer_group_config(self, group_id: str) -> ConsumerGroupConfig:
        """A consumer group's settings: its own configs, else the broker's `group.consumer.*`."""
        configs = self.group_configs.configs(group_id)
        return ConsumerGroupConfig(
            session_timeout_ms=configs.consumer_session_timeout_ms,
            heartbeat_interval_ms=configs.consumer_heartbeat_interval_ms,
        )

    def _share_group_config(self, group_id: str) -> ShareGroupConfig:
        """A share group's settings: its own configs, else the broker's `group.share.*`."""
        configs = self.group_configs.configs(group_id)
        return ShareGroupConfig(
            session_timeout_ms=configs.share_session_timeout_ms,
            heartbeat_interval_ms=configs.share_heartbeat_interval_ms,
            max_size=self._share_max_size,
        )

    async def start(self) -> None:
        if self.acls is not None:
            await self.acls.start()
        await self.credentials.start()
        await self.transactions.start()
        await self.group_configs.start()
        await self.groups.start()
        await self.view.start()
        for index, broker_id in enumerate(self._broker_ids):
            broker = DisklessBroker(
                broker_id,
                self._store,
                self._coordinator,
                self._broker_config,
                rack=self._rack_of(broker_id),
                metrics=self.metrics,
            )
            await self._start_exclusively(broker)
            server = BrokerServer(
                broker,
                self.view,
                self.transactions,
                self.groups,
                self.credentials,
                self.shares,
                config=self._server_config,
                request_budget=self.request_budget,
                listeners=self._listeners.for_broker(index, default_port=self._ports[index]),
                metrics=self.metrics,
                acls=self.acls,
            )
            self.servers[broker_id] = server
            await server.start()

    async def _start_exclusively(self, broker: DisklessBroker) -> None:
        """Start `broker` once no other incarnation of its id is registered: a process that
        died leaves a registration that expires within the session timeout; one still renewing
        it makes this fail (two processes serving one broker id would fence each other)."""
        loop = asyncio.get_running_loop()
        deadline: float | None = None
        while True:
            try:
                await broker.start(exclusive=True)
                return
            except BrokerIdInUseError as e:
                if deadline is None:  # a dead holder's registration expires by then
                    wait_ms = e.expires_in_ms + REGISTRATION_WAIT_MARGIN_MS
                    deadline = loop.time() + wait_ms / 1000
                    _log.warning(
                        "broker %d: %s; waiting up to %d ms for it to expire",
                        broker.broker_id,
                        e,
                        wait_ms,
                    )
                if loop.time() + REGISTRATION_RETRY_S > deadline:
                    raise
                await asyncio.sleep(REGISTRATION_RETRY_S)

    def _fenced(self, broker_id: int, epoch: int) -> None:
        """A newer incarnation of `broker_id` registered: this one stops serving at once."""
        server = self.servers.get(broker_id)
        if server is None or broker_id in self.fenced or server.broker.broker_epoch != epoch:
            return
        self.fenced.add(broker_id)
        self.groups.forget_broker(broker_id)
        task = asyncio.get_running_loop().create_task(self.kill(broker_id, flush=False))
        self._stopping.add(task)
        task.add_done_callback(self._stopping.discard)
        self.lost.set()

    async def close(self) -> None:
        await asyncio.gather(*self._stopping, return_exceptions=True)
        for server in self.servers.values():
            await server.close()
        await self.shares.close()  # the releases of the sessions that ended with their connections
        await asyncio.gather(*(s.broker.close() for s in self.servers.values()))
        await self.view.close()
        await self.groups.close()
        await self.group_configs.close()
        await self.transactions.close()
        await self.credentials.close()
        if self.acls is not None:
            await self.acls.close()

    async def __aenter__(self) -> KafkaCluster:
        try:
            await self.start()
        except BaseException:
            await self.close()
            raise
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.close()

    async def create_topic(
        self, name: str, partitions: int, config: TopicConfig | None = None
    ) -> ErrorCode:
        """NONE, or TOPIC_ALREADY_EXISTS (`BatchCoordinator.create_topic`). Without `config`,
        the server's topic defaults (`ServerConfig.topic_defaults`: Kafka's 7 days' retention
        unless `log.retention.*` says otherwise), as a topic created through a broker gets."""
        if config is None:
            config = (self._server_config or ServerConfig()).topic_defaults.config
        return await self._coordinator.create_topic(name, partitions, config)

    def bootstrap(self, rack: str | None = None, *, listener: str | None = None) -> str:
        """`host:port,...` of the live brokers (of `rack` when given), at their first advertised
        endpoint or at that of `listener`."""
        found = []
        for b in self.view.brokers():
            where = (b.host, b.port) if listener is None else b.on(listener)
            if where is not None and (rack is None or b.rack == rack):
                host, port = where
                found.append(f"[{host}]:{port}" if ":" in host else f"{host}:{port}")
        return ",".join(found)

    @property
    def listener_names(self) -> list[str]:
        """The advertised listeners of a broker with several (none for one listener)."""
        names = [listener.name for listener in self._listeners.listeners]
        return [n for n in names if n in self._listeners.advertised] if len(names) > 1 else []

    def _rack_of(self, broker_id: int) -> str:
        return self._fixed_rack or rack_name(broker_id % self._racks)

    @property
    def racks(self) -> list[str]:
        return sorted({self._rack_of(b) for b in self._broker_ids})

    @property
    def live(self) -> list[BrokerServer]:
        """The servers not killed."""
        return [s for b, s in self.servers.items() if b not in self._killed]

    async def kill(self, broker_id: int, *, flush: bool = True) -> None:
        """Reset the broker's connections and stop its listener; then drain or drop its WAL."""
        server = self.servers[broker_id]
        _log.warning("killing broker %d (flush=%s)", broker_id, flush)
        await server.abort()
        self._killed.add(broker_id)
        await server.broker.close(flush=flush)
