"""Deterministic simulation of the produce path: brokers, faults, idempotent producers, an auditor.

Everything runs on a ManualClock and draws from one seeded `random.Random`: object-store faults
(failed, slow and lost-ack PUTs), coordinator faults at its store (failures before applying, lost
answers after applying, under the engine's real group commit step), broker restarts that fence
the old incarnation, and several WalWriters shared by idempotent producers that pipeline up to 5
requests and retry failed batches with the same sequence numbers. Afterwards an auditor reads
every partition back through the coordinator and the store (decoded with kafka-python) and
checks:
- every acknowledged batch is in the log exactly once, at its acknowledged offset, with its records;
- the log holds nothing else, at contiguous offsets;
- each producer's batches sit in sequence order on every partition;
- every `write` returned within its timeout (virtual time);
- no writer ever had more than `inflight_bytes_max` bytes in flight (or one larger batch alone).

A mutation check keeps the auditor honest: with a store that applies half of a group commit and
then fails, the simulation must fail.

Replay one seed:  DISKLESS_SIM_SEED=1234 .venv/bin/python -m pytest tests/wal/test_simulation.py -s
(a seed of the long variant: add --run-slow -k long; `--sim-seeds N` runs N seeds).
"""

from __future__ import annotations

import asyncio
import collections
import random
from collections.abc import Callable
from dataclasses import dataclass, field

import pytest

from diskless import ErrorCode, ManualClock, TopicPartition
from diskless.coordinator import (
    BatchCoordinator,
    CallFaults,
    FaultyBatchCoordinator,
    FindBatchesRequest,
    InMemoryBatchCoordinator,
)
from diskless.records import set_base_offset
from diskless.storage import FaultyObjectStore, MemoryObjectStore
from diskless.wal import WalConfig, WalEntry, WalWriter
from testkit.clocks import drive_deadlines
from testkit.wal import build_batch, decode_values, header_of
from tests.wal._torn_store import HalfGroupCoordinators

SIM_START_MS = 1_700_000_000_000

SEEDS_DEFAULT = 200
SEEDS_SLOW = 1000
IN_FLIGHT_MAX = 5  # Kafka's max.in.flight.requests.per.connection with idempotence
TOPIC = "sim"
RETRIABLE = {
    ErrorCode.KAFKA_STORAGE_ERROR,
    ErrorCode.REQUEST_TIMED_OUT,
    ErrorCode.NOT_LEADER_OR_FOLLOWER,
    ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER,  # a later batch overtook one that failed: resend
}


@dataclass
class Batch:
    """One batch of one producer on one partition, and what the producer learned about it."""

    producer_id: int
    topic_partition: TopicPartition
    base_sequence: int
    values: list[bytes]
    data: bytes
    acked_offset: int | None = None


@dataclass
class Scenario:
    seed: int
    rng: random.Random
    clock: ManualClock
    store: MemoryObjectStore
    coordinator: BatchCoordinator
    faulty_store: FaultyObjectStore
    faulty_coordinator: FaultyBatchCoordinator
    config: WalConfig
    timeout_s: float
    brokers: dict[int, WalWriter] = field(default_factory=dict)
    retired: list[WalWriter] = field(default_factory=list)
    write_durations: list[float] = field(default_factory=list)
    producers: list[Producer] = field(default_factory=list)
    largest_batch: int = 0

    def fail(self, message: str) -> str:
        return f"seed={self.seed}: {message}"

    async def start_broker(self, broker_id: int) -> None:
        epoch = await self.faulty_coordinator.register_broker(broker_id)
        writer = WalWriter(
            broker_id=broker_id,
            broker_epoch=epoch,
            store=self.faulty_store,
            coordinator=self.faulty_coordinator,
            config=self.config,
            clock=self.clock,
        )
        await writer.start()
        old = self.brokers.get(broker_id)
        if old is not None:
            self.retired.append(old)  # a zombie: still running until it finds itself fenced
        self.brokers[broker_id] = writer

    async def write(self, entries: list[WalEntry]) -> list[ErrorCode | int]:
        """Send one produce request to a random broker; an offset or an error per entry."""
        writer = self.brokers[self.rng.choice(sorted(self.brokers))]
        started = self.clock.monotonic()
        results = await writer.write(entries, timeout_s=self.timeout_s)
        self.write_durations.append(self.clock.monotonic() - started)
        assert len(results) == len(entries), self.fail("one result per entry")
        out: list[ErrorCode | int] = []
        for result in results:
            if result.error == ErrorCode.NONE:
                out.append(result.base_offset)
            else:
                assert result.error in RETRIABLE, self.fail(f"unexpected {result}")
                out.append(result.error)
        return out


