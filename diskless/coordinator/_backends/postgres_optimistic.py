"""Optimistic commits on PostgreSQL: planned on rows read without locks, applied to the rows
found when the step lands.

A commit step that locked its rows from its load to its COMMIT would hold about 550 partition
locks through its own planning, on the client, for a group of 800 batches: every other broker
committing to any of those partitions waits that long, so brokers commit one at a time however
many there are. An optimistic commit holds them only while its apply runs on the server.

It rests on one property of the rules (`plan_commit`): no decision about a batch depends on the
partitions' state, only on its producer's entry, the broker's epoch and the object key; the
partitions give the batches their offsets, and their log start, size and running maximum
timestamp only accumulate. So a plan made on partitions that other commits have appended to
since is still right once its offsets move by those appends. The apply
(`diskless_apply_rebased`) locks the partitions the step read, checks that the broker's epoch
and every producer entry the step read are unchanged (each entry by its row's version, its
`xmin`), and moves the batches, the partitions' counters and the new retained batches of the
producer entries it writes by what landed in between; the engine moves the answers the same way
(`Rebase`). If anything the plan decided on has changed, the apply fails with
serialization_failure and the store runs the step again on locked rows, as do steps that are
not plain commits (transactional batches, an object key already known, an unknown partition).

What a commit reads comes from `CommitCache`, what this store's earlier commits read and wrote,
else from a peek (`diskless_peek_commit`): one snapshot, no lock. A broker that is the only one
writing for its producers finds them all there, and commits in one round trip.
"""

from __future__ import annotations

from typing import Final, NamedTuple

import asyncpg
from msgspec.structs import replace

from diskless._types import TopicPartition
from diskless.coordinator._backends.postgres_rows import (
    BATCH_TYPES,
    GATE_LOCK_KEY,
    GATE_OVERLAP,
    PRODUCER_TYPES,
    batch_columns,
    bytea_array,
    columns,
    entry_columns,
    int_array,
    text_array,
)
from diskless.coordinator._backends.sqlite_rows import (
    FILE_STATE_CODES,
    shifted_retained,
)
from diskless.coordinator._rules.commit import ProducerKey
from diskless.coordinator._rules.rows import PartitionState
from diskless.coordinator._store import Changes, Needs, Rebase, Snapshot
from diskless.txn import ProducerEntry

CACHE_ENTRIES_MAX: Final = 25_000
"""Producer entries a `CommitCache` keeps before it starts over: about 30 MB when each retains
five batches. A broker writing for more producers than that peeks more often."""
_XMIN_MASK: Final = (1 << 32) - 1
"""`txid_current()` is the 64-bit transaction id; a row's `xmin` its low 32 bits."""


class PlanOnLockedRows(Exception):
    """A step planned on a peek turned out to need more than an optimistic commit can do: the
    store runs it again on locked rows."""


class Peeked(NamedTuple):
    """What an optimistic commit plans on."""

    partitions: dict[TopicPartition, PartitionState]
    producers: dict[ProducerKey, tuple[ProducerEntry | None, int | None]]
    """Every producer entry the step read, with its row's version; (None, None): absent."""
    broker_epochs: dict[int, int | None]

    def snapshot(self) -> Snapshot:
        return Snapshot(
            partitions=self.partitions,
            producers={k: e for k, (e, _) in self.producers.items() if e is not None},
            broker_epochs={b: e for b, e in self.broker_epochs.items() if e is not None},
        )


PEEK_COMMIT_CALL: Final = (
    "SELECT * FROM diskless_peek_commit($1::text::text[], $2::text::int[], $3::text::int[],"
    " $4::text::bigint[], $5::text::bigint[], $6::text::text[])"
)
APPLY_REBASED_TYPES: Final = (
    *["bigint"] * 2,  # brokers and their epochs
    *["bigint"] * 3,  # producer entries and their versions
    *["bigint"] * 2,  # partitions read and their high watermarks
    *["text", "smallint", "bigint", "bigint", "bigint"],  # files
    *BATCH_TYPES,
    *["bigint"] * 4,  # partitions appended to
    *PRODUCER_TYPES,
)
"""The array parameters of `diskless_apply_rebased`, in order (each sent as a literal)."""
APPLY_REBASED_CALL: Final = (
    "SELECT * FROM diskless_apply_rebased($1, $2, "
    + ", ".join(f"${n}::text::{t}[]" for n, t in enumerate(APPLY_REBASED_TYPES, 3))
    + ")"
)


def is_commit(needs: Needs) -> bool:
    """Whether `needs` are those of a commit an optimistic step can serve: partitions, producer
    entries, brokers and files, nothing else (so no transactional batch)."""
    for name in Needs.__struct_fields__:
        if name not in _COMMIT_NEEDS and getattr(needs, name):
            return False
    return bool(needs.partitions) and bool(needs.files)


_COMMIT_NEEDS: Final = frozenset({"partitions", "producers", "brokers", "files"})


