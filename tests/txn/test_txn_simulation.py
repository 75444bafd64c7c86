"""Simulation: transactional producers through three brokers under faults, on a virtual clock.

Faults: failed and slow PUTs, lost PUT acks; at the coordinator's store (each commit is the
engine's real group step), failed commits, commits whose answer is lost, commits that stall past
their lease (zombie brokers), and lease grants and releases that fail or lose their answer;
transactions also time out and are aborted by the transaction coordinator. Producers abort
whenever a produce fails, otherwise commit or abort at random. An auditor reads every partition
read_committed (one atomic snapshot, filtered as a consumer does) many times during the run and
once at the end, and checks:
- nothing of an aborted transaction is ever visible, and nothing of one whose commit was never
  requested;
- on each partition, what is visible of a transaction is a prefix of what it had acknowledged
  there, exactly once and in send order (a partition shows records only below its last stable
  offset, which an older open transaction may hold back);
- at the end, with no transaction open, every transaction whose commit succeeded is visible
  whole, and any visible one is whole.
The seed is printed; DISKLESS_SIM_SEED replays one.
"""

from __future__ import annotations

import asyncio
import collections
import random
from collections.abc import Sequence
from dataclasses import dataclass, field

import pytest

from diskless import BrokerConfig, DisklessBroker
from diskless._types import ErrorCode, IsolationLevel, TopicPartition
from diskless.clock import ManualClock
from diskless.coordinator import (
    BatchCoordinator,
    CallFaults,
    CommitFileResult,
    FaultyBatchCoordinator,
    FileCommit,
    InMemoryBatchCoordinator,
    StepFault,
    StoreCall,
)
from diskless.storage import FaultyObjectStore, MemoryObjectStore
from diskless.txn import TransactionCoordinator
from diskless.wal import WalConfig
from testkit.batches import build_batch
from testkit.clocks import drive_deadlines

from ._consumer import read_committed

SIM_START_MS = 1_700_000_000_000

SEEDS_DEFAULT = 40
SEEDS_FULL = 100
"""The default tests run the first `SEEDS_DEFAULT` seeds, the slow ones the rest of the first
`SEEDS_FULL` (and `SEEDS_SLOW` long runs); which faults fire is checked apart, over a few seeds."""
SEEDS_SLOW = 400
TOPIC = "sim"
PARTITIONS = 5
BROKERS = 3
CONFIG = BrokerConfig(
    wal=WalConfig(
        commit_interval_ms=20, upload_attempts=2, upload_timeout_ms=2_000, upload_backoff_ms=50
    ),
    request_timeout_ms=5_000,
)
TXN_TIMEOUT_MS = 4_000
STALL_S = 20.0
"""A stalled commit waits this long: past its lease (about 14 s with CONFIG)."""


class StallingCoordinator(FaultyBatchCoordinator):
    """The brokers' coordinator: at its store, commits fail, lose their answer or stall past
    their lease (a broker paused before its commit reaches the store), and the brokers' other
    writes (lease grants and releases) fail or lose their answer; it counts commit answers."""

    def __init__(
        self, inner: BatchCoordinator, rng: random.Random, clock: ManualClock, stall_rate: float
    ) -> None:
        faults = CallFaults(
            fail_rate=0.03, lost_answer_rate=0.03, slow_rate=stall_rate, slow_latency_s=STALL_S
        )
        leases = CallFaults(fail_rate=0.02, lost_answer_rate=0.02)
        super().__init__(inner, rng, commits=faults, writes=leases, clock=clock)
        self.errors: collections.Counter[ErrorCode] = collections.Counter()

    async def commit_files(
        self, broker_id: int, broker_epoch: int, files: Sequence[FileCommit]
    ) -> list[CommitFileResult]:
        outcomes = await super().commit_files(broker_id, broker_epoch, files)
        self.errors.update(r.error for outcome in outcomes for r in outcome.batches)
        return outcomes


@dataclass
class Txn:
    name: str
    acked: dict[TopicPartition, list[bytes]] = field(default_factory=dict)
    commit_requested: bool = False
    outcome: str = "open"
    """open, committed (end returned NONE with commit), aborted, or unknown."""


@dataclass
class World:
    seed: int
    clock: ManualClock
    tc: TransactionCoordinator
    brokers: list[DisklessBroker]
    reader: DisklessBroker
    coordinator: StallingCoordinator
    txns: dict[str, Txn] = field(default_factory=dict)
    snapshots: int = 0
    visible_max: int = 0

    def fail(self, message: str) -> str:
        return f"seed={self.seed}: {message}"


