"""A consumer group of real librdkafka consumers, watched from outside, and the checks of what
Kafka promises a group: one owner per partition, committed offsets that only move forward,
every record consumed, and a partition resumed exactly at its committed offset.

- `Member`: a consumer in a thread of its own (`enable.auto.commit=False`) that commits what it
  consumed synchronously after every batch, and logs, in the order it saw them, its assignment
  changes (on_assign, on_revoke, on_lost) and every record it consumed.
- `Commits`: every offset commit the members attempted, with when it was sent and when it
  returned: those answered as stored, and those whose answer never came (`Commits.uncertain`),
  which the group may have stored. `check_resumes` holds a member that resumes a partition past
  its last answered commit to one of the latter.
- `Observer`: polls the batch coordinator (opened in the test, on the brokers' database) for the
  group's committed offsets and its ownership (owner incarnation and generation), and, for a
  group of the consumer protocol (KIP-848, `group.protocol=consumer`), its stored state:
  `check_owned_once` holds that no partition is ever owned by two members, and that member and
  group epochs never go back.
"""

from __future__ import annotations

import asyncio
import collections
import threading
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Final

from confluent_kafka import Consumer, KafkaError, KafkaException, Producer
from confluent_kafka import TopicPartition as CkTopicPartition

from diskless._types import GroupOwnership, TopicPartition
from diskless.coordinator import BatchCoordinator
from diskless.kafka_server._coordination.consumer_group_state import Snapshot, decode_snapshot
from testkit.processes import BrokerProcess

OBSERVE_INTERVAL_S: Final = 0.05


@dataclass(frozen=True)
class Event:
    """What one member saw: an assignment change ("assign", "revoke", "lost": the partitions),
    a consumed record ("record": its partition, offset and value) or its end ("close")."""

    at: float
    kind: str
    partitions: tuple[int, ...] = ()
    offset: int = -1
    data: bytes = b""


@dataclass(frozen=True)
class Commit:
    member: str
    sent: float
    done: float
    offsets: Mapping[int, int]
    """Partition -> offset: those answered as stored, or (an uncertain commit) those whose
    answer never came."""
    error: str = ""
    """Why an uncertain commit's answer did not come (the client's error)."""


@dataclass(frozen=True)
class Resume:
    """A partition resumed past its last answered commit, at the offset of a commit whose
    answer was lost: it was stored after all."""

    member: str
    partition: int
    offset: int
    answered: int
    """The last answered commit's offset (0: none)."""
    commit: Commit
    """The uncertain commit that made `offset`."""


@dataclass
class Commits:
    lock: threading.Lock = field(default_factory=threading.Lock)
    done: list[Commit] = field(default_factory=list)
    failed: list[str] = field(default_factory=list)
    uncertain: list[Commit] = field(default_factory=list)
    """Every commit attempted whose answer, for some of its partitions, did not come back as
    stored: the client raised (its broker died, the request timed out, or a retry of a request
    whose first answer was lost was refused), or answered those partitions with an error after
    retrying. The group may have stored them or not, so a member may resume at their offsets,
    and only at those past its last answered commit."""

    def summary(self) -> str:
        """How many commits were answered as stored, how many failed, and some of the reasons."""
        reasons = sorted({f.split(": ", 1)[1] for f in self.failed})[:4]
        return f"{len(self.done)} commits, {len(self.failed)} failed (e.g. {reasons})"

    def add(self, commit: Commit) -> None:
        with self.lock:
            self.done.append(commit)

    def maybe(self, commit: Commit) -> None:
        with self.lock:
            self.uncertain.append(commit)

    def fail(self, why: str) -> None:
        with self.lock:
            self.failed.append(why)