class Producer:
    """An idempotent producer: at most 5 requests from its oldest unacknowledged one on; on any
    error it drains, then resends every unacknowledged batch in order, one request at a time,
    before pipelining again."""

    def __init__(self, sim: Scenario, producer_id: int, partitions: list[TopicPartition]) -> None:
        self.sim = sim
        self.producer_id = producer_id
        self.partitions = partitions
        self.next_sequence = dict.fromkeys(partitions, 0)
        self.requests: list[list[Batch]] = []
        self.oldest_unacked = 0

    def new_request(self, *, every_partition: bool = False) -> list[Batch]:
        rng = self.sim.rng
        chosen = [tp for tp in self.partitions if every_partition or rng.random() < 0.6] or [
            rng.choice(self.partitions)
        ]
        request = []
        for tp in chosen:
            sequence = self.next_sequence[tp]
            values = [
                f"{self.producer_id}/{tp.partition}/{sequence + i}/".encode()
                + rng.randbytes(rng.randint(0, 300))
                for i in range(rng.randint(1, 3))
            ]
            self.next_sequence[tp] = sequence + len(values)
            data = build_batch(
                values, producer_id=self.producer_id, producer_epoch=0, base_sequence=sequence
            )
            request.append(Batch(self.producer_id, tp, sequence, values, data))
            self.sim.largest_batch = max(self.sim.largest_batch, len(data))
        self.requests.append(request)
        return request

    async def send(self, batches: list[Batch]) -> bool:
        """One attempt; True when every batch of it is acknowledged."""
        entries = [WalEntry(b.topic_partition, header_of(b.data)) for b in batches]
        outcome = await self.sim.write(entries)
        ok = True
        for batch, result in zip(batches, outcome, strict=True):
            if isinstance(result, ErrorCode):
                ok = False
                continue
            if batch.acked_offset is not None:
                assert batch.acked_offset == result, self.sim.fail(
                    f"{batch.producer_id}/{batch.base_sequence} acked at {batch.acked_offset} "
                    f"and again at {result}"
                )
            batch.acked_offset = result
        return ok

    async def resend_unacked(self) -> None:
        while True:
            unacked = [[b for b in request if b.acked_offset is None] for request in self.requests]
            unacked = [r for r in unacked if r]
            if not unacked:
                return
            for request in unacked:
                if not await self.send(request):
                    break  # start over from the first unacknowledged batch
            await self.sim.clock.sleep(0.01)  # retry.backoff.ms

    def window(self) -> int:
        """Requests from the oldest not fully acknowledged one to the newest.

        Requests to different brokers complete out of order, so counting unanswered requests is
        not enough: a later batch acknowledged while an earlier one is still pending (and perhaps
        committed, its answer lost) pushes that one towards the edge of the coordinator's window
        of 5 retained batches. Kafka's guarantee needs at most 5 batches from the oldest
        unacknowledged one on.
        """
        while self.oldest_unacked < len(self.requests) and all(
            b.acked_offset is not None for b in self.requests[self.oldest_unacked]
        ):
            self.oldest_unacked += 1
        return len(self.requests) - self.oldest_unacked

    async def run(self, request_count: int) -> None:
        rng = self.sim.rng
        # The first request goes alone and covers every partition: a producer without state on a
        # partition is accepted at any sequence, so no later batch may overtake its first one.
        self.new_request(every_partition=True)
        await self.resend_unacked()
        inflight: set[asyncio.Task[bool]] = set()
        failed = False
        for _ in range(request_count - 1):
            while inflight and (self.window() >= IN_FLIGHT_MAX or failed):
                done, inflight = await asyncio.wait(inflight, return_when=asyncio.FIRST_COMPLETED)
                failed = failed or not all(t.result() for t in done)
            failed = failed or self.window() >= IN_FLIGHT_MAX
            if failed:
                await self.resend_unacked()
                failed = False
            inflight.add(asyncio.ensure_future(self.send(self.new_request())))
            if rng.random() < 0.5:
                await self.sim.clock.sleep(rng.uniform(0.0, 0.05))
        if inflight:
            await asyncio.wait(inflight)
        await self.resend_unacked()


