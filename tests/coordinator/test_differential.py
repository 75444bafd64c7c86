"""Property test: both backends give identical results for identical operation sequences.

Hypothesis generates operation sequences (commits of batches from several producers with valid,
duplicate, stale and gapped sequences; fetches; list-offsets; delete-records; retention; object
lifecycle; clock jumps). Each operation runs on both backends and the results (or the exceptions)
must be equal, call by call. A failure prints the example and a reproduction blob.
"""

from __future__ import annotations

import asyncio
import tempfile
import uuid
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any, Final

import hypothesis
import hypothesis.strategies as st
import msgspec
import pytest

from diskless._types import IsolationLevel, OffsetSpec, TimestampType, TopicPartition
from diskless.clock import ManualClock
from diskless.coordinator import (
    BatchCoordinator,
    CommitBatch,
    CommitFileResult,
    DeleteRecordsRequest,
    FindBatchesRequest,
    ListOffsetsRequest,
    TopicConfig,
    TopicDescription,
)
from diskless.txn import SEQUENCE_MAX
from testkit.backends import BACKENDS, open_coordinator
from testkit.commits import BASE_TS

EXPIRATION_MS = 50_000
ANY_ID: Final = uuid.UUID(int=1)
TOPICS = {
    "a": (3, TopicConfig()),
    "lat": (1, TopicConfig(timestamp_type=TimestampType.LOG_APPEND_TIME)),
    "r": (2, TopicConfig(retention_ms=20_000, retention_bytes=2_000)),
}
PARTITIONS = [TopicPartition(t, p) for t, (n, _) in TOPICS.items() for p in range(n)] + [
    TopicPartition("a", 7),
    TopicPartition("nope", 0),
]
SEQ_KINDS = ["next", "next", "next", "next", "dup", "gap", "zero", "old", "near_wrap"]

KNOWN = PARTITIONS[:-2]
partition_st = st.sampled_from(KNOWN * 4 + PARTITIONS[-2:])  # unknown ones now and then
batch_st = st.tuples(
    # A few hot partitions and producers, so that producers meet their own history often.
    st.sampled_from([KNOWN[0]] * 6 + [KNOWN[3]] * 3 + [KNOWN[4]] * 3 + PARTITIONS),
    st.sampled_from([1, 1, 1, 2, 2, -1, 3]),  # producer id
    st.sampled_from([0, 0, 0, 0, 1, 2]),  # same epoch, bumped, stale (relative to the last)
    st.sampled_from(SEQ_KINDS),
    st.integers(1, 5),  # record count
    st.integers(-30_000, 5_000),  # timestamp relative to now
    st.integers(1, 400),  # size
    st.booleans(),  # transactional
)
commit_st = st.tuples(st.just("commit"), st.lists(batch_st, min_size=1, max_size=8))
op_st = st.one_of(
    # Commits drive everything else: weigh them up.
    *[commit_st] * 8,
    st.tuples(
        st.just("find"),
        st.lists(st.tuples(partition_st, st.integers(-2, 40), st.integers(0, 1200)), max_size=4),
        st.integers(0, 3000),
    ),
    st.tuples(
        st.just("list"),
        st.lists(
            st.tuples(
                partition_st,
                st.one_of(st.sampled_from([-3, -2, -1]), st.integers(-40_000, 40_000)),
                st.booleans(),
            ),
            max_size=4,
        ),
    ),
    st.tuples(
        st.just("delete"), st.lists(st.tuples(partition_st, st.integers(-2, 40)), max_size=3)
    ),
    *[st.tuples(st.just("retention"), st.integers(0, 6))] * 2,
    *[st.tuples(st.just("advance"), st.integers(0, 40_000))] * 2,
    *[st.tuples(st.just("retry"))] * 3,  # a broker re-sending a commit whose ack was lost
    st.tuples(st.just("reregister")),
    st.tuples(st.just("stale_commit")),
    st.tuples(st.just("recommit")),
    st.tuples(st.just("condemn"), st.integers(0, 3)),
    st.tuples(st.just("files"), st.integers(0, 60_000)),
    st.tuples(st.just("forget"), st.integers(0, 60_000)),
    st.tuples(st.just("producers"), partition_st),
    st.tuples(st.just("grow"), st.sampled_from(sorted(TOPICS)), st.integers(-1, 3)),
    st.tuples(st.just("recreate"), st.sampled_from(sorted(TOPICS))),
)