class Member:
    """One consumer of the group, in a thread of its own."""

    def __init__(
        self, name: str, bootstrap: str, config: Mapping[str, object], commits: Commits
    ) -> None:
        self.name = name
        self.events: list[Event] = []
        self.errors: list[str] = []
        self.failure: BaseException | None = None
        self._config = {
            "bootstrap.servers": bootstrap,
            "client.id": name,
            "enable.auto.commit": False,
            "auto.offset.reset": "earliest",
            **config,
        }
        self._commits = commits
        self.incremental = config.get("group.protocol") == "consumer"
        """The consumer protocol assigns and revokes incrementally: an assignment adds."""
        self._stop = threading.Event()
        self.started = time.monotonic()
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)

    def start(self, topic: str) -> None:
        self._topic = topic
        self.started = time.monotonic()
        self._thread.start()

    def stop(self, timeout_s: float = 60.0) -> None:
        """Close the consumer (it leaves the group); its failure, if any, is `failure`."""
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(timeout_s)
        assert not self._thread.is_alive(), f"{self.name} did not stop"

    def holding(self) -> set[int]:
        """The partitions assigned to this member, as it last learnt."""
        held: set[int] = set()
        for event in list(self.events):
            if event.kind == "assign" and self.incremental:
                held |= set(event.partitions)
            elif event.kind == "assign":
                held = set(event.partitions)  # eager protocol: the whole assignment
            elif event.kind in ("revoke", "lost"):
                held -= set(event.partitions)
            elif event.kind == "close":
                held = set()
        return held

    def consumed(self) -> int:
        return sum(1 for e in list(self.events) if e.kind == "record")

    def _note(self, kind: str, partitions: Sequence[CkTopicPartition]) -> None:
        self.events.append(
            Event(time.monotonic(), kind, tuple(sorted(p.partition for p in partitions)))
        )

    def _run(self) -> None:
        try:
            consumer = Consumer(self._config)
            try:
                self._consume(consumer)
            finally:
                consumer.close()  # revokes (logged) and leaves the group
                self.events.append(Event(time.monotonic(), "close"))
        except BaseException as e:  # reported by stop()
            self.failure = e

    def _consume(self, consumer: Consumer) -> None:
        consumer.subscribe(
            [self._topic],
            on_assign=lambda _, parts: self._note("assign", parts),
            on_revoke=lambda _, parts: self._note("revoke", parts),
            on_lost=lambda _, parts: self._note("lost", parts),
        )
        while not self._stop.is_set():
            positions: dict[int, int] = {}
            for message in consumer.consume(200, 0.2):
                error = message.error()
                if error is not None:
                    self.errors.append(error.str())  # transport errors while a broker restarts
                    continue
                partition, offset = message.partition(), message.offset()
                assert partition is not None and offset is not None
                self.events.append(
                    Event(time.monotonic(), "record", (partition,), offset, message.value() or b"")
                )
                positions[partition] = offset + 1
            if positions:
                self._commit(consumer, positions)

    def _commit(self, consumer: Consumer, positions: Mapping[int, int]) -> None:
        sent = time.monotonic()
        offsets = [CkTopicPartition(self._topic, p, o) for p, o in sorted(positions.items())]
        try:
            answered = consumer.commit(offsets=offsets, asynchronous=False)
        except KafkaException as e:  # a rebalance, or the coordinator moving: Kafka's retriables
            why = e.args[0].str()
            self._commits.fail(f"{self.name}: {why}")
            # librdkafka retries a request whose answer was lost: whatever answer it then
            # raises, an earlier attempt may have been stored.
            self._commits.maybe(Commit(self.name, sent, time.monotonic(), dict(positions), why))
            return
        assert answered is not None
        done = {tp.partition: tp.offset for tp in answered if tp.error is None}
        refused = {tp.partition: positions[tp.partition] for tp in answered if tp.error}
        for tp in answered:
            if tp.error is not None:
                self._commits.fail(f"{self.name}: partition {tp.partition}: {tp.error.str()}")
        returned = time.monotonic()
        self._commits.add(Commit(self.name, sent, returned, done))
        if refused:
            why = "; ".join(tp.error.str() for tp in answered if tp.error is not None)
            self._commits.maybe(Commit(self.name, sent, returned, refused, why))


