"""The engine's broker registrations: which incarnation of a broker id is live
(`_rules.ownership`).

A broker registers for a new epoch (refused, when exclusive, while another incarnation of the id
is live) and announces where it listens, renewing the registration before it lapses. The leases
an older incarnation holds die with it, and so do those of a registration that lapsed. The same
rules decide who owns a consumer group: `consumer_groups`.

Every announcement (and withdrawal) also keeps the membership version (`membership`), the
cluster-wide number every process advertises as its partitions' leader epoch. Those steps are
durable: the version must not go back after the coordinator restarts, and a step of each broker
every few seconds costs little. A mirror raises the version to its source's leader epoch
(`raise_membership_version`, KIP-1279), so that it never falls below it.
"""

from __future__ import annotations

from typing import Final

from diskless.coordinator._engine.base import EngineBase
from diskless.coordinator._rules.ownership import (
    MEMBERSHIP_SET_COUNTER,
    MEMBERSHIP_VERSION_COUNTER,
    MEMBERSHIP_VERSION_MAX,
    id_in_use,
    membership_after,
    membership_raised,
    renewal_drops_leases,
)
from diskless.coordinator._store import (
    EMPTY,
    Changes,
    Needs,
    Operation,
    ReadView,
    StoreStep,
)
from diskless.coordinator._values import BrokerRegistration, Membership
from diskless.errors import BrokerIdInUseError

_MEMBERSHIP_COUNTERS: Final = (MEMBERSHIP_SET_COUNTER, MEMBERSHIP_VERSION_COUNTER)
_ALL_REGISTRATIONS: Final = Needs(all_broker_registrations=True)


class BrokerOperations(EngineBase):
    async def register_broker(self, broker_id: int, *, exclusive: bool = False) -> int:
        needs = Needs(brokers=(broker_id,), broker_registrations=(broker_id,))

        async def register(db: StoreStep) -> int:
            now = self._clock.now_ms()
            snapshot = await db.load(needs)
            live = snapshot.broker_registrations.get(broker_id)
            if exclusive and live is not None and id_in_use(live, now):
                raise BrokerIdInUseError(broker_id, live.broker_epoch, live.expires_ms - now)
            epoch = snapshot.broker_epochs.get(broker_id, 0) + 1
            # The older incarnations' leases die with them (`_rules.ownership`).
            await db.apply(
                Changes(broker_epochs={broker_id: epoch}, broker_leases_dropped={broker_id: epoch})
            )
            return epoch

        return await self._write(Operation.REGISTER_BROKER, register)

    async def announce_broker(
        self,
        broker_id: int,
        broker_epoch: int,
        host: str,
        port: int,
        rack: str | None,
        ttl_ms: int,
    ) -> bool:
        if ttl_ms < 0:
            raise ValueError(f"ttl_ms must be >= 0, got {ttl_ms}")

        # The membership counters are locked first, so that every registration is read as the
        # last step that moved the version left it (`_rules.ownership`).
        locks = Needs(brokers=(broker_id,), counters=_MEMBERSHIP_COUNTERS)

        async def announce(db: StoreStep) -> bool:
            now = self._clock.now_ms()
            locked = await db.load(locks)
            if locked.broker_epochs.get(broker_id) != broker_epoch:
                return False
            registrations = dict((await db.load(_ALL_REGISTRATIONS)).broker_registrations)
            registration = BrokerRegistration(
                broker_id, broker_epoch, host, port, rack, now + ttl_ms
            )
            previous = registrations.get(broker_id)
            registrations[broker_id] = registration
            # Leases that died with a lapsed registration stay dead (`_rules.ownership`).
            relapsed = renewal_drops_leases(previous, broker_epoch, now)
            dropped = {broker_id: broker_epoch + 1} if relapsed else EMPTY
            counters = membership_after(locked.counters, registrations.values(), now, relapsed)
            await db.apply(
                Changes(
                    broker_registrations={broker_id: registration},
                    broker_leases_dropped=dropped,
                    counters=counters,
                )
            )
            return True

        return await self._write(Operation.ANNOUNCE_BROKER, announce)

    async def raise_membership_version(self, at_least: int) -> int:
        if not 0 <= at_least <= MEMBERSHIP_VERSION_MAX:
            raise ValueError(f"at_least must be within 0..{MEMBERSHIP_VERSION_MAX}, got {at_least}")
        locks = Needs(counters=_MEMBERSHIP_COUNTERS)

        async def raise_version(db: StoreStep) -> int:
            counters = (await db.load(locks)).counters
            changes = membership_raised(counters, at_least)
            if changes:
                await db.apply(Changes(counters=changes))
            return max(counters.get(MEMBERSHIP_VERSION_COUNTER, 0), at_least)

        return await self._write(Operation.RAISE_MEMBERSHIP_VERSION, raise_version)

    async def live_brokers(self) -> list[BrokerRegistration]:
        async def live(view: ReadView) -> list[BrokerRegistration]:
            registrations = await view.broker_registrations()
            now = self._clock.now_ms()
            return [r for r in registrations if r.expires_ms > now]

        return await self._read(live)

    async def membership(self) -> Membership:
        async def read(view: ReadView) -> Membership:
            version = await view.membership_version()
            registrations = await view.broker_registrations()
            now = self._clock.now_ms()
            return Membership(version, [r for r in registrations if r.expires_ms > now])

        return await self._read(read)
