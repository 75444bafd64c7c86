"""Property test: share-partition states (KIP-932) against a model of KIP-932's state machine.

Hypothesis draws random members fetching (acquiring) from two partitions at once while records
arrive, acknowledging what they hold (every type, one per batch or one per offset) and what they
do not, locks running out on a virtual clock, members leaving, the log start moving, and the
coordinator restarting (its SQLite file reopened). The model keeps one entry per record and
applies Kafka's rules record by record, with none of the ranges the coordinator keeps. After
every call the coordinator's answer and its whole state must be the model's: so at no moment is
a record held by two members, no acknowledgement is lost (across restarts too), and delivery
counts and archiving are Kafka's. The seed is printed (SHARE_ORACLE_SEED replays it), and a
failure prints the example and its reproduction blob.
"""

from __future__ import annotations

import asyncio
import os
import random
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

import hypothesis
import hypothesis.strategies as st
import pytest

from diskless import ErrorCode, ManualClock, TopicPartition
from diskless.coordinator import (
    AcknowledgeBatch,
    AcknowledgeType,
    AcquiredRange,
    BatchCoordinator,
    RecordState,
    ShareFetchPartition,
    ShareLimits,
)
from diskless.coordinator._rules.share import expire
from testkit.backends import open_coordinator

SEED: Final = int(os.environ.get("SHARE_ORACLE_SEED", random.randrange(1 << 32)))
LIMITS: Final = ShareLimits(delivery_count_limit=2, lock_duration_ms=1_000, max_record_locks=12)
GROUP: Final = "g"
PARTITIONS: Final = (TopicPartition("t", 0), TopicPartition("t", 1))
MEMBERS: Final = ("m0", "m1", "m2")


@dataclass
class Record:
    state: RecordState = RecordState.AVAILABLE
    count: int = 0
    member: str = ""
    deadline: int = 0


class ModelPartition:
    """One share-partition, record by record, as KIP-932 describes it."""

    def __init__(self) -> None:
        self.records: dict[int, Record] = {}
        self.start = 0
        self.end = 0
        self.high_watermark = 0
        self.log_start = 0

    def settle(self) -> None:
        while self.start < self.end and self.records[self.start].state in (
            RecordState.ACKNOWLEDGED,
            RecordState.ARCHIVED,
        ):
            del self.records[self.start]
            self.start += 1

    def expire(self, now: int) -> None:
        for r in self.records.values():
            if r.state is RecordState.ACQUIRED and r.deadline <= now:
                self.give_back(r)
        self.settle()

    @staticmethod
    def give_back(r: Record) -> None:
        limited = r.count >= LIMITS.delivery_count_limit
        r.state = RecordState.ARCHIVED if limited else RecordState.AVAILABLE
        r.member, r.deadline = "", 0

    def trim(self) -> None:
        if self.log_start > self.start:
            for offset in range(self.start, min(self.log_start, self.end)):
                del self.records[offset]
            self.start = self.log_start
            self.end = max(self.end, self.log_start)
            self.settle()

    def acquire(self, member: str, n: int, now: int) -> list[int]:
        self.trim()
        self.expire(now)
        taken = []
        for offset in range(self.start, self.end):
            r = self.records[offset]
            if len(taken) < n and r.state is RecordState.AVAILABLE:
                assert r.member == ""  # never held by another member while available
                r.state, r.count, r.member = RecordState.ACQUIRED, r.count + 1, member
                r.deadline = now + LIMITS.lock_duration_ms
                taken.append(offset)
        while (
            len(taken) < n
            and self.end < self.high_watermark
            and self.end - self.start < LIMITS.max_record_locks
        ):
            self.records[self.end] = Record(
                RecordState.ACQUIRED, 1, member, now + LIMITS.lock_duration_ms
            )
            taken.append(self.end)
            self.end += 1
        self.settle()
        return taken

    def acknowledge(self, member: str, offsets: list[tuple[int, int]], now: int) -> ErrorCode:
        """(offset, type) pairs, in ascending order: all applied, or none."""
        self.expire(now)
        for offset, _ in offsets:
            if offset >= self.end:
                return ErrorCode.INVALID_RECORD_STATE
            if offset < self.start:
                continue
            r = self.records[offset]
            if r.state is not RecordState.ACQUIRED or r.member != member:
                return ErrorCode.INVALID_RECORD_STATE
        for offset, kind in offsets:
            if offset < self.start:
                continue
            r = self.records[offset]
            if kind == AcknowledgeType.ACCEPT:
                r.state, r.member, r.deadline = RecordState.ACKNOWLEDGED, "", 0
            elif kind == AcknowledgeType.RELEASE:
                self.give_back(r)
            else:  # REJECT, GAP
                r.state, r.member, r.deadline = RecordState.ARCHIVED, "", 0
        self.settle()
        return ErrorCode.NONE

    def release(self, member: str, now: int) -> None:
        self.expire(now)
        for r in self.records.values():
            if r.state is RecordState.ACQUIRED and r.member == member:
                r.state, r.count, r.member, r.deadline = RecordState.AVAILABLE, r.count - 1, "", 0
        self.settle()

    def held(self, member: str | None) -> list[int]:
        """The records the member holds (None: anyone)."""
        return [
            o
            for o, r in sorted(self.records.items())
            if r.state is RecordState.ACQUIRED and member in (None, r.member)
        ]