async def _described(
    coordinator: BatchCoordinator, names: list[str] | None = None
) -> list[TopicDescription]:
    """Topics as every backend describes them alike: each gives its topics random ids."""
    described = await coordinator.describe_topics(names)
    return [msgspec.structs.replace(d, topic_id=ANY_ID) for d in described]


class Scenario:
    """Turns abstract operations into concrete calls, using results to aim sequences."""

    def __init__(self, backends: list[BatchCoordinator], clock: ManualClock) -> None:
        self.backends = backends
        self.clock = clock
        self.epochs = [0, 0]
        self.keys: list[str] = []
        self.last_batches: list[CommitBatch] = []
        self.last: dict[tuple[TopicPartition, int], tuple[int, int, int, int]] = {}
        """(tp, pid) -> (epoch, first_seq, last_seq, count) of the last accepted batch."""

    async def both(self, call: Callable[[BatchCoordinator], Awaitable[Any]]) -> Any:
        outcomes = []
        for backend in self.backends:
            try:
                outcomes.append(("ok", await call(backend)))
            except Exception as error:  # compared below: both must fail the same way
                outcomes.append(("raised", type(error)))
        for backend, outcome in zip(BACKENDS[1:], outcomes[1:], strict=True):
            assert outcome == outcomes[0], f"{backend} differs from {BACKENDS[0]}: {outcomes}"
        return outcomes[0][1]

    def make_batch(self, spec: tuple[Any, ...], byte_offset: int) -> CommitBatch:
        tp, pid, epoch_delta, kind, count, ts_delta, size, txn = spec
        epoch, seq = 0, 0
        last = self.last.get((tp, pid))
        if pid >= 0 and last is not None:
            last_epoch, first_seq, last_seq, last_count = last
            epoch = (last_epoch, last_epoch + 1, max(0, last_epoch - 1))[epoch_delta]
            seq = {
                "next": (last_seq + 1) % (SEQUENCE_MAX + 1),
                "dup": first_seq,
                "gap": (last_seq + 3) % (SEQUENCE_MAX + 1),
                "zero": 0,
                "old": max(0, first_seq - 1),
                "near_wrap": SEQUENCE_MAX - 1,
            }[kind]
            if kind == "dup":
                epoch, count = last_epoch, last_count
            elif epoch != last_epoch and kind == "next":
                seq = 0
        elif pid >= 0 and kind == "near_wrap":
            seq = SEQUENCE_MAX - 1
        return CommitBatch(
            topic_partition=tp,
            byte_offset=byte_offset,
            size=size,
            record_count=count,
            base_timestamp=self.clock.now_ms() + ts_delta,
            max_timestamp=self.clock.now_ms() + ts_delta,
            producer_id=pid,
            producer_epoch=epoch if pid >= 0 else -1,
            base_sequence=seq if pid >= 0 else -1,
            is_transactional=txn and pid >= 0,
        )

    async def commit(self, batches: list[CommitBatch], broker: int = 0) -> None:
        key = f"obj/{len(self.keys):06d}"
        self.keys.append(key)
        size = sum(b.size for b in batches)
        epoch = self.epochs[broker]
        outcome = await self.both(lambda c: c.commit_file(key, broker, epoch, size, batches))
        if isinstance(outcome, CommitFileResult) and outcome.refused is None:
            results = outcome.batches
            assert len(results) == len(batches)
            for b, r in zip(batches, results, strict=True):
                if b.producer_id >= 0 and r.error == 0 and not r.duplicate:
                    last_seq = (b.base_sequence + b.record_count - 1) % (SEQUENCE_MAX + 1)
                    self.last[(b.topic_partition, b.producer_id)] = (
                        b.producer_epoch,
                        b.base_sequence,
                        last_seq,
                        b.record_count,
                    )

    async def run(self, op: tuple[Any, ...]) -> None:
        kind = op[0]
        if kind == "commit":
            offsets = [0]
            for spec in op[1]:
                offsets.append(offsets[-1] + spec[6])
            self.last_batches = [
                self.make_batch(s, o) for s, o in zip(op[1], offsets, strict=False)
            ]
            await self.commit(self.last_batches)
        elif kind == "retry":
            await self.commit(self.last_batches)
        elif kind == "find":
            requests = [FindBatchesRequest(tp, off, mb) for tp, off, mb in op[1]]
            await self.both(lambda c: c.find_batches(requests, op[2]))
        elif kind == "list":
            now = self.clock.now_ms()
            list_requests = [
                ListOffsetsRequest(
                    tp,
                    ts if ts in (-1, -2, -3) else now + ts,
                    IsolationLevel.READ_COMMITTED if rc else IsolationLevel.READ_UNCOMMITTED,
                )
                for tp, ts, rc in op[1]
            ]
            await self.both(lambda c: c.list_offsets(list_requests))
        elif kind == "delete":
            delete_requests = [DeleteRecordsRequest(tp, off) for tp, off in op[1]]
            await self.both(lambda c: c.delete_records(delete_requests))
        elif kind == "retention":
            await self.both(lambda c: c.enforce_retention(op[1]))
        elif kind == "advance":
            await self.clock.advance(op[1] / 1000)
        elif kind == "reregister":
            self.epochs[1] = await self.both(lambda c: c.register_broker(1))
        elif kind == "stale_commit":
            batches = [self.make_batch((PARTITIONS[0], -1, 0, "next", 1, 0, 10, False), 0)]
            await self.commit(batches, broker=1)  # fenced unless broker 1 is registered
            self.epochs[1] -= 1
        elif kind == "recommit" and self.keys:
            key = self.keys[-1]
            batches = [self.make_batch((PARTITIONS[0], -1, 0, "next", 1, 0, 10, False), 0)]
            await self.both(lambda c: c.commit_file(key, 0, self.epochs[0], 10, batches))
        elif kind == "condemn":
            keys = [f"orphan/{op[1]}", *self.keys[-op[1] :]]
            await self.both(lambda c: c.condemn_objects(keys))
        elif kind == "files":
            older = self.clock.now_ms() - op[1]
            await self.both(lambda c: c.files_to_delete(older, limit=5))
            await self.both(lambda c: c.file_stats())
            await self.both(lambda c: c.file_info([*self.keys[-3:], "orphan/1"]))
        elif kind == "forget":
            older = self.clock.now_ms() - op[1]
            infos = await self.both(lambda c: c.files_to_delete(older, limit=3))
            keys = [i.key for i in infos] + self.keys[-1:]
            await self.both(lambda c: c.forget_files(keys))
        elif kind == "producers":
            await self.both(lambda c: c.describe_producers(op[1]))
        elif kind == "grow":
            (described,) = await self.both(lambda c: _described(c, [op[1]]))
            total = described.partitions + op[2]
            await self.both(lambda c: c.create_partitions(op[1], total))
        elif kind == "recreate":
            count, config = TOPICS[op[1]]
            await self.both(lambda c: c.delete_topics([op[1]]))
            await self.both(lambda c: c.create_topic(op[1], count, config))
            self.last = {k: v for k, v in self.last.items() if k[0].topic != op[1]}


