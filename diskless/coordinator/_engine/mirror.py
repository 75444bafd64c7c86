"""The engine's mirrored topics (KIP-1279): claiming a topic for a mirror, the mirrored append,
the mirror's states, and the stop that makes the topic writable again (`_rules.mirror`).

Each is one atomic step. The stop is two: the first fences every mirror process (the epoch
rises, the state is PAUSED), the second, after reading which mirrored producers left a
transaction open, aborts those transactions with markers of the destination's own and records
the topic as STOPPED, in one step that re-checks the mark the first one left.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Final

import msgspec

from diskless._object_keys import commit_too_late
from diskless._types import NO_PRODUCER_ID, ControlType, TopicPartition
from diskless.coordinator._engine.base import EngineBase
from diskless.coordinator._engine.txn import NEXT_PRODUCER_ID
from diskless.coordinator._rules.checks import object_key_taken
from diskless.coordinator._rules.commit import ProducerKey
from diskless.coordinator._rules.files import committed_file
from diskless.coordinator._rules.mirror import (
    MIRROR_BATCHES_MAX,
    MirrorAppendResult,
    MirrorBatch,
    MirrorClaim,
    MirrorMark,
    MirrorOutcome,
    MirrorState,
    marked,
    mirror_mark,
    plan_mirror_append,
)
from diskless.coordinator._rules.rows import AbortedTxn, PartitionState, StoredBatch
from diskless.coordinator._rules.txn import plan_marker
from diskless.coordinator._store import Changes, Needs, Operation, ReadView, Snapshot, StoreStep
from diskless.coordinator._values import CONFIG_VERSION_COUNTER
from diskless.txn import ProducerEntry


class MirrorOperations(EngineBase):
    async def mirror_claim(self, topic: str, name: str) -> MirrorClaim:
        async def claim(db: StoreStep) -> MirrorClaim:
            loaded = await db.load(Needs(topics=(topic,), counters=_VERSION))
            row = loaded.topics.get(topic)
            if row is None:
                return MirrorClaim(None, f"unknown topic {topic!r}")
            mark = mirror_mark(row.config)
            if mark is None:
                tps = [TopicPartition(topic, p) for p in range(row.partition_count)]
                states = (await db.load(Needs(partitions=tps))).partitions.values()
                if any(s.high_watermark > 0 for s in states):
                    return MirrorClaim(None, f"topic {topic!r} holds records of its own")
                new = MirrorMark(name, 1, MirrorState.PREPARING)
            elif mark.name != name:
                return MirrorClaim(None, f"topic {topic!r} is mirrored by {mark.name!r}")
            elif mark.state is MirrorState.STOPPED:
                return MirrorClaim(None, f"mirroring of {topic!r} stopped: it is writable")
            else:
                new = MirrorMark(name, mark.epoch + 1, MirrorState.PREPARING)
            await db.apply(_marking(loaded, topic, new))
            return MirrorClaim(new)

        return await self._write(Operation.MIRROR_STATE, claim)

    async def mirror_set_state(
        self, topic: str, name: str, epoch: int, state: MirrorState
    ) -> MirrorClaim:
        if state not in (MirrorState.MIRRORING, MirrorState.PAUSED):
            raise ValueError(f"a mirror moves itself to mirroring or paused, not {state.value}")

        async def move(db: StoreStep) -> MirrorClaim:
            loaded = await db.load(Needs(topics=(topic,), counters=_VERSION))
            row = loaded.topics.get(topic)
            mark = None if row is None else mirror_mark(row.config)
            if row is None or mark is None or mark.name != name or mark.epoch != epoch:
                return MirrorClaim(mark, f"{name!r} at epoch {epoch} does not hold {topic!r}")
            if mark.state is MirrorState.STOPPED:
                return MirrorClaim(mark, f"mirroring of {topic!r} stopped")
            new = mark._replace(state=state)
            if new != mark:
                await db.apply(_marking(loaded, topic, new))
            return MirrorClaim(new)

        return await self._write(Operation.MIRROR_STATE, move)

    async def mirror_status(self, topic: str) -> MirrorMark | None:
        rows = await self._read(lambda view: view.topics([topic]))
        return mirror_mark(rows[0].config) if rows else None

    async def mirror_append(
        self,
        name: str,
        epoch: int,
        object_key: str,
        object_size: int,
        batches: Sequence[MirrorBatch],
    ) -> list[MirrorAppendResult]:
        batches = list(batches)
        if not 0 < len(batches) <= MIRROR_BATCHES_MAX:
            raise ValueError(f"a mirrored append takes 1..{MIRROR_BATCHES_MAX} batches")
        tps = {b.topic_partition for b in batches}
        pids = {(b.topic_partition, b.producer_id) for b in batches if b.producer_id >= 0}
        aborts = {
            (b.topic_partition, b.producer_id) for b in batches if b.control is ControlType.ABORT
        }
        needs = Needs(
            partitions=tps,
            topics={tp.topic for tp in tps},
            producers=pids,
            other_ongoing=aborts,
            counters=(NEXT_PRODUCER_ID,),
            files=(object_key,),
        )

        async def append(db: StoreStep) -> list[MirrorAppendResult]:
            now = self._clock.now_ms()
            snapshot = await db.load(needs)
            retried: dict[int, tuple[int, int]] = {}
            for b in batches:
                state = snapshot.partitions.get(b.topic_partition)
                if state is not None and b.base_offset < state.high_watermark:
                    low = min(retried.get(state.key, (b.base_offset, 0))[0], b.base_offset)
                    retried[state.key] = (low, len(batches) + 1)
            stored: dict[int, list[StoredBatch]] = {}
            if retried:
                stored = dict((await db.load(Needs(batches=retried))).batches)
            plan = plan_mirror_append(
                object_key,
                object_size,
                name,
                epoch,
                batches,
                snapshot.partitions,
                {name: row.config for name, row in snapshot.topics.items()},
                stored,
                snapshot.producers,
                snapshot.other_ongoing,
                now,
            )
            if not plan.batches:
                return plan.results
            existing = snapshot.files.get(object_key)
            conflict = object_key_taken(
                object_key, None if existing is None else existing.state
            ) or commit_too_late(
                object_key, self._bounds.object_prefix, now, self._bounds.commit_age_max_ms
            )
            if conflict is not None:
                refused = MirrorAppendResult(MirrorOutcome.OBJECT_REFUSED, message=conflict)
                return [refused] * len(batches)
            counter = snapshot.counters.get(NEXT_PRODUCER_ID, 0)
            await db.apply(
                Changes(
                    files={object_key: committed_file(object_size, len(plan.batches), now)},
                    batches=plan.batches,
                    partitions=list(plan.partitions.values()),
                    producers=plan.producers,
                    ongoing_opened=plan.opened,
                    ongoing_closed=plan.closed,
                    aborted=plan.aborted,
                    counters=(
                        {NEXT_PRODUCER_ID: plan.producer_id_max + 1}
                        if plan.producer_id_max >= counter
                        else {}
                    ),
                )
            )
            return plan.results

        return await self._write(Operation.MIRROR_APPEND, append, outcome_unknown_on_failure=True)

    async def mirror_stop(self, topic: str, name: str) -> MirrorClaim:
        async def fence(db: StoreStep) -> MirrorClaim:
            loaded = await db.load(Needs(topics=(topic,), counters=_VERSION))
            row = loaded.topics.get(topic)
            mark = None if row is None else mirror_mark(row.config)
            if row is None or mark is None or mark.name != name:
                return MirrorClaim(mark, f"{topic!r} is not mirrored by {name!r}")
            if mark.state is MirrorState.STOPPED:
                return MirrorClaim(mark)
            new = MirrorMark(name, mark.epoch + 1, MirrorState.PAUSED)
            await db.apply(_marking(loaded, topic, new))
            return MirrorClaim(new)

        fenced = await self._write(Operation.MIRROR_STATE, fence)
        mark = fenced.mark
        if fenced.refusal or mark is None or mark.state is MirrorState.STOPPED:
            return fenced
        mirrored, open_txns = await self._read(lambda view: _producers(view, topic))

        async def stop(db: StoreStep) -> MirrorClaim:
            now = self._clock.now_ms()
            snapshot = await db.load(
                Needs(
                    topics=(topic,),
                    partitions={tp for tp, _ in mirrored},
                    producers=mirrored,
                    counters=_VERSION,
                )
            )
            row = snapshot.topics.get(topic)
            current = None if row is None else mirror_mark(row.config)
            if row is None or current != mark:
                return MirrorClaim(current, f"{topic!r} changed while stopping: stop again")
            others = await db.load(Needs(other_ongoing=open_txns))
            markers: list[StoredBatch] = []
            states: dict[TopicPartition, PartitionState] = {}
            entries: dict[ProducerKey, ProducerEntry] = {}
            closed: list[tuple[int, int]] = []
            aborted: list[tuple[int, AbortedTxn]] = []
            for tp, pid in open_txns:
                state = states.get(tp) or snapshot.partitions.get(tp)
                entry = None if state is None else snapshot.producers.get((state.key, pid))
                if state is None or entry is None or entry.current_txn_first_offset is None:
                    continue
                plan = plan_marker(
                    state,
                    entry,
                    None,
                    pid,
                    entry.producer_epoch,
                    entry.producer_epoch + 1,
                    False,
                    entry.coordinator_epoch,
                    now,
                    others.other_ongoing.get((state.key, pid)),
                )
                if plan.marker is None:
                    continue
                assert plan.state is not None and plan.entry is not None
                markers.append(plan.marker)
                states[tp] = plan.state
                entries[(state.key, pid)] = plan.entry
                if plan.closed_txn_first_offset is not None:
                    closed.append((state.key, plan.closed_txn_first_offset))
                if plan.aborted is not None:
                    aborted.append((state.key, plan.aborted))
            # The MIRROR_PID_RESET barrier: every mirrored producer's state is forgotten (stored
            # as expired), so a destination producer holding one of their ids (a broker may
            # have reserved it before it was mirrored) starts afresh.
            expired = now - self._expiration_ms
            for tp, pid in mirrored:
                state = snapshot.partitions.get(tp)
                key = (-1, pid) if state is None else (state.key, pid)
                entry = entries.get(key) or snapshot.producers.get(key)
                if entry is not None and entry.current_txn_first_offset is None:
                    entries[key] = msgspec.structs.replace(entry, last_update_ms=expired)
            stopped = mark._replace(state=MirrorState.STOPPED)
            await db.apply(
                msgspec.structs.replace(
                    _marking(snapshot, topic, stopped),
                    batches=markers,
                    partitions=list(states.values()),
                    producers=entries,
                    ongoing_closed=closed,
                    aborted=aborted,
                )
            )
            return MirrorClaim(stopped)

        return await self._write(Operation.MIRROR_STOP, stop)


_VERSION: Final = (CONFIG_VERSION_COUNTER,)


def _marking(snapshot: Snapshot, topic: str, mark: MirrorMark) -> Changes:
    """The topic carrying `mark`, and the config version raised, so that every broker drops
    what it cached of the topic (its produce path refuses clients' batches by the mark)."""
    row = snapshot.topics[topic]
    version = snapshot.counters.get(CONFIG_VERSION_COUNTER, 0) + 1
    return Changes(
        topic_configs={topic: marked(row.config, mark)}, counters={CONFIG_VERSION_COUNTER: version}
    )


async def _producers(
    view: ReadView, topic: str
) -> tuple[list[tuple[TopicPartition, int]], list[tuple[TopicPartition, int]]]:
    """(partition, producer id) of every producer with state on the topic, and of those among
    them with an open transaction."""
    rows = await view.topics([topic])
    if not rows:
        return [], []
    tps = [TopicPartition(topic, p) for p in range(rows[0].partition_count)]
    every, open_txns = [], []
    for tp, state in zip(tps, await view.partitions(tps), strict=True):
        if state is None:
            continue
        for entry in await view.producers_of(state.key):
            if entry.producer_id == NO_PRODUCER_ID:
                continue
            every.append((tp, entry.producer_id))
            if entry.current_txn_first_offset is not None:
                open_txns.append((tp, entry.producer_id))
    return every, open_txns