class KeepProducing:
    """An idempotent producer writing `producer:<sequence>` round-robin until stopped."""

    def __init__(self, bootstrap: str, topic: str, partitions: int, interval_s: float) -> None:
        self.acked: list[int] = []
        self.sent = 0
        self.failures: list[str] = []
        self._producer = Producer(
            {"bootstrap.servers": bootstrap, "enable.idempotence": True, "linger.ms": 5}
        )
        self._topic, self._partitions, self._interval_s = topic, partitions, interval_s
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="producer", daemon=True)
        self._thread.start()

    def _delivered(self, error: KafkaError | None, sequence: int) -> None:
        if error is None:
            self.acked.append(sequence)
        else:
            self.failures.append(error.str())

    def _run(self) -> None:
        while not self._stop.is_set():
            sequence = self.sent
            self._producer.produce(
                self._topic,
                value=f"producer:{sequence}".encode(),
                partition=sequence % self._partitions,
                on_delivery=lambda e, _, s=sequence: self._delivered(e, s),
            )
            self.sent += 1
            self._producer.poll(self._interval_s)

    def stop(self) -> None:
        """Stop producing; every record sent must then be acknowledged."""
        self._stop.set()
        self._thread.join(30)
        assert not self._thread.is_alive()
        assert self._producer.flush(60) == 0, "records never delivered"
        assert not self.failures, self.failures[:3]
        assert sorted(self.acked) == list(range(self.sent))

    def halt(self) -> None:
        self._stop.set()


class Observer:
    """Polls the group's committed offsets and ownership in the batch coordinator, from a
    thread with an event loop of its own."""

    def __init__(
        self, open_coordinator: Callable[[], BatchCoordinator], group: str, topic: str
    ) -> None:
        self.offsets: list[tuple[float, dict[int, int]]] = []
        self.owners: list[tuple[float, GroupOwnership | None]] = []
        self.states: list[tuple[float, Snapshot]] = []
        """The consumer-protocol group's stored state, each time it changed."""
        self._open, self._group, self._topic = open_coordinator, group, topic
        self._stop = threading.Event()
        self.failure: BaseException | None = None
        self._thread = threading.Thread(target=self._run, name="observer", daemon=True)
        self._thread.start()

    def owner(self) -> GroupOwnership | None:
        return self.owners[-1][1] if self.owners else None

    def committed(self) -> dict[int, int]:
        return self.offsets[-1][1] if self.offsets else {}

    def _run(self) -> None:
        try:
            asyncio.run(self._poll())
        except BaseException as e:
            self.failure = e

    async def _poll(self) -> None:
        coordinator = self._open()
        try:
            while not self._stop.is_set():
                offsets = await coordinator.fetch_offsets(self._group)
                owner = await coordinator.group_ownership(self._group)
                now = time.monotonic()
                self.offsets.append(
                    (
                        now,
                        {
                            tp.partition: committed.offset
                            for tp, committed in offsets.items()
                            if tp.topic == self._topic
                        },
                    )
                )
                self.owners.append((now, owner))
                state = await coordinator.group_state(self._group)
                if state is not None:
                    snapshot = decode_snapshot(state)
                    if not self.states or self.states[-1][1] != snapshot:
                        self.states.append((now, snapshot))
                await asyncio.sleep(OBSERVE_INTERVAL_S)
        finally:
            await coordinator.close()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(30)
        assert not self._thread.is_alive()
        if self.failure is not None:
            raise self.failure


# --- the checks ---------------------------------------------------------------------------------


@dataclass
class Episode:
    """One stretch of a member holding a partition: from its assignment to its revocation."""

    member: str
    partition: int
    start: float
    end: float
    records: list[Event] = field(default_factory=list)


def episodes(members: Iterable[Member], run_end: float) -> list[Episode]:
    found: list[Episode] = []
    for member in members:
        open_: dict[int, Episode] = {}
        for event in member.events:
            if event.kind == "assign":
                for partition in event.partitions:
                    if partition not in open_:
                        open_[partition] = Episode(member.name, partition, event.at, run_end)
            elif event.kind in ("revoke", "lost"):
                for partition in event.partitions:
                    if (episode := open_.pop(partition, None)) is not None:
                        episode.end = event.at
                        found.append(episode)
            elif event.kind == "close":
                for episode in open_.values():
                    episode.end = event.at
                    found.append(episode)
                open_.clear()
            elif event.kind == "record":
                episode = open_.get(event.partitions[0])
                assert episode is not None, f"{member.name} consumed {event} unassigned"
                episode.records.append(event)
        found.extend(open_.values())
    return found