async def producer(world: World, index: int, rng: random.Random, transactions: int) -> None:
    name = f"p{index}"
    init = await world.tc.init_producer_id(name, TXN_TIMEOUT_MS)
    assert init.error is ErrorCode.NONE
    pid, epoch = init.producer_id, init.producer_epoch
    for k in range(transactions):
        txn = world.txns[f"{name}/{k}"] = Txn(f"{name}/{k}")
        partitions = [TopicPartition(TOPIC, p) for p in sorted(rng.sample(range(PARTITIONS), k=2))]
        ok = True
        added = await world.tc.add_partitions_to_txn(name, pid, epoch, partitions)
        ok = set(added) == {ErrorCode.NONE}
        sequences = dict.fromkeys(partitions, 0)
        for round_ in range(rng.randint(1, 3)):
            if not ok:
                break
            request = {}
            values_of = {}
            for tp in partitions:
                values = [f"{txn.name}/{round_}/{i}".encode() for i in range(rng.randint(1, 3))]
                values_of[tp] = values
                request[tp] = build_batch(
                    values,
                    producer_id=pid,
                    producer_epoch=epoch,
                    base_sequence=sequences[tp],
                    transactional=True,
                )
                sequences[tp] += len(values)
            results = await rng.choice(world.brokers).produce(request)
            for tp, result in results.items():
                if result.error is ErrorCode.NONE:
                    txn.acked.setdefault(tp, []).extend(values_of[tp])
                else:
                    ok = False  # an abortable error: this transaction must abort
            if rng.random() < 0.1:
                await world.clock.sleep(rng.uniform(1.0, 6.0))  # may outlive the timeout
        commit = ok and rng.random() < 0.6
        txn.commit_requested = commit
        ended = await world.tc.end_txn(name, pid, epoch, commit)
        if ended.error is ErrorCode.NONE:
            txn.outcome = "committed" if commit else "aborted"
            epoch = ended.producer_epoch
            continue
        # Fenced: the coordinator ended it first (a timeout abort); start over with a new epoch.
        txn.outcome = "aborted" if not commit else "unknown"
        init = await world.tc.init_producer_id(name, TXN_TIMEOUT_MS)
        assert init.error is ErrorCode.NONE, world.fail(f"re-init of {name}: {init}")
        pid, epoch = init.producer_id, init.producer_epoch


async def audit(world: World, *, final: bool) -> None:
    """One read_committed snapshot of every partition, checked against what producers know."""
    tps = [TopicPartition(TOPIC, p) for p in range(PARTITIONS)]
    fetched = await world.reader.fetch(
        dict.fromkeys(tps, 0),
        max_bytes=1 << 30,
        partition_max_bytes=1 << 30,
        isolation_level=IsolationLevel.READ_COMMITTED,
    )
    world.snapshots += 1
    visible: dict[str, dict[TopicPartition, list[bytes]]] = collections.defaultdict(dict)
    for tp in tps:
        result = fetched[tp]
        assert result.error is ErrorCode.NONE, world.fail(f"{tp}: {result}")
        for record in read_committed(result.records, result.aborted_transactions):
            assert record.value is not None
            name = record.value.decode().rsplit("/", 2)[0]
            visible[name].setdefault(tp, []).append(record.value)
    world.visible_max = max(world.visible_max, len(visible))
    for name, seen in visible.items():
        txn = world.txns.get(name)
        assert txn is not None, world.fail(f"records of an unknown transaction {name}")
        assert txn.commit_requested, world.fail(f"{name} is visible but never committed")
        assert txn.outcome != "aborted", world.fail(f"{name} was aborted, yet is visible")
        if final:
            assert seen == txn.acked, world.fail(f"{name} is partial: {seen} != {txn.acked}")
        for tp, values in seen.items():
            acked = txn.acked.get(tp, [])
            assert values == acked[: len(values)], world.fail(
                f"{name} on {tp}: {values} is not a prefix of the acknowledged {acked}"
            )
    if final:
        for name, txn in world.txns.items():
            if txn.outcome == "committed":
                assert name in visible, world.fail(f"committed {name} is not visible")


