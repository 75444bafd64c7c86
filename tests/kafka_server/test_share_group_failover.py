"""Acceptance: a share group's membership survives the SIGKILL of its owner's process, with real
share consumers and real broker processes over a PostgreSQL batch coordinator.

Broker processes 0 and 1 serve a 6-partition topic; three librdkafka `ShareConsumer`s of one
share group split it. The process of the group's owner (as the batch coordinator records it) is
SIGKILLed; the other process takes the group over once the dead one's registration expired,
and loads its stored state: the same three members, each with its member epoch and partitions,
are served on past their session timeout there (a member whose heartbeats the new owner did not
take would be removed), with no new group epoch (a member that left, or joined anew, would bump
it and move partitions). Then one member leaves, and the two others, heartbeating at the new
owner with the epochs they had, take its partitions. Only then is the dead process restarted.
"""

from __future__ import annotations

import asyncio
import threading
import time
from pathlib import Path
from typing import Final

from confluent_kafka import ShareConsumer

from diskless._types import GroupOwnership
from diskless.coordinator import PostgresBatchCoordinator
from diskless.kafka_server._coordination.share_group_state import ShareSnapshot, decode_group_state
from testkit.postgres import database_dsn
from testkit.processes import BrokerProcess, bootstrap

TOPIC: Final = "jobs"
PARTITIONS: Final = 6
GROUP: Final = "workers"
WAIT_S: Final = 90.0
SESSION_MS: Final = 8_000


async def _stored(dsn: str) -> tuple[ShareSnapshot | None, GroupOwnership | None]:
    coordinator = PostgresBatchCoordinator(dsn)
    try:
        state = await coordinator.group_state(GROUP)
        owner = await coordinator.group_ownership(GROUP)
    finally:
        await coordinator.close()
    decoded = None if state is None else decode_group_state(state)
    assert decoded is None or isinstance(decoded, ShareSnapshot), decoded
    return decoded, owner


def _settled(snapshot: ShareSnapshot | None, members: int) -> bool:
    """`members` members, each at the assignment epoch, holding every partition between them."""
    if snapshot is None or len(snapshot.members) != members:
        return False
    held = sorted(tp.partition for m in snapshot.members for tp in m.assigned)
    epochs = {m.member_epoch for m in snapshot.members}
    return epochs == {snapshot.assignment_epoch} and held == list(range(PARTITIONS))


def _members(
    servers: str, stops: list[threading.Event], polls: list[int]
) -> list[threading.Thread]:
    def run(index: int) -> None:
        consumer = ShareConsumer({"bootstrap.servers": servers, "group.id": GROUP})
        consumer.subscribe([TOPIC])
        while not stops[index].is_set():
            try:
                consumer.poll(0.2)
            except Exception:  # no share fetch is needed to be a member
                time.sleep(0.2)
            polls[index] += 1
        consumer.close()

    threads = [threading.Thread(target=run, args=(i,), daemon=True) for i in range(3)]
    for thread in threads:
        thread.start()
    return threads


async def test_share_members_keep_their_epochs_and_partitions_when_the_owner_dies(
    tmp_path: Path,
) -> None:
    dsn = database_dsn(tmp_path, "cluster")
    options = [
        "--coordinator", dsn, "--data-dir", str(tmp_path / "data"),
        "--topic", f"{TOPIC}:{PARTITIONS}", "--log-level", "INFO",
        "--override", "group.share.heartbeat.interval.ms=300",
        "--override", f"group.share.session.timeout.ms={SESSION_MS}",
        # The group moves once the dead process's registration expired: keep that short.
        "--server-option", "broker_session_timeout_ms=3000",
    ]  # fmt: skip
    brokers = [BrokerProcess(i, 2, options, tmp_path / f"broker-{i}.log") for i in range(2)]
    stops = [threading.Event() for _ in range(3)]
    polls = [0, 0, 0]
    threads: list[threading.Thread] = []
    try:
        for broker in brokers:
            await asyncio.to_thread(broker.start)
        threads = _members(bootstrap(brokers), stops, polls)
        deadline = time.monotonic() + WAIT_S
        while not _settled((before := await _stored(dsn))[0], 3):
            assert time.monotonic() < deadline, f"the group never settled: {before}"
            await asyncio.sleep(0.3)
        snapshot, owner = before
        assert snapshot is not None and owner is not None

        victim = brokers[owner.broker_id]
        await asyncio.to_thread(victim.kill)
        deadline = time.monotonic() + WAIT_S
        while True:
            after, moved = await _stored(dsn)
            if moved is not None and moved.broker_id != owner.broker_id:
                break
            assert time.monotonic() < deadline, "the group never moved"
            await asyncio.sleep(0.3)
        served = sum(polls)
        await asyncio.sleep(SESSION_MS / 1000 * 1.5)  # beyond a session at the new owner
        after, _ = await _stored(dsn)
        stops[0].set()  # one member leaves: the new owner serves the group on
        await asyncio.to_thread(threads[0].join, 30)
        deadline = time.monotonic() + WAIT_S
        while not _settled((left := await _stored(dsn))[0], 2):
            assert time.monotonic() < deadline, f"the others never took its partitions: {left}"
            await asyncio.sleep(0.3)
        await asyncio.to_thread(victim.start)
    finally:
        for stop in stops:
            stop.set()
        for thread in threads:
            await asyncio.to_thread(thread.join, 30)
        for broker in brokers:
            await asyncio.to_thread(broker.kill)
    print(f"owner {owner} -> {moved}; before {snapshot}; after {after}")
    assert sum(polls) > served, "the members kept polling"
    assert after is not None and _settled(after, 3)
    assert after.group_epoch == snapshot.group_epoch, "no member left or joined again"
    assert {m.member_id: (m.member_epoch, m.assigned) for m in after.members} == {
        m.member_id: (m.member_epoch, m.assigned) for m in snapshot.members
    }
    remaining = left[0]
    assert remaining is not None and remaining.group_epoch == snapshot.group_epoch + 1
    assert {m.member_id for m in remaining.members} < {m.member_id for m in snapshot.members}