async def _audit(sim: Scenario, producers: list[Producer]) -> None:
    expected: dict[TopicPartition, dict[int, Batch]] = collections.defaultdict(dict)
    for producer in producers:
        for request in producer.requests:
            for batch in request:
                assert batch.acked_offset is not None, sim.fail(f"never acked: {batch}")
                slot = expected[batch.topic_partition]
                assert batch.acked_offset not in slot, sim.fail(
                    f"two batches acked at offset {batch.acked_offset} of {batch.topic_partition}"
                )
                slot[batch.acked_offset] = batch
    for tp, by_offset in expected.items():
        (response,) = await sim.coordinator.find_batches(
            [FindBatchesRequest(tp, 0, 1 << 40)], 1 << 40
        )
        assert response.error == ErrorCode.NONE, sim.fail(f"{tp}: {response}")
        next_offset = 0
        last_sequence: dict[int, int] = {}
        seen: set[int] = set()
        for info in response.batches:
            assert info.base_offset == next_offset, sim.fail(f"{tp}: gap before {info}")
            raw = bytearray(
                await sim.store.get_range(
                    info.object_key, info.byte_offset, info.byte_offset + info.size
                )
            )
            set_base_offset(raw, info.base_offset)
            base, values = decode_values(bytes(raw))
            batch = by_offset.get(base)
            assert batch is not None, sim.fail(f"{tp}: unacknowledged batch in the log at {base}")
            assert values == batch.values, sim.fail(f"{tp}@{base}: records differ")
            assert info.producer_id == batch.producer_id, sim.fail(f"{tp}@{base}: producer")
            previous = last_sequence.get(batch.producer_id, -1)
            assert batch.base_sequence > previous, sim.fail(
                f"{tp}@{base}: producer {batch.producer_id} order broken"
            )
            last_sequence[batch.producer_id] = batch.base_sequence
            seen.add(base)
            next_offset = info.last_offset + 1
        missing = sorted(set(by_offset) - seen)
        assert not missing, sim.fail(f"{tp}: acknowledged offsets missing {missing[:5]}")
        assert response.high_watermark == next_offset, sim.fail(f"{tp}: high watermark")