async def simulate(seed: int, transactions: int) -> World:
    rng = random.Random(seed)
    clock = ManualClock(SIM_START_MS)  # fixed, so that a seed replays exactly
    memory = MemoryObjectStore(clock)
    inner = InMemoryBatchCoordinator(clock=clock)
    assert await inner.create_topic(TOPIC, PARTITIONS) is ErrorCode.NONE
    store = FaultyObjectStore(
        memory,
        random.Random(rng.random()),
        clock=clock,
        latency_s=lambda r: r.uniform(0.005, 0.05),
        put_fail_rate=0.05,
        put_lost_ack_rate=0.03,
        slow_rate=0.03,
        slow_latency_s=3.0,  # past upload_timeout_ms: the attempt is abandoned
    )
    faulty = StallingCoordinator(inner, random.Random(rng.random()), clock, stall_rate=0.04)
    brokers = [DisklessBroker(i, store, faulty, CONFIG, clock=clock) for i in range(BROKERS)]
    reader = DisklessBroker(99, memory, inner, CONFIG, clock=clock)
    tc = TransactionCoordinator(inner, clock=clock)
    world = World(seed, clock, tc, brokers, reader, faulty)
    faulty.enabled = False  # the brokers start (register) without faults
    for broker in [*brokers, reader]:
        await broker.start()
    faulty.enabled = True
    await tc.start()
    running = True

    async def auditor() -> None:
        while running:
            await clock.sleep(0.3)
            await audit(world, final=False)

    audit_task = asyncio.ensure_future(auditor())
    try:
        await drive_deadlines(
            clock,
            asyncio.gather(
                *(producer(world, i, random.Random(rng.random()), transactions) for i in range(4))
            ),
            max_s=36_000,
        )
        running = False
        await drive_deadlines(clock, audit_task)
        await drive_deadlines(clock, tc.abort_expired())
        await audit(world, final=True)
    finally:
        running = False
        audit_task.cancel()
        await tc.close()
        for broker in [*brokers, reader]:
            await drive_deadlines(clock, broker.close())
    return world


async def _short_run(seed: int) -> None:
    print(f"seed={seed}")
    world = await simulate(seed, transactions=4)
    assert world.snapshots > 0


@pytest.mark.seeds(SEEDS_DEFAULT)
async def test_txn_simulation(seed: int) -> None:
    await _short_run(seed)


@pytest.mark.slow
@pytest.mark.seeds(SEEDS_FULL - SEEDS_DEFAULT, first=SEEDS_DEFAULT)
async def test_txn_simulation_more_seeds(seed: int) -> None:
    await _short_run(seed)


@pytest.mark.slow
@pytest.mark.seeds(SEEDS_SLOW, first=20_000_000)
async def test_txn_simulation_long(seed: int) -> None:
    print(f"seed={seed}")
    await simulate(seed, transactions=15)


async def test_the_simulation_exercises_both_outcomes_and_faults() -> None:
    """Across a few seeds, transactions commit, abort and time out, and faults fire."""
    outcomes: collections.Counter[str] = collections.Counter()
    errors: collections.Counter[ErrorCode] = collections.Counter()
    injected: collections.Counter[tuple[StoreCall, StepFault]] = collections.Counter()
    visible = 0
    for seed in range(5):
        world = await simulate(seed, transactions=6)
        outcomes.update(t.outcome for t in world.txns.values())
        errors.update(world.coordinator.errors)
        visible = max(visible, world.visible_max)
        injected.update(world.coordinator.store.injected)
    assert outcomes["committed"] > 0 and outcomes["aborted"] > 0, outcomes
    assert visible > 0 and injected[StoreCall.COMMIT, StepFault.SLOW] > 0
    assert injected[StoreCall.WRITE, StepFault.FAIL] > 0
    assert injected[StoreCall.WRITE, StepFault.LOST_ANSWER] > 0
    # Late commits were refused: by an expired lease, or after the marker bumped the epoch.
    assert errors[ErrorCode.INVALID_TXN_STATE] + errors[ErrorCode.INVALID_PRODUCER_EPOCH] > 0


async def test_the_auditor_catches_a_visible_aborted_transaction() -> None:
    """The auditor must be able to fail: pretend a committed transaction was aborted."""
    world = await simulate(1, transactions=6)
    committed = [t for t in world.txns.values() if t.outcome == "committed" and t.acked]
    assert committed
    committed[0].outcome = "aborted"
    with pytest.raises(AssertionError, match="aborted, yet is visible"):
        await audit_again(world)


async def audit_again(world: World) -> None:
    """Audit a finished world again through a fresh reader broker."""
    fresh = DisklessBroker(
        100, world.reader._store, world.reader._coordinator, CONFIG, clock=world.clock
    )
    await fresh.start()
    world.reader = fresh
    try:
        await audit(world, final=True)
    finally:
        await drive_deadlines(world.clock, fresh.close())