class CommitCache:
    """The rows this store's optimistic commits read and wrote, as of then: never trusted, only a
    way to skip the peek. A plan made on it is checked by its apply, or, when it applies
    nothing (a refusal), made again on locked rows (`PostgresTxn.decided`)."""

    def __init__(self, entries_max: int = CACHE_ENTRIES_MAX) -> None:
        self._entries_max = entries_max
        self._partitions: dict[TopicPartition, PartitionState] = {}
        self._producers: dict[ProducerKey, tuple[ProducerEntry | None, int | None]] = {}
        self._brokers: dict[int, int | None] = {}

    def lookup(self, needs: Needs) -> Peeked | None:
        """What `needs` ask for, if all of it is known."""
        try:
            partitions = {tp: self._partitions[tp] for tp in needs.partitions}
            producers = {
                key: self._producers[key]
                for tp, pid in needs.producers
                for key in ((partitions[tp].key, pid),)
            }
            brokers = {broker: self._brokers[broker] for broker in needs.brokers}
        except KeyError:
            return None
        return Peeked(partitions, producers, brokers)

    def remember(self, known: Peeked) -> None:
        """Remember `known`, keeping of each partition the latest state told. What the cache is
        told comes out of order: a peek answered after a commit of this store landed, two
        commits whose COMMITs answered the other way round. Each producer entry is told with its
        partition as its writer left it, its batches below the high watermark. A partition
        taken back under them would have the producer's next commit plan on it, and the apply
        would move those batches as if planned by that commit (`sqlite_rows.SHIFT_MARK`). An
        entry told late is harmless: the apply finds its version changed."""
        if len(self._producers) + len(known.producers) > self._entries_max:
            self.clear()
        partitions = self._partitions
        for tp, state in known.partitions.items():
            held = partitions.get(tp)
            if held is None or _progress(state) >= _progress(held):
                partitions[tp] = state
        self._producers.update(known.producers)
        self._brokers.update(known.broker_epochs)

    def clear(self) -> None:
        self._partitions.clear()
        self._producers.clear()
        self._brokers.clear()


def _progress(state: PartitionState) -> tuple[int, int, int]:
    """What orders a partition's states in time: its id (a topic created again has a larger
    one), then its high watermark and log start, which only grow."""
    return state.key, state.high_watermark, state.log_start_offset


async def apply_rebased(
    conn: asyncpg.Connection, peeked: Peeked, file_keys: list[str], changes: Changes
) -> tuple[int, dict[int, Rebase]]:
    """Apply a commit planned on `peeked`, moved onto the current state, in one call; returns
    the transaction's id and how every partition the step read moved. Raises
    serialization_failure if the plan no longer holds."""
    slots = {key: slot for slot, key in enumerate(file_keys, 1)}
    files = [
        (FILE_STATE_CODES[f.state], f.size, f.since_ms, f.live_batches)
        for key in file_keys
        if (f := changes.files[key]) is not None
    ]
    batches = batch_columns(changes.batches, [slots[b.object_key] for b in changes.batches])
    was = {s.key: s for s in peeked.partitions.values()}
    partitions = [
        (
            s.key,
            s.high_watermark - was[s.key].high_watermark,
            s.size_bytes - was[s.key].size_bytes,
            s.ts_running_max,
        )
        for s in changes.partitions
    ]
    producer_columns = entry_columns(changes.producers)
    read = list(was.values())
    versions = list(peeked.producers.items())
    brokers = list(peeked.broker_epochs.items())
    xid, moved, deltas, starts = await conn.fetchrow(
        APPLY_REBASED_CALL,
        GATE_LOCK_KEY,
        GATE_OVERLAP,
        int_array([b for b, _ in brokers]),
        int_array([e for _, e in brokers]),
        int_array([key for (key, _), _ in versions]),
        int_array([pid for (_, pid), _ in versions]),
        int_array([version for _, (_, version) in versions]),
        int_array([s.key for s in read]),
        int_array([s.high_watermark for s in read]),
        text_array(file_keys),
        *(int_array(c) for c in columns(files, 4)),
        *(int_array(c) for c in batches),
        *(int_array(c) for c in columns(partitions, 4)),
        *(int_array(c) for c in producer_columns[:7]),
        bytea_array(producer_columns[7]),
    )
    return xid, {k: Rebase(d, start) for k, d, start in zip(moved, deltas, starts, strict=True)}


def moved_answers(peeked: Peeked, moves: dict[int, Rebase]) -> dict[int, Rebase]:
    """The moves of the partitions whose answers change: offsets moved, or a new log start."""
    starts = {s.key: s.log_start_offset for s in peeked.partitions.values()}
    return {
        key: move
        for key, move in moves.items()
        if move.offset_delta or move.log_start_offset != starts[key]
    }


def landed(peeked: Peeked, changes: Changes, moves: dict[int, Rebase], xid: int) -> Peeked:
    """The rows a step read and wrote as it left them, moved where the store put them (its
    transaction `xid` wrote the producer entries it changed)."""
    version = xid & _XMIN_MASK
    planned_on = {s.key: s.high_watermark for s in peeked.partitions.values()}
    changed = {s.key: s for s in changes.partitions}
    partitions = {}
    for tp, loaded in peeked.partitions.items():
        move = moves[loaded.key]
        state = changed.get(loaded.key, loaded)
        partitions[tp] = replace(
            state,
            high_watermark=state.high_watermark + move.offset_delta,
            log_start_offset=move.log_start_offset,
        )
    producers = dict(peeked.producers)
    for (key, pid), entry in changes.producers.items():
        shift = moves[key].offset_delta
        if shift:
            batches = shifted_retained(entry.batches, planned_on[key], shift)
            entry = replace(entry, batches=batches)
        producers[(key, pid)] = (entry, version)
    return Peeked(partitions, producers, dict(peeked.broker_epochs))