async def simulate(
    seed: int,
    *,
    requests_per_producer: int = 12,
    coordinator_of: Callable[[ManualClock], BatchCoordinator] = InMemoryBatchCoordinator,
) -> Scenario:
    """One run. The brokers reach the coordinator (`coordinator_of`) through its store wrapped
    in faults, so commits run the engine's real group step; the auditor reads it fault free."""
    rng = random.Random(seed)
    clock = ManualClock(SIM_START_MS)  # fixed, so that a seed replays exactly
    store = MemoryObjectStore(clock)
    coordinator = coordinator_of(clock)
    faulty_store = FaultyObjectStore(
        store,
        random.Random(rng.getrandbits(64)),
        clock=clock,
        latency_s=lambda r: r.uniform(0.002, 0.04),
        put_fail_rate=rng.choice([0.0, 0.05, 0.2]),
        put_lost_ack_rate=rng.choice([0.0, 0.05, 0.1]),
        slow_rate=rng.choice([0.0, 0.05, 0.2]),
        slow_latency_s=lambda r: r.uniform(0.2, 3.0),
    )
    faulty_coordinator = FaultyBatchCoordinator(
        coordinator,
        random.Random(rng.getrandbits(64)),
        commits=CallFaults(
            fail_rate=rng.choice([0.0, 0.05, 0.15]),
            lost_answer_rate=rng.choice([0.0, 0.05, 0.15]),
            latency_s=rng.uniform(0.001, 0.02),
        ),
    )
    buffer_max = rng.choice([600, 2000, 8000])
    config = WalConfig(
        buffer_max_bytes=buffer_max,
        commit_interval_ms=rng.choice([10, 50, 250]),
        linger_ms=rng.choice([0, 2, 20, 1000]),
        rotate_interval_min_ms=rng.choice([0, 5, 50]),
        rotate_floor_bytes=rng.choice([0, buffer_max // 2, 1 << 30]),
        uploads_inflight_max=rng.randint(1, 4),
        inflight_bytes_max=buffer_max * rng.randint(1, 4),
        upload_attempts=rng.randint(1, 3),
        upload_backoff_ms=rng.choice([5, 50]),
        upload_timeout_ms=rng.choice([300, 1000, 30_000]),
    )
    sim = Scenario(
        seed=seed,
        rng=rng,
        clock=clock,
        store=store,
        coordinator=coordinator,
        faulty_store=faulty_store,
        faulty_coordinator=faulty_coordinator,
        config=config,
        timeout_s=rng.choice([0.5, 2.0, 30.0]),
    )
    partitions = [TopicPartition(TOPIC, p) for p in range(rng.randint(1, 4))]
    await coordinator.create_topic(TOPIC, len(partitions))
    for broker_id in range(rng.randint(1, 3)):
        await sim.start_broker(broker_id)
    producers = sim.producers = [
        Producer(sim, 1000 + n, rng.sample(partitions, rng.randint(1, len(partitions))))
        for n in range(rng.randint(1, 4))
    ]

    async def restarts() -> None:
        """Now and then a broker restarts: the new incarnation fences the old one."""
        for _ in range(rng.randint(0, 2)):
            await clock.sleep(rng.uniform(0.05, 1.0))
            await sim.start_broker(rng.choice(sorted(sim.brokers)))

    await drive_deadlines(
        clock,
        asyncio.gather(restarts(), *(p.run(requests_per_producer) for p in producers)),
        max_s=36_000,
    )
    for writer in [*sim.retired, *sim.brokers.values()]:
        await drive_deadlines(clock, writer.close(flush=True))
        stats = writer.stats()
        # A batch larger than the limit is admitted alone, so that it cannot starve.
        limit = max(config.inflight_bytes_max, sim.largest_batch)
        assert stats.inflight_bytes_max_observed <= limit, sim.fail(
            f"in-flight bytes {stats.inflight_bytes_max_observed} > {limit}"
        )
        assert stats.inflight_bytes == 0, sim.fail("bytes left in flight after close")
    overdue = [d for d in sim.write_durations if d > sim.timeout_s + 1e-6]
    assert not overdue, sim.fail(f"writes past their {sim.timeout_s}s timeout: {overdue[:5]}")
    await _audit(sim, producers)
    return sim


async def _run(seed: int, requests_per_producer: int) -> None:
    """Every failure names its seed, including those raised outside the auditor's asserts."""
    try:
        await simulate(seed, requests_per_producer=requests_per_producer)
    except AssertionError as error:
        if f"seed={seed}" in str(error):
            raise
        raise AssertionError(f"seed={seed}: {error}") from error
    except Exception as error:
        raise AssertionError(f"seed={seed}: {error!r}") from error


@pytest.mark.seeds(SEEDS_DEFAULT)
async def test_simulation(seed: int) -> None:
    print(f"seed={seed}")
    await _run(seed, requests_per_producer=12)


@pytest.mark.slow
@pytest.mark.seeds(SEEDS_SLOW, first=10_000_000)
async def test_simulation_long(seed: int) -> None:
    print(f"seed={seed}")
    await _run(seed, requests_per_producer=60)


async def test_simulation_replays_exactly() -> None:
    """Same seed, same run: the store saw the same sequence of requests and bytes."""
    first = await simulate(42)
    second = await simulate(42)
    assert first.store.stats() == second.store.stats()
    assert first.write_durations == second.write_durations


async def test_the_auditor_catches_wrong_acknowledgements() -> None:
    """The auditor must be able to fail: a wrong acked offset or a forgotten batch is caught."""
    sim = await simulate(7)
    batch = sim.producers[0].requests[-1][0]
    assert batch.acked_offset is not None
    batch.acked_offset += 1000
    with pytest.raises(AssertionError, match="seed=7"):
        await _audit(sim, sim.producers)
    batch.acked_offset -= 1000
    await _audit(sim, sim.producers)
    forgotten = sim.producers[0].requests.pop(0)
    with pytest.raises(AssertionError, match="unacknowledged batch"):
        await _audit(sim, sim.producers)
    sim.producers[0].requests.insert(0, forgotten)
    sim.producers[0].requests[0], sim.producers[0].requests[-1] = (
        sim.producers[0].requests[-1],
        sim.producers[0].requests[0],
    )


async def test_a_group_commit_applied_by_half_fails_the_simulation() -> None:
    """The mutation check: the commit steps are the engine's real group steps, so a store that
    applies half of a group's objects, then fails, breaks what producers were told. Every run
    it tears must fail an assertion (the auditor's, mostly a gap in a partition, or one of the
    library's own that its reads hit); here, the first few seeds that tear a group."""
    torn_runs = 0
    for seed in range(40):
        broken = HalfGroupCoordinators()
        try:
            await simulate(seed, coordinator_of=broken)
        except AssertionError:
            assert broken.torn_groups > 0, f"seed={seed} failed, yet nothing was torn"
            torn_runs += 1
            if torn_runs == 3:
                return
            continue
        assert broken.torn_groups == 0, f"seed={seed}: a torn group commit went unnoticed"
    raise AssertionError(f"only {torn_runs} of 40 runs tore a group commit")
