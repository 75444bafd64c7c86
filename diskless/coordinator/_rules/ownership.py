"""Who owns what, by broker epoch: one owner at a time, and ownership dies with its epoch.

Whatever several broker processes must agree on is held by a broker *incarnation* (broker id
and epoch), and lives exactly as long as that incarnation's registration does. A registration
(`BrokerRegistration`) stops being live when it expires (its process stopped renewing it, or
withdrew it) or when a newer incarnation of the same id registers. No timer of the holder's
own decides it: the step that reads the registrations does, so every process decides alike.

- **Broker ids.** A new incarnation may register an id only while no other incarnation's
  registration of it is live (KRaft refuses a duplicate registration the same way).
- **Transaction leases** (the commit barrier) die with the incarnation that took them: a
  transaction's end need not wait out the lease's own TTL once its broker is gone. The barrier
  itself is untouched: the markers drop every lease of the transaction, and a commit naming a
  dropped lease is refused. A registration that lapsed and is renewed at the same epoch (a
  broker cut off from the coordinator for longer than its session, then back) does not bring
  them back: the renewal drops them, so an end that comes after it does not wait for batches
  the broker could not commit while it was away.
- **Consumer groups.** A group has one coordinator at a time. Ownership moves only when the
  owner's registration is no longer live, in the step that claims the group for another
  broker; offsets are committed only by the current owner, for the current generation.
- **The membership version** (`MEMBERSHIP_VERSION_COUNTER`) numbers the sets of live
  registrations, and every process advertises it as every partition's leader epoch. It goes up
  in the step that changes the set (a registration announced or withdrawn, an incarnation
  replaced) and in the first registry step that finds the set changed by time alone (a
  registration expired): each step compares the live set with the one the version was last
  moved for (`MEMBERSHIP_SET_COUNTER`, a fingerprint), so no change is missed whichever step
  sees it first, and the version never goes back. A registration renewed after it lapsed moves
  it too, whether or not a step saw it lapse: a process may have read the broker gone meanwhile.
  Live processes renew every few seconds, so an expiry moves the version within one renewal
  interval.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Mapping
from typing import Final

from diskless._types import ErrorCode, GroupOwnership
from diskless.coordinator._rules.rows import LeaseHolder
from diskless.coordinator._values import BrokerRegistration


def registration_live(
    registration: BrokerRegistration | None, broker_epoch: int, now_ms: int
) -> bool:
    """Whether the broker's incarnation `broker_epoch` holds a live registration."""
    return (
        registration is not None
        and registration.broker_epoch == broker_epoch
        and registration.expires_ms > now_ms
    )


def id_in_use(registration: BrokerRegistration | None, now_ms: int) -> bool:
    """Whether a new incarnation of the broker must be refused: another one is live."""
    return registration is not None and registration.expires_ms > now_ms


def renewal_drops_leases(
    previous: BrokerRegistration | None, broker_epoch: int, now_ms: int
) -> bool:
    """Whether renewing the registration of incarnation `broker_epoch` drops the leases it
    holds: its registration lapsed since it last renewed it, and with it those leases died."""
    return (
        previous is not None
        and previous.broker_epoch == broker_epoch
        and previous.expires_ms <= now_ms
    )


MEMBERSHIP_VERSION_COUNTER: Final = "membership_version"
"""The version of the set of live broker registrations (0 before any)."""
MEMBERSHIP_SET_COUNTER: Final = "membership_set"
"""A fingerprint of the live set the version was last moved for."""


def membership_fingerprint(registrations: Iterable[BrokerRegistration], now_ms: int) -> int:
    """A fingerprint of the live incarnations (broker id and epoch) among `registrations`."""
    live = sorted((r.broker_id, r.broker_epoch) for r in registrations if r.expires_ms > now_ms)
    digest = hashlib.blake2b(repr(live).encode(), digest_size=8).digest()
    return int.from_bytes(digest, "big") >> 1  # fits a signed 64-bit column