def _offsets(ranges: tuple[AcquiredRange, ...]) -> list[tuple[int, int]]:
    return [(o, r.delivery_count) for r in ranges for o in range(r.first, r.last + 1)]


def _batches(pairs: list[tuple[int, int]], per_offset: bool) -> list[AcknowledgeBatch]:
    """(offset, type) pairs as acknowledgement batches: runs of consecutive offsets, each with
    one type (when all agree and not `per_offset`) or one per offset."""
    runs: list[list[tuple[int, int]]] = []
    for pair in pairs:
        if runs and runs[-1][-1][0] + 1 == pair[0]:
            runs[-1].append(pair)
        else:
            runs.append([pair])
    out = []
    for run in runs:
        kinds = tuple(k for _, k in run)
        if not per_offset and len(set(kinds)) == 1:
            kinds = kinds[:1]
        out.append(AcknowledgeBatch(run[0][0], run[-1][0], kinds))
    return out


member_st = st.sampled_from(MEMBERS)
kind_st = st.sampled_from(list(AcknowledgeType))
op_st = st.one_of(
    st.tuples(st.just("produce"), st.integers(0, 1), st.integers(1, 8)),
    st.tuples(
        st.just("fetch"),
        member_st,
        st.integers(1, 6),
        st.integers(1, 6),
        st.integers(0, 4),  # records produced to each partition first
        st.integers(0, 4),
    ),
    st.tuples(
        st.just("ack"),
        member_st,
        st.integers(0, 1),
        st.lists(kind_st, min_size=1, max_size=6),
        st.sampled_from(["own", "own", "own", "any"]),  # what it holds, or anyone's
    ),
    st.tuples(st.just("ack_any"), member_st, st.integers(0, 1), st.integers(0, 30), kind_st),
    st.tuples(st.just("tick"), st.sampled_from([100, 400, 999, 1_000, 2_500])),
    st.tuples(st.just("leave"), member_st),
    st.tuples(st.just("trim"), st.integers(0, 1), st.integers(1, 5)),
    st.tuples(st.just("restart")),
)


def _compare(tp: TopicPartition, model: ModelPartition, stored: Any, now: int) -> None:
    state = expire(stored, now, LIMITS)
    assert (state.start, state.end) == (model.start, model.end), tp
    records = {
        o: (r.state, r.delivery_count, r.member, r.deadline_ms)
        for r in state.ranges
        for o in range(r.first, r.last + 1)
    }
    expected = {o: (r.state, r.count, r.member, r.deadline) for o, r in model.records.items()}
    assert records == expected, tp


