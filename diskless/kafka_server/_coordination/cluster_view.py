"""Cluster membership and the partition leaders Metadata advertises.

There is no partition leader on the diskless write path: every broker accepts a produce for every
partition. Metadata still has to name one broker per partition, and that name decides where a
client sends its produce requests. This server names the *produce representative*
(`diskless.routing.produce_broker`) of the client's rack:

- The client's rack is the rack it told this connection (Fetch v11+ carries `rack_id`, which
  consumers set from `client.rack`), and otherwise the rack of the broker answering: producers do
  not send their rack, so a producer bootstrapped from brokers of its own rack learns leaders in
  its own rack. Every broker lists every live broker, so a client whose rack has no live broker
  left still finds one elsewhere (`routing` then picks among all brokers).
- Leaders are chosen among the live brokers. When membership changes, the `leader_epoch` of every
  partition goes up (`generation`), so clients that track leader epochs (KIP-320) accept the new
  leaders instead of discarding them as stale, and a client whose epoch is older is fenced.
- A broker of this process whose registration may have lapsed (not renewed within the session
  timeout: it may be cut off from the coordinator, and the other processes drop it) names the
  other brokers of its last view instead of itself, or no leader when there is none, until a
  renewal lands (`lapsed`).
- Consumers read from the same broker: any broker can serve any partition's reads, and the
  representative of the consumer's rack is in its rack.

The leader epoch is one number for the whole cluster: with a batch coordinator, its membership
version (`BatchCoordinator.membership`), which the coordinator moves in the step that changes
the set of live brokers and which every process reads with the live brokers. So every process
advertises the same epoch for a partition, whenever it joined, and the epoch never goes back:
librdkafka ignores metadata whose epoch is below one it has seen, so per-process numbers made
clients ignore every process but the one they heard the highest number from. One number for
every partition is a valid per-partition epoch (it only grows, and it grows whenever leaders may
move), and it is what there is to know: leaders follow membership, not partitions. A process
whose view is ahead of the registry it last read (a broker of its own joined and not yet read
back, or left but still registered) advertises one above the version it read, since its leaders
moved: the coordinator moves the version by one when it records the same change. A broker whose
registration may have lapsed moves its leaders at the cluster's epoch (clients take new leaders
of an equal epoch): its process cannot know the version meanwhile. A process learns a newer
version at its next read of the registry (every `MEMBERSHIP_READ_MS`), or sooner when a client
shows it a newer epoch (`catch_up`). Without a coordinator the epoch counts this process's
membership changes.

Membership (`ClusterView`): this process's brokers join when their listener is up and leave
when it closes, cleanly or not. With a batch coordinator, the view also announces them in the
coordinator's broker registry (`announce_broker`, renewed every `ttl/3`, withdrawn at a clean
close) and lists the brokers other processes announced (`membership`, read every second), so
several processes over one coordinator are one cluster. A process that dies stops renewing; its
brokers drop out of every view when their registration expires (Kafka's
`broker.session.timeout.ms`). A broker stopped cleanly is gone at once, so that its restart need
not wait for that expiry: the view's writes to the registry are one at a time, and a renewal
still under way when its broker leaves lands before the withdrawal, never after it.

What a broker holds by its epoch (its transaction leases, the consumer groups it coordinates)
lives as long as that registration, so the view tells how long each local broker's
registration is certainly live (`registration_live`): until the start of its last successful
renewal plus the TTL, on this process's monotonic clock. A broker whose renewal is refused has
been fenced by a newer incarnation of its id: the view stops renewing it and reports it
(`on_fenced`), and it must stop serving.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import zlib
from collections.abc import Callable, Iterable
from typing import Final, NamedTuple

from diskless._availability import log_failure
from diskless._types import ErrorCode, TopicPartition
from diskless.coordinator import BatchCoordinator
from diskless.errors import DisklessError
from diskless.routing import BrokerNode, produce_assignment

_log = logging.getLogger(__name__)

REGISTRATION_TTL_MS: Final = 9_000
"""How long a broker stays listed after its process stopped renewing its registration (Kafka's
`broker.session.timeout.ms` default)."""
MEMBERSHIP_READ_MS: Final = 1_000
"""How often a process reads the registry between its renewals (every `ttl/3`), as it reads the
ACLs: a broker that starts or stops elsewhere is in every process's Metadata within a second.
Until then, brokers answer with different brokers and leader epochs, and a client that started
meanwhile (librdkafka's consumer, waiting on metadata to join its group) may stall on them."""


class Endpoint(NamedTuple):
    """Where clients of one listener reach a broker (one entry of `advertised.listeners`)."""

    listener: str
    host: str
    port: int


class BrokerAddress(NamedTuple):
    """A broker as Metadata names it. `host` and `port` are its first advertised endpoint;
    `endpoints` all of them, by listener name (empty: `host:port` serves every listener, as for a
    broker with a single listener)."""

    broker_id: int
    host: str
    port: int
    rack: str | None
    endpoints: tuple[Endpoint, ...] = ()

    def on(self, listener: str) -> tuple[str, int] | None:
        """Where a client that came in on `listener` reaches this broker: Kafka's rule, the
        broker's endpoint of the same listener name; None when it has no such listener."""
        if not self.endpoints:
            return self.host, self.port
        for endpoint in self.endpoints:
            if endpoint.listener == listener:
                return endpoint.host, endpoint.port
        return None


def registry_host(address: BrokerAddress) -> str:
    """What the coordinator's broker registry keeps as the broker's host: the host itself for a
    broker of one listener, else every endpoint as `advertised.listeners` writes them
    (`NAME://host:port,...`), so brokers of other processes learn each listener's address (the
    registry's port is then the first endpoint's)."""
    if not address.endpoints:
        return address.host
    return ",".join(f"{e.listener}://{_host_text(e.host)}:{e.port}" for e in address.endpoints)


def from_registry(broker_id: int, host: str, port: int, rack: str | None) -> BrokerAddress:
    """The inverse of `registry_host`."""
    if "://" not in host:
        return BrokerAddress(broker_id, host, port, rack)
    endpoints = []
    for entry in host.split(","):
        listener, _, where = entry.partition("://")
        name, _, number = where.rpartition(":")
        endpoints.append(Endpoint(listener, name.removeprefix("[").removesuffix("]"), int(number)))
    first = endpoints[0]
    return BrokerAddress(broker_id, first.host, first.port, rack, tuple(endpoints))


def _host_text(host: str) -> str:
    return f"[{host}]" if ":" in host else host


class ClusterView:
    """The live brokers of one cluster and the generation of that set."""

    def __init__(
        self,
        cluster_id: str,
        coordinator: BatchCoordinator | None = None,
        *,
        ttl_ms: int = REGISTRATION_TTL_MS,
        on_fenced: Callable[[int, int], None] | None = None,
    ) -> None:
        """Without `coordinator`, the view is this process's brokers only. `on_fenced(broker_id,
        epoch)` is called once when a local broker's renewal is refused."""
        self.cluster_id = cluster_id
        self._coordinator = coordinator
        self._ttl_ms = ttl_ms
        self._on_fenced = on_fenced
        self._local: dict[int, tuple[BrokerAddress, int]] = {}
        self._live_until: dict[int, float] = {}
        """Local broker id -> monotonic time until which its registration is certainly live."""
        self._terms: dict[int, int] = {}
        """Local broker id -> how many unbroken stretches of live registration it has begun."""
        self._remote: dict[int, BrokerAddress] = {}
        self._epochs: dict[int, int] = {}
        """Broker id -> the epoch of its live registration, as last read or announced."""
        self._gone: set[int] = set()
        """Brokers that left this process and have not joined again."""
        self._left: dict[int, int] = {}
        """Those of them that were announced, with the epoch they left at."""
        self._registered: dict[int, int] = {}
        """Broker id -> the epoch of its live registration, as the registry was last read."""
        self._brokers: dict[int, BrokerAddress] = {}
        self._generation = 0
        """The highest leader epoch advertised (without a coordinator: the membership changes)."""
        self._version = 0
        """The coordinator's membership version, as last read."""
        self._catching_up: asyncio.Task[None] | None = None
        self._task: asyncio.Task[None] | None = None
        self._announcing: set[asyncio.Task[None]] = set()
        self._registry_writes = asyncio.Lock()
        """Held by each announcement and withdrawal, so that none overtakes another."""

    @property
    def ttl_ms(self) -> int:
        return self._ttl_ms

    @property
    def generation(self) -> int:
        """Every partition's leader epoch, advertised wherever one is (Metadata, Fetch,
        ListOffsets, OffsetForLeaderEpoch): the coordinator's membership version, one more while
        this process's view is ahead of the registry it last read; never lower than an epoch
        advertised before. Without a coordinator, bumped whenever a broker joins or leaves."""
        if self._coordinator is not None:
            epoch = self._version + (1 if self._ahead() else 0)
            self._generation = max(self._generation, epoch)
        return self._generation

    def _ahead(self) -> bool:
        """Whether this process knows of a membership change the registry it last read does not
        show yet, and which the coordinator will record (moving its version by one): a broker of
        its own announced and not read back, or one that left here still listed. (A broker whose
        registration may have lapsed is not one: its process cannot tell whether the coordinator
        saw it lapse, and an epoch the coordinator never reaches would outrank every other
        process's answers for clients until the next change.)"""
        registered = self._registered
        joined = any(e >= 0 and registered.get(b) != e for b, (_, e) in self._local.items())
        return joined or any(registered.get(b) == e for b, e in self._left.items())

    def check_epoch(self, current_leader_epoch: int) -> ErrorCode:
        """Kafka's check of the leader epoch a client names (KIP-320; -1 names none):
        FENCED_LEADER_EPOCH below `generation` (the client refreshes its metadata),
        UNKNOWN_LEADER_EPOCH above it (the client retries), and then this process reads the
        membership again (`catch_up`), so that it does not refuse that client for long."""
        if current_leader_epoch < 0:
            return ErrorCode.NONE
        generation = self.generation
        if current_leader_epoch < generation:
            return ErrorCode.FENCED_LEADER_EPOCH
        if current_leader_epoch > generation:
            self.catch_up()
            return ErrorCode.UNKNOWN_LEADER_EPOCH
        return ErrorCode.NONE

    def catch_up(self) -> None:
        """Read the membership again soon (one read at a time): a client showed an epoch above
        `generation`, which another process learned first."""
        if self._coordinator is None or self._catching_up is not None:
            return
        self._catching_up = asyncio.get_running_loop().create_task(self._catch_up())

    async def _catch_up(self) -> None:
        try:
            await self._read_membership()
        finally:
            self._catching_up = None

    async def start(self) -> None:
        if self._coordinator is not None and self._task is None:
            await self.renew()
            self._task = asyncio.create_task(self._renew_forever())

    async def close(self) -> None:
        """Stop renewing and withdraw this process's registrations (a clean shutdown)."""
        task, self._task = self._task, None
        if task is not None:
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)
        if self._catching_up is not None:
            await asyncio.gather(self._catching_up, return_exceptions=True)
        await asyncio.gather(*self._announcing, return_exceptions=True)
        if self._coordinator is not None:
            for address, epoch in list(self._local.values()):
                await self._withdraw(address, epoch)

    def join(self, address: BrokerAddress, broker_epoch: int = -1) -> None:
        """`broker_epoch`: the incarnation to announce (-1: not announced)."""
        self._local[address.broker_id] = (address, broker_epoch)
        self._gone.discard(address.broker_id)
        self._left.pop(address.broker_id, None)
        self._update()
        if self._coordinator is not None and broker_epoch >= 0:
            task = asyncio.get_running_loop().create_task(
                self._first_announce(address, broker_epoch)
            )
            self._announcing.add(task)
            task.add_done_callback(self._announcing.discard)

    async def _first_announce(self, address: BrokerAddress, epoch: int) -> None:
        try:
            await self._announce(address, epoch)
        except DisklessError as e:  # the next renewal tries again
            _log.debug("announcing broker %d failed: %r", address.broker_id, e)
            return
        await self._read_membership()  # the version it moved

    def leave(self, broker_id: int) -> None:
        """The broker stopped serving here; other processes see it go when it expires, or
        at once after `withdraw`."""
        local = self._local.pop(broker_id, None)
        if local is not None:
            self._gone.add(broker_id)
            if local[1] >= 0:
                self._left[broker_id] = local[1]
        self._live_until.pop(broker_id, None)
        self._update()

    async def withdraw(self, address: BrokerAddress, broker_epoch: int) -> None:
        if self._coordinator is not None and broker_epoch >= 0:
            await self._withdraw(address, broker_epoch)

    def brokers(self) -> list[BrokerAddress]:
        return sorted(self._brokers.values())

    def get(self, broker_id: int) -> BrokerAddress | None:
        return self._brokers.get(broker_id)

    def epoch_of(self, broker_id: int) -> int | None:
        """The epoch of the broker's live registration, as this view last saw it."""
        return self._epochs.get(broker_id) if broker_id in self._brokers else None

    def registration_live(self, broker_id: int) -> bool:
        """Whether this process's broker certainly holds a live registration now: what it owns
        by its epoch is its own only until then. Always True without a coordinator."""
        return self.registration_term(broker_id) is not None

    def registration_term(self, broker_id: int) -> int | None:
        """Which unbroken stretch of live registration this process's broker is in, None when
        it is not certainly live. A renewal that may have come after the registration expired
        starts a new term: anything the broker held may have moved in between (another process
        may have claimed its groups), so what it held in an older term is no longer its own."""
        if self._coordinator is None:
            return 0 if broker_id in self._local else None
        until = self._live_until.get(broker_id)
        if until is None or asyncio.get_running_loop().time() >= until:
            return None
        return self._terms.get(broker_id, 0)

    def coordinator_for(self, key: str) -> BrokerAddress | None:
        """The broker that coordinates `key` (a group or transactional id): the same from every
        process that sees the same live brokers, so a group's members all meet in one process."""
        brokers = self.brokers()
        if not brokers:
            return None
        return brokers[zlib.crc32(key.encode()) % len(brokers)]

    def leaders(
        self, partitions: Iterable[TopicPartition], client_rack: str | None
    ) -> dict[TopicPartition, int]:
        """The produce representative of `client_rack` for each partition, among live brokers
        (none: no partition is in the answer). A broker of this process whose registration may
        have lapsed is not among them: see `lapsed`."""
        lapsed = self.lapsed()  # (its leaders move at the cluster's epoch: see `_ahead`)
        nodes = [
            BrokerNode(b.broker_id, b.rack)
            for b in self._brokers.values()
            if b.broker_id not in lapsed
        ]
        return produce_assignment(partitions, client_rack, nodes) if nodes else {}

    def lapsed(self) -> frozenset[int]:
        """This process's brokers whose registration may have lapsed: they renewed it once, but
        not within the session timeout since. The others' views drop such a broker when its
        registration expires, and it may be cut off from the coordinator, so it stops naming
        itself a partition's leader (as Kafka's controller moves leadership away from a broker
        that missed its heartbeats) until a renewal lands: clients that ask it are sent to the
        brokers of its last view instead, and come back after."""
        if self._coordinator is None:
            return frozenset()
        now = asyncio.get_running_loop().time()
        return frozenset(b for b, until in self._live_until.items() if now >= until)

    # --- the registry -----------------------------------------------------------------------------
    async def renew(self) -> None:
        """Renew this process's registrations and read everyone's."""
        assert self._coordinator is not None
        try:
            for address, epoch in list(self._local.values()):
                if epoch >= 0:
                    await self._announce(address, epoch)
        except DisklessError as e:
            log_failure(_log, e, "broker registry unavailable")
            return
        await self._read_membership()

    async def _read_membership(self) -> None:
        assert self._coordinator is not None
        try:
            membership = await self._coordinator.membership()
        except DisklessError as e:
            log_failure(_log, e, "broker registry unavailable")
            return
        live = membership.brokers
        self._remote = {
            r.broker_id: from_registry(r.broker_id, r.host, r.port, r.rack) for r in live
        }
        self._epochs = {r.broker_id: r.broker_epoch for r in live}
        self._registered = dict(self._epochs)
        self._version = max(self._version, membership.version)
        self._update()

    async def _renew_forever(self) -> None:
        """Renew every `ttl/3`, and read the registry every `MEMBERSHIP_READ_MS` in between; a
        read never holds up a renewal."""
        loop = asyncio.get_running_loop()
        renew_s, read_s = self._ttl_ms / 3000, MEMBERSHIP_READ_MS / 1000
        while True:
            renewal = loop.time() + renew_s
            while renewal - loop.time() > read_s:
                await asyncio.sleep(read_s)
                with contextlib.suppress(TimeoutError):
                    async with asyncio.timeout_at(renewal):
                        await self._read_membership()
            await asyncio.sleep(max(0.0, renewal - loop.time()))
            await self.renew()

    async def _announce(self, address: BrokerAddress, epoch: int) -> None:
        assert self._coordinator is not None
        host, port, rack, broker_id = (
            registry_host(address),
            address.port,
            address.rack,
            address.broker_id,
        )
        loop = asyncio.get_running_loop()
        async with self._registry_writes:
            if self._local.get(broker_id, (None, None))[1] != epoch:
                return  # it left (and was withdrawn) meanwhile: not announced again
            started = loop.time()
            announced = await self._coordinator.announce_broker(
                broker_id, epoch, host, port, rack, self._ttl_ms
            )
        if announced:
            if self._local.get(broker_id, (None, None))[1] == epoch:
                # The renewal landed by now; if the registration could have expired before it,
                # this is a new term (the step's own time is somewhere before `loop.time()`).
                if loop.time() >= self._live_until.get(broker_id, 0.0):
                    self._terms[broker_id] = self._terms.get(broker_id, -1) + 1
                self._live_until[broker_id] = started + self._ttl_ms / 1000
            return
        if self._local.get(broker_id, (None, None))[1] != epoch:
            return  # it left meanwhile
        _log.error(
            "broker %d epoch %d was fenced: a newer incarnation of broker %d registered",
            broker_id,
            epoch,
            broker_id,
        )
        self.leave(broker_id)
        if self._on_fenced is not None:
            self._on_fenced(broker_id, epoch)

    async def _withdraw(self, address: BrokerAddress, epoch: int) -> None:
        assert self._coordinator is not None
        try:
            async with self._registry_writes:
                await self._coordinator.announce_broker(
                    address.broker_id, epoch, registry_host(address), address.port, address.rack, 0
                )
        except DisklessError as e:
            log_failure(_log, e, "cannot withdraw broker %d", address.broker_id)

    def _update(self) -> None:
        # This process knows its own brokers best: one that left here is gone at once, though
        # its registration lives on until it expires.
        brokers = {b: a for b, a in self._remote.items() if b not in self._gone}
        brokers.update((b, address) for b, (address, _) in self._local.items())
        self._epochs.update((b, epoch) for b, (_, epoch) in self._local.items())
        if brokers.keys() != self._brokers.keys() and self._coordinator is None:
            self._generation += 1
        self._brokers = brokers