def membership_after(
    counters: Mapping[str, int],
    registrations: Iterable[BrokerRegistration],
    now_ms: int,
    relapsed: bool,
) -> dict[str, int]:
    """The counter changes of a registry step whose registrations afterwards are
    `registrations` (all of them): the version goes up when the live set differs from the one
    it was last moved for, or when a registration was renewed after it lapsed (`relapsed`);
    nothing changes otherwise."""
    fingerprint = membership_fingerprint(registrations, now_ms)
    if fingerprint == counters.get(MEMBERSHIP_SET_COUNTER, 0) and not relapsed:
        return {}
    version = counters.get(MEMBERSHIP_VERSION_COUNTER, 0) + 1
    return {MEMBERSHIP_VERSION_COUNTER: version, MEMBERSHIP_SET_COUNTER: fingerprint}


MEMBERSHIP_VERSION_MAX: Final = 2**31 - 1
"""The version is every partition's leader epoch, an int32 on the wire."""


def membership_raised(counters: Mapping[str, int], at_least: int) -> dict[str, int]:
    """The counter changes of raising the membership version to at least `at_least`: none when
    it is there already (the version never goes back). The live-set fingerprint is kept, so the
    next change of the live set moves the version by one from the raised value."""
    if counters.get(MEMBERSHIP_VERSION_COUNTER, 0) >= at_least:
        return {}
    return {MEMBERSHIP_VERSION_COUNTER: at_least}


def lease_alive(holder: LeaseHolder, registration: BrokerRegistration | None, now_ms: int) -> bool:
    """Whether a lease still binds a transaction's end: its own TTL has not run out, and the
    incarnation holding it is neither replaced nor expired. A broker that never registered a
    liveness (a library user's broker, or a lease older than holders) leaves only the TTL."""
    if holder.expires_ms <= now_ms:
        return False
    if registration is None or holder.broker_id < 0:
        return True
    if registration.broker_epoch > holder.broker_epoch:
        return False  # a newer incarnation of the broker fenced this one
    return registration.broker_epoch < holder.broker_epoch or registration.expires_ms > now_ms


def lease_wait_deadline(
    holders: Iterable[LeaseHolder],
    registrations: Mapping[int, BrokerRegistration],
    now_ms: int,
) -> int | None:
    """When a transaction's end must look again at the leases that still bind it: the earliest
    moment one of them may die (its TTL, or its holder's registration running out); None when
    none binds it any more."""
    deadline: int | None = None
    for holder in holders:
        registration = registrations.get(holder.broker_id)
        if not lease_alive(holder, registration, now_ms):
            continue
        due = holder.expires_ms
        if registration is not None and registration.broker_epoch == holder.broker_epoch:
            due = min(due, registration.expires_ms)
        if deadline is None or due < deadline:
            deadline = due
    return deadline


def group_owner_after_claim(
    current: GroupOwnership | None,
    registrations: Mapping[int, BrokerRegistration],
    claimant_id: int,
    claimant_epoch: int,
    now_ms: int,
) -> GroupOwnership | None:
    """The group's owner once `claimant` asked for it: the current owner while its
    registration is live, else the claimant if its own is (the generation carries over);
    None when neither is live."""
    if current is not None and registration_live(
        registrations.get(current.broker_id), current.broker_epoch, now_ms
    ):
        return current
    if not registration_live(registrations.get(claimant_id), claimant_epoch, now_ms):
        return None
    generation = current.generation if current is not None else 0
    return GroupOwnership(claimant_id, claimant_epoch, generation)


def check_group_fence(stored: GroupOwnership | None, fence: GroupOwnership) -> ErrorCode:
    """May the owner named by `fence` act for the group, for its member's generation?
    NOT_COORDINATOR if it no longer owns the group (the client looks the coordinator up
    again); ILLEGAL_GENERATION if the generation is not the group's current one (-1: none
    claimed, as an admin tool's or a standalone consumer's commit)."""
    if (
        stored is None
        or stored.broker_id != fence.broker_id
        or stored.broker_epoch != fence.broker_epoch
    ):
        return ErrorCode.NOT_COORDINATOR
    if fence.generation >= 0 and fence.generation != stored.generation:
        return ErrorCode.ILLEGAL_GENERATION
    return ErrorCode.NONE