async def _run(ops: list[tuple[Any, ...]], directory: Path) -> None:
    clock = ManualClock()
    coordinator: BatchCoordinator = open_coordinator("sqlite", directory, clock)
    model = {tp: ModelPartition() for tp in PARTITIONS}
    try:
        await coordinator.create_topic("t", len(PARTITIONS))
        for op in ops:
            now = clock.now_ms()
            kind = op[0]
            if kind == "produce":
                model[PARTITIONS[op[1]]].high_watermark += op[2]
            elif kind == "fetch":
                _, member, n0, n1, grow0, grow1 = op
                for m, grow in zip(model.values(), (grow0, grow1), strict=True):
                    m.high_watermark += grow
                asked = [
                    ShareFetchPartition(tp, n, m.high_watermark, m.log_start, 0)
                    for (tp, m), n in zip(model.items(), (n0, n1), strict=True)
                ]
                got = await coordinator.acquire_share_records(GROUP, member, asked, LIMITS)
                for (tp, m), n in zip(model.items(), (n0, n1), strict=True):
                    taken = m.acquire(member, n, now)
                    assert _offsets(got[tp].acquired) == [(o, m.records[o].count) for o in taken]
            elif kind in ("ack", "ack_any"):
                tp, member = PARTITIONS[op[2]], op[1]
                m = model[tp]
                if kind == "ack":
                    kinds = op[3]
                    held = m.held(member if op[4] == "own" else None)[: len(kinds)]
                    pairs = [(o, kinds[i % len(kinds)]) for i, o in enumerate(held)]
                else:
                    pairs = [(op[3], op[4])]
                if not pairs:
                    continue
                per_offset = len(pairs) % 2 == 0
                answers = await coordinator.acknowledge_share_records(
                    GROUP, member, {tp: _batches(pairs, per_offset)}, LIMITS
                )
                assert answers == {tp: m.acknowledge(member, pairs, now)}
            elif kind == "tick":
                await clock.advance(op[1] / 1000)
            elif kind == "leave":
                await coordinator.release_share_member(GROUP, op[1], PARTITIONS, LIMITS)
                for m in model.values():
                    m.release(op[1], now)
            elif kind == "trim":
                m = model[PARTITIONS[op[1]]]
                m.log_start = min(m.high_watermark, m.log_start + op[2])
            elif kind == "restart":
                await coordinator.close()
                coordinator = open_coordinator("sqlite", directory, clock)
            for m in model.values():
                m.expire(clock.now_ms())
            states = await coordinator.share_partition_states(GROUP)
            for tp, stored in states.items():
                _compare(tp, model[tp], stored, clock.now_ms())
            for tp in set(PARTITIONS) - set(states):
                assert model[tp].end == 0  # never acquired from
    finally:
        await coordinator.close()


@hypothesis.seed(SEED)
@hypothesis.settings(max_examples=80, deadline=None, print_blob=True)
@hypothesis.given(st.lists(op_st, min_size=10, max_size=60))
def test_share_partitions_follow_the_model(ops: list[tuple[Any, ...]]) -> None:
    print(f"SHARE_ORACLE_SEED={SEED}")
    with tempfile.TemporaryDirectory() as directory:
        asyncio.run(_run(ops, Path(directory)))


@pytest.mark.slow
@hypothesis.seed(SEED)
@hypothesis.settings(max_examples=600, deadline=None, print_blob=True)
@hypothesis.given(st.lists(op_st, min_size=20, max_size=150))
def test_share_partitions_follow_the_model_long(ops: list[tuple[Any, ...]]) -> None:
    print(f"SHARE_ORACLE_SEED={SEED}")
    with tempfile.TemporaryDirectory() as directory:
        asyncio.run(_run(ops, Path(directory)))
