"""The fetch walk over extents returns a superset that the read path cuts back exactly.

For random layouts of rows and extents over several partitions: expanding the extents of
`find_batches`' answer into their batches and applying `FetchBudget` gives exactly what
`FetchBudget` gives over the plain rows; without extents `find_batches` is `FetchBudget` itself.
"""

from __future__ import annotations

import itertools
import random
from collections.abc import Iterator, Sequence

from diskless._types import TopicPartition
from diskless.coordinator import FetchBudget, FindBatchesRequest, TopicConfig
from diskless.coordinator._rules.fetch import find_batches
from diskless.coordinator._rules.reads import ReadSource
from diskless.coordinator._rules.rows import AbortedTxn, PartitionState, StoredBatch

Layout = dict[TopicPartition, list[StoredBatch]]


class Source(ReadSource):
    """A `ReadSource` over fixed rows (log start 0, nothing open, nothing aborted), with the
    lookups of every partition at once that it inherits."""

    def __init__(self, logs: Layout) -> None:
        self.logs = logs
        self.keys = {tp: i for i, tp in enumerate(logs)}

    def partition(self, tp: TopicPartition) -> PartitionState | None:
        rows = self.logs[tp]
        end = rows[-1].last_offset + 1 if rows else 0
        return PartitionState(self.keys[tp], tp, TopicConfig(), high_watermark=end)

    def batches_from(self, state: PartitionState, offset: int) -> Iterator[StoredBatch]:
        return (r for r in self.logs[state.topic_partition] if r.last_offset >= offset)

    def max_timestamp_batch(self, state: PartitionState) -> StoredBatch | None:
        raise NotImplementedError

    def first_running_max_at_least(self, state: PartitionState, ts: int) -> StoredBatch | None:
        raise NotImplementedError

    def aborted_from(self, state: PartitionState, offset: int) -> Iterator[AbortedTxn]:
        return iter(())


def row(base: int, last: int, size: int, extent: bool = False) -> StoredBatch:
    index = 0 if extent else -1
    return StoredBatch(0, base, last, "k", 0, size, 0, -1, 0, 0, -1, -1, -1, 0, index, index)


def consolidate(rows: list[StoredBatch], cuts: Sequence[int]) -> list[StoredBatch]:
    """The rows with rows[a:b] made one extent for each consecutive (a, b) of `cuts` (from 0:
    extents are a prefix)."""
    out: list[StoredBatch] = []
    for a, b in itertools.pairwise(cuts):
        run = rows[a:b]
        out.append(row(run[0].base_offset, run[-1].last_offset, sum(r.size for r in run), True))
    return out + rows[cuts[-1] :] if cuts else list(rows)


def exact(plain: Layout, requests: Sequence[FindBatchesRequest], total: int) -> list[list[int]]:
    budget = FetchBudget(total)
    return [
        [
            b.base_offset
            for b in budget.take(
                (r for r in plain[q.topic_partition] if r.last_offset >= q.offset), q.max_bytes
            )
        ]
        for q in requests
    ]


def cut_back(
    plain: Layout,
    answer: list[list[StoredBatch]],
    requests: Sequence[FindBatchesRequest],
    total: int,
) -> list[list[int]]:
    """What the read path returns: extents expanded, the budgets applied again."""
    budget = FetchBudget(total)
    result = []
    for rows, q in zip(answer, requests, strict=True):
        expanded = [
            r
            for got in rows
            for r in plain[q.topic_partition]
            if got.base_offset <= r.base_offset <= got.last_offset and r.last_offset >= q.offset
        ]
        result.append([b.base_offset for b in budget.take(expanded, q.max_bytes)])
    return result


def answer_of(source: Source, requests: Sequence[FindBatchesRequest], total: int) -> list[list]:
    responses = find_batches(source, requests, total)
    by_base = {(tp, r.base_offset): r for tp, rows in source.logs.items() for r in rows}
    return [
        [by_base[(q.topic_partition, b.base_offset)] for b in response.batches]
        for q, response in zip(requests, responses, strict=True)
    ]


def check(plain: Layout, layout: Layout, requests: list[FindBatchesRequest], total: int) -> None:
    want = exact(plain, requests, total)
    plain_answer = answer_of(Source(plain), requests, total)
    assert [[b.base_offset for b in rows] for rows in plain_answer] == want
    assert cut_back(plain, answer_of(Source(layout), requests, total), requests, total) == want


def test_later_partitions_keep_the_budget_the_exact_walk_leaves_them() -> None:
    """The extent holding the offset is counted as empty, so the partition after it must not
    be charged for rows the exact walk would not reach (here: 50 of 100 bytes)."""
    tps = [TopicPartition("t", i) for i in range(3)]
    plain = {
        tps[0]: [row(0, 0, 40)],
        tps[1]: [row(0, 0, 30), row(1, 1, 50)],
        tps[2]: [row(0, 0, 25)],
    }
    layout = {
        tps[0]: consolidate(plain[tps[0]], [0, 1]),
        tps[1]: plain[tps[1]],
        tps[2]: plain[tps[2]],
    }
    requests = [FindBatchesRequest(tp, 0, 1000) for tp in tps]
    check(plain, layout, requests, 100)


def test_random_layouts_cut_back_to_the_exact_answer() -> None:
    seed = random.randrange(1 << 32)
    print(f"seed {seed}")
    rng = random.Random(seed)
    for _ in range(3000):
        tps = [TopicPartition("t", i) for i in range(rng.randint(1, 4))]
        plain: Layout = {}
        layout: Layout = {}
        for tp in tps:
            rows, offset = [], 0
            for _ in range(rng.randint(0, 8)):
                count = rng.randint(1, 3)
                rows.append(row(offset, offset + count - 1, rng.randint(1, 60)))
                offset += count
            plain[tp] = rows
            ends = rng.sample(range(1, len(rows) + 1), rng.randint(0, len(rows)))
            layout[tp] = consolidate(rows, [0, *sorted(ends)] if ends else [])
        requests = []
        for tp in tps:
            end = plain[tp][-1].last_offset + 1 if plain[tp] else 0
            requests.append(FindBatchesRequest(tp, rng.randint(0, end), rng.randint(0, 250)))
        check(plain, layout, requests, rng.randint(0, 400))