def longest_double_ownership(found: Sequence[Episode]) -> tuple[float, str]:
    """The longest time two members held one partition at once, and who."""
    longest, who = 0.0, ""
    by_partition: dict[int, list[Episode]] = collections.defaultdict(list)
    for episode in found:
        by_partition[episode.partition].append(episode)
    for partition, held in by_partition.items():
        for i, a in enumerate(held):
            for b in held[i + 1 :]:
                if a.member == b.member:
                    continue
                overlap = min(a.end, b.end) - max(a.start, b.start)
                if overlap > longest:
                    longest, who = overlap, f"partition {partition}: {a.member} and {b.member}"
    return longest, who


def check_resumes(
    found: Sequence[Episode], commits: Sequence[Commit], uncertain: Sequence[Commit] = ()
) -> list[Resume]:
    """Each episode reads its partition without a gap, from the group's committed offset:
    at least every offset committed before the assignment (none is lost), and one that a
    commit sent before its first record made (0 if none: auto.offset.reset=earliest). So a
    record is consumed twice only when it was consumed and not yet committed when its
    partition moved: Kafka's at-least-once.

    An episode that resumes past the last commit answered before its first record must resume
    at the offset of a commit sent before then: one answered as stored later, or one whose
    answer was lost (`uncertain`), which the group stored after all. The latter are returned,
    each with that commit; a resume past the last answered commit that no commit made is a
    failure."""
    resumed_at_lost: list[Resume] = []
    for episode in found:
        if not episode.records:
            continue
        first = episode.records[0]
        offsets = [r.offset for r in episode.records]
        assert offsets == list(range(first.offset, first.offset + len(offsets))), (
            f"{episode.member} partition {episode.partition}: a gap in {offsets[:5]}..."
        )
        p = episode.partition
        before = [c.offsets[p] for c in commits if p in c.offsets and c.done < episode.start]
        floor = max(before, default=0)
        assert first.offset >= floor, (
            f"{episode.member} resumed partition {p} at {first.offset}, below {floor} committed"
        )
        answered = [c for c in commits if p in c.offsets and c.done < first.at]
        last_answered = max((c.offsets[p] for c in answered), default=0)
        if first.offset <= last_answered:
            candidates = {0} | {
                c.offsets[p] for c in (*commits, *uncertain) if p in c.offsets and c.sent < first.at
            }
            assert first.offset in candidates, (
                f"{episode.member} resumed partition {p} at {first.offset}, never committed"
            )
            continue
        if any(c.offsets.get(p) == first.offset and c.sent < first.at for c in commits):
            continue  # a commit in flight then, answered as stored since
        lost = [c for c in uncertain if c.offsets.get(p) == first.offset and c.sent < first.at]
        assert lost, (
            f"{episode.member} resumed partition {p} at {first.offset}, past its last answered"
            f" commit ({last_answered}), and no commit whose answer was lost made that offset"
            f" (those of partition {p}:"
            f" {sorted(c.offsets[p] for c in uncertain if p in c.offsets)[-5:]})"
        )
        resumed_at_lost.append(
            Resume(episode.member, p, first.offset, last_answered, max(lost, key=lambda c: c.sent))
        )
    return resumed_at_lost


def check_forward(observed: Sequence[tuple[float, Mapping[int, int]]]) -> None:
    """No committed offset ever moves backwards."""
    last: dict[int, int] = {}
    for at, offsets in observed:
        for partition, offset in offsets.items():
            assert offset >= last.get(partition, 0), (
                f"partition {partition}: committed offset went back from"
                f" {last[partition]} to {offset} at {at:.3f}"
            )
            last[partition] = offset


def owners_in_order(
    observed: Sequence[tuple[float, GroupOwnership | None]],
) -> list[tuple[float, int, int, int]]:
    """The successive owners as observed: (first seen at, broker id, epoch, generation)."""
    owners: list[tuple[float, int, int, int]] = []
    for at, owner in observed:
        if owner is None:
            continue
        if not owners or owners[-1][1:3] != (owner.broker_id, owner.broker_epoch):
            owners.append((at, owner.broker_id, owner.broker_epoch, owner.generation))
    return owners


def check_generations(observed: Sequence[tuple[float, GroupOwnership | None]]) -> None:
    """Once recorded, the ownership stays, and its generation never goes back."""
    generation, seen = -1, False
    for at, owner in observed:
        if owner is None:
            assert not seen, f"the group lost its ownership record at {at:.3f}"
            continue
        seen = True
        assert owner.generation >= generation, f"generation {owner.generation} after {generation}"
        generation = owner.generation


