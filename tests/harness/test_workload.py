"""Unit tests of workload generation: determinism, sequencing, placement, sizes, overrides."""

from __future__ import annotations

import collections

import msgspec
import pytest

from benchmarks.harness.spec import (
    KEY_BYTES,
    Distribution,
    WorkloadSpec,
    apply_overrides,
    parse_size,
)
from benchmarks.harness.workload import (
    WorkloadRow,
    all_partitions,
    brokers_of_task,
    generate_rows,
    producer_placement,
)
from diskless import TopicPartition
from diskless.routing import produce_broker

SMALL = WorkloadSpec(
    total_mb=3.0,
    producers=6,
    partitions=8,
    topics=2,
    batch_records="uniform:8:48",
    record_bytes="lognormal:1KiB:0.5",
    partitions_per_round=4,
    transactional_share=0.0,
)


def test_same_seed_same_rows() -> None:
    assert list(generate_rows(SMALL)) == list(generate_rows(SMALL))


def test_different_seed_different_rows() -> None:
    other = msgspec.structs.replace(SMALL, seed=SMALL.seed + 1)
    assert list(generate_rows(SMALL)) != list(generate_rows(other))


def test_each_producer_numbers_its_sequences_contiguously_per_partition_and_overall() -> None:
    by_producer: dict[int, list[WorkloadRow]] = collections.defaultdict(list)
    for row in generate_rows(SMALL):
        by_producer[row.producer_index].append(row)
    assert len(by_producer) == SMALL.producers
    for rows in by_producer.values():
        assert [r.request_id for r in rows] == sorted(r.request_id for r in rows)
        next_seq = 0
        next_base: dict[tuple[str, int], int] = collections.defaultdict(int)
        for row in rows:
            assert row.producer_seq == next_seq
            next_seq += row.records
            tp = (row.topic, row.partition)
            assert row.base_sequence == next_base[tp]
            next_base[tp] += row.records


def test_a_request_goes_to_the_rack_representative_and_holds_one_batch_per_partition() -> None:
    spec = msgspec.structs.replace(SMALL, brokers=6, racks=3, partitions_per_round=6)
    from benchmarks.harness.workload import broker_nodes

    requests: dict[int, list[WorkloadRow]] = collections.defaultdict(list)
    for row in generate_rows(spec):
        requests[row.request_id].append(row)
        tp = TopicPartition(row.topic, row.partition)
        assert row.broker_id == produce_broker(tp, row.rack, broker_nodes(spec))
    for rows in requests.values():
        assert len({(r.topic, r.partition) for r in rows}) == len(rows)
        assert len({r.broker_id for r in rows}) == 1


def test_transactional_producers_restart_sequences_and_bump_epochs_per_transaction() -> None:
    spec = msgspec.structs.replace(SMALL, transactional_share=0.5, txn_requests=3)
    rows = list(generate_rows(spec))
    transactional = [r for r in rows if r.transactional]
    assert {r.producer_index for r in transactional} == {0, 1, 2}
    assert all(r.txn_index == -1 and r.producer_epoch == 0 for r in rows if not r.transactional)
    next_base: dict[tuple[int, int, str, int], int] = collections.defaultdict(int)
    for row in transactional:
        assert row.txn_index == row.request_index // 3
        assert row.producer_epoch == row.txn_index
        key = (row.producer_index, row.txn_index, row.topic, row.partition)
        assert row.base_sequence == next_base[key]  # each transaction starts at sequence 0
        next_base[key] += row.records
    outcomes = {(r.producer_index, r.txn_index): r.txn_commit for r in transactional}
    assert set(outcomes.values()) == {True, False}  # 20% of transactions abort by default


def test_every_producer_and_its_brokers_live_in_exactly_one_task() -> None:
    spec = WorkloadSpec(brokers=3, racks=3, tasks=2, producers=12)
    assert spec.effective_tasks == 2
    for row in generate_rows(msgspec.structs.replace(spec, total_mb=2.0)):
        task, _ = producer_placement(spec, row.producer_index)
        assert row.task == task
        assert row.broker_id in {node.broker_id for node in brokers_of_task(spec, task)}
    tasks = [producer_placement(spec, p)[0] for p in range(spec.producers)]
    assert collections.Counter(tasks) == {0: 6, 1: 6}


def test_generation_stops_near_the_byte_target_with_bounded_batches() -> None:
    rows = list(generate_rows(SMALL))
    payload = sum(r.records * (r.value_bytes + KEY_BYTES) for r in rows)
    assert 0.8 * SMALL.total_mb * 1e6 < payload < 1.3 * SMALL.total_mb * 1e6
    assert all(r.value_bytes >= 0 and r.records >= 1 for r in rows)
    assert {(r.topic, r.partition) for r in rows} <= {tuple(tp) for tp in all_partitions(SMALL)}


def test_key_skew_concentrates_load_on_few_partitions() -> None:
    def top_share(skew: float) -> float:
        spec = msgspec.structs.replace(SMALL, key_skew=skew, partitions_per_round=1)
        counts = collections.Counter((r.topic, r.partition) for r in generate_rows(spec))
        return counts.most_common(1)[0][1] / sum(counts.values())

    assert top_share(2.0) > 2 * top_share(0.0)


def test_open_loop_schedules_sends_at_the_target_rate() -> None:
    spec = msgspec.structs.replace(SMALL, rate_mb_s=10.0)
    rows = [r for r in generate_rows(spec) if r.producer_index == 0]
    offsets = sorted({r.send_offset_ms for r in rows})
    assert offsets[0] == 0.0 and offsets == sorted(offsets)
    # Each producer sends 1/6 of 10 MB/s: its ~0.5 MB take about 300 ms to schedule.
    assert 200.0 < offsets[-1] < 400.0
    closed = list(generate_rows(SMALL))
    assert {r.send_offset_ms for r in closed} == {-1.0}


@pytest.mark.parametrize(
    ("text", "expected"),
    [("4096", 4096), ("64KiB", 65536), ("8MiB", 8 << 20), ("1GB", 10**9), ("500kB", 500_000)],
)
def test_parse_size(text: str, expected: int) -> None:
    assert parse_size(text) == expected


def test_distributions_parse_and_sample_within_bounds() -> None:
    import random

    rng = random.Random(3)
    uniform = Distribution.parse("uniform:512:2KiB")
    assert all(512 <= uniform.sample(rng) <= 2048 for _ in range(200))
    assert Distribution.parse("fixed:100").sample(rng) == 100
    lognormal = Distribution.parse("lognormal:1KiB:0.5")
    assert str(lognormal) == "lognormal:1024:0.5"
    with pytest.raises(ValueError, match="bad distribution"):
        Distribution.parse("zipf:3")


def test_overrides_set_workload_fields_and_wal_fields() -> None:
    spec, wal = apply_overrides(
        WorkloadSpec(),
        {},
        {
            "producers": "4",
            "key_skew": "0",
            "commit_interval_ms": "100",
            "buffer_max_bytes": "1MiB",
        },
    )
    assert spec.producers == 4 and spec.key_skew == 0.0
    assert wal == {"commit_interval_ms": 100, "buffer_max_bytes": 1 << 20}
    with pytest.raises(ValueError, match="brokers must be >= racks"):
        apply_overrides(WorkloadSpec(), {}, {"brokers": "2"})