async def _run_scenario(ops: list[tuple[Any, ...]], directory: Path) -> None:
    clock = ManualClock(BASE_TS)
    backends = [
        open_coordinator(backend, directory, clock, producer_id_expiration_ms=EXPIRATION_MS)
        for backend in BACKENDS
    ]
    try:
        scenario = Scenario(backends, clock)
        for name, (count, config) in TOPICS.items():
            await scenario.both(lambda c, n=name, k=count, g=config: c.create_topic(n, k, g))
        scenario.epochs[0] = await scenario.both(lambda c: c.register_broker(0))
        for op in ops:
            await scenario.run(op)
        # Final state, partition by partition.
        for tp in PARTITIONS:
            await scenario.both(
                lambda c, tp=tp: c.find_batches([FindBatchesRequest(tp, 0, 1 << 30)], 1 << 30)
            )
            await scenario.both(
                lambda c, tp=tp: c.list_offsets([ListOffsetsRequest(tp, OffsetSpec.EARLIEST)])
            )
            await scenario.both(lambda c, tp=tp: c.describe_producers(tp))
        await scenario.both(_described)
    finally:
        for backend in backends:
            await backend.close()


def _check(ops: list[tuple[Any, ...]]) -> None:
    with tempfile.TemporaryDirectory() as directory:
        asyncio.run(_run_scenario(ops, Path(directory)))


_ops = st.lists(op_st, min_size=10, max_size=40)


@hypothesis.settings(
    max_examples=35, deadline=None, print_blob=True, derandomize=True, database=None
)
@hypothesis.given(_ops)
def test_backends_agree(ops: list[tuple[Any, ...]]) -> None:
    _check(ops)


@pytest.mark.slow
@hypothesis.settings(max_examples=1500, deadline=None, print_blob=True)
@hypothesis.given(st.lists(op_st, min_size=1, max_size=120))
def test_backends_agree_long(ops: list[tuple[Any, ...]]) -> None:
    _check(ops)