def generation_at(observed: Sequence[tuple[float, GroupOwnership | None]], at: float) -> int:
    generation = 0
    for seen, owner in observed:
        if seen > at:
            break
        if owner is not None:
            generation = owner.generation
    return generation


def by_value(members: Iterable[Member]) -> collections.Counter[bytes]:
    return collections.Counter(e.data for m in members for e in m.events if e.kind == "record")


def by_offset(members: Iterable[Member]) -> collections.Counter[tuple[int, int]]:
    return collections.Counter(
        (e.partitions[0], e.offset) for m in members for e in m.events if e.kind == "record"
    )


def check_owned_once(states: Sequence[tuple[float, Snapshot]]) -> None:
    """The consumer protocol's promise, in every state the group stored: no partition owned
    (assigned, or not yet revoked) by two members; and the group epoch, and each member's epoch
    while it stays in the group, never go back."""
    group_epoch = 0
    epochs: dict[str, int] = {}
    for at, state in states:
        owners: dict[TopicPartition, str] = {}
        for member in state.members:
            for tp in (*member.assigned, *member.revoking):
                assert tp not in owners, (
                    f"{tp} owned by {owners[tp]} and {member.member_id} at {at:.3f}"
                    f" (group epoch {state.group_epoch})"
                )
                owners[tp] = member.member_id
        assert state.group_epoch >= group_epoch, f"group epoch went back at {at:.3f}"
        group_epoch = state.group_epoch
        present = {m.member_id: m.member_epoch for m in state.members if m.member_epoch >= 0}
        for member_id, epoch in present.items():
            assert epoch >= epochs.get(member_id, 0), f"{member_id}'s epoch went back at {at:.3f}"
        epochs = present


# --- a run against broker processes: waiting for it, ending it, what every run checks -----------
WAIT_TIMEOUT_S: Final = 60.0


def wait_until(
    what: str,
    done: Callable[[], bool],
    members: Sequence[Member],
    timeout_s: float = WAIT_TIMEOUT_S,
) -> None:
    deadline = time.monotonic() + timeout_s
    while not done():
        holdings = {m.name: sorted(m.holding()) for m in members}
        assert time.monotonic() < deadline, f"timed out waiting until {what}: held {holdings}"
        time.sleep(0.1)


def progressing(
    members: Sequence[Member], observer: Observer, partitions: int
) -> Callable[[], bool]:
    """Every partition held by exactly one of `members`, each holding some; every member consumed
    and the group committed on every partition since."""
    consumed = [m.consumed() for m in members]
    committed = observer.committed()

    def done() -> bool:
        held = [m.holding() for m in members]
        now = observer.committed()
        return (
            sorted(p for h in held for p in h) == list(range(partitions))
            and all(held)
            and all(m.consumed() > c for m, c in zip(members, consumed, strict=True))
            and all(now.get(p, 0) > committed.get(p, 0) for p in range(partitions))
        )

    return done


def end_offsets(produced: int, partitions: int) -> dict[int, int]:
    """Each partition's end: `KeepProducing` wrote sequence s to partition s % partitions."""
    return {p: len(range(p, produced, partitions)) for p in range(partitions)}


def stop_all(
    members: Iterable[Member],
    producer: KeepProducing | None,
    observer: Observer | None,
    brokers: Iterable[BrokerProcess],
) -> None:
    for member in members:
        member.stop()
    if producer is not None:
        producer.halt()
    if observer is not None:
        observer.stop()
    for broker in brokers:
        broker.kill()


def print_group_logs(brokers: Iterable[BrokerProcess], group: str) -> None:
    for broker in brokers:
        lines = broker.log_tail(10_000).splitlines()
        print(f"broker {broker.broker_id}:", *[line for line in lines if group in line], sep="\n  ")


def raise_member_failure(members: Iterable[Member]) -> None:
    for member in members:
        if member.failure is not None:
            raise member.failure


def check_all_consumed(members: Iterable[Member], sent: int) -> None:
    consumed = by_value(members)
    produced = {f"producer:{s}".encode() for s in range(sent)}
    assert consumed.keys() == produced, (
        f"{len(produced - consumed.keys())} records never consumed,"
        f" {len(consumed.keys() - produced)} never produced"
    )
