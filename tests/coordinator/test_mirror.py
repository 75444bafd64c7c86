"""Conformance: mirrored topics (KIP-1279) on every backend.

A mirror claims a topic (an epoch that fences older processes), appends source batches at the
source's offsets (gaps kept, retries idempotent, conflicts refused), and the transaction indexes
follow the mirrored markers; clients may not write the topic until the mirror stops, which
aborts what mirrored producers left open.
"""

from __future__ import annotations

import msgspec

from diskless._types import ControlType, ErrorCode, IsolationLevel, TopicPartition
from diskless.coordinator import (
    BatchCoordinator,
    DeleteRecordsRequest,
    FindBatchesRequest,
    MirrorBatch,
    MirrorOutcome,
    MirrorState,
    TopicConfig,
    read_only_refusal,
)
from testkit.commits import Committer, batch, new_key

TOPIC = "mirrored"
TP = TopicPartition(TOPIC, 0)
TS = 1_700_000_000_000


def mb(
    base: int,
    last: int | None = None,
    *,
    size: int = 100,
    pid: int = -1,
    epoch: int = -1,
    seq: int = -1,
    txn: bool = False,
    control: ControlType | None = None,
    tp: TopicPartition = TP,
    ts: int = TS,
) -> MirrorBatch:
    last = base if last is None else last
    return MirrorBatch(
        tp,
        base,
        last,
        0,
        size,
        last - base + 1,
        ts,
        pid,
        epoch,
        seq,
        txn or control is not None,
        control,
    )


async def mirroring(coordinator: BatchCoordinator, name: str = "m1") -> int:
    """Create the topic and claim it for `name`, MIRRORING; the epoch."""
    assert await coordinator.create_topic(TOPIC, 2) == ErrorCode.NONE
    claim = await coordinator.mirror_claim(TOPIC, name)
    assert claim.mark is not None and not claim.refusal, claim
    assert claim.mark.state is MirrorState.PREPARING
    moved = await coordinator.mirror_set_state(TOPIC, name, claim.mark.epoch, MirrorState.MIRRORING)
    assert moved.mark is not None and moved.mark.state is MirrorState.MIRRORING
    return claim.mark.epoch


async def fetch(coordinator: BatchCoordinator, offset: int, committed: bool = False) -> list:  # type: ignore[type-arg]
    level = IsolationLevel.READ_COMMITTED if committed else IsolationLevel.READ_UNCOMMITTED
    (response,) = await coordinator.find_batches(
        [FindBatchesRequest(TP, offset, 1 << 20, level)], 1 << 20
    )
    return [response]


async def test_batches_land_at_the_source_offsets_with_gaps_kept(
    coordinator: BatchCoordinator,
) -> None:
    epoch = await mirroring(coordinator)
    # The source's log starts at 10 (retention), then compaction left 13..14 out.
    results = await coordinator.mirror_append(
        "m1", epoch, new_key(), 300, [mb(10, 12), mb(15, 16), mb(17)]
    )
    assert [r.outcome for r in results] == [MirrorOutcome.APPENDED] * 3
    assert results[-1].high_watermark == 18
    (offsets,) = await coordinator.partition_offsets([TP])
    assert offsets is not None
    assert (offsets.log_start_offset, offsets.high_watermark) == (10, 18)
    (response,) = await fetch(coordinator, 13)  # in the gap: from the next batch
    assert [b.base_offset for b in response.batches] == [15, 17]
    assert [(b.base_offset, b.last_offset) for b in (await fetch(coordinator, 10))[0].batches] == [
        (10, 12),
        (15, 16),
        (17, 17),
    ]


async def test_a_retry_is_a_duplicate_and_a_different_batch_a_conflict(
    coordinator: BatchCoordinator,
) -> None:
    epoch = await mirroring(coordinator)
    key = new_key()
    first = [mb(0, 4), mb(5, 9, pid=7, epoch=0, seq=0)]
    assert all(r.ok for r in await coordinator.mirror_append("m1", epoch, key, 200, first))
    # The same append again (its answer was lost): duplicates, nothing added.
    again = await coordinator.mirror_append("m1", epoch, key, 200, first)
    assert [r.outcome for r in again] == [MirrorOutcome.DUPLICATE] * 2
    # A retry overlapping the end, then new batches: the old ones duplicate, the new land.
    more = await coordinator.mirror_append(
        "m1", epoch, new_key(), 200, [mb(5, 9, pid=7, epoch=0, seq=0), mb(10)]
    )
    assert [r.outcome for r in more] == [MirrorOutcome.DUPLICATE, MirrorOutcome.APPENDED]
    # Different bytes at a mirrored offset: a conflict, and the partition's later batch waits.
    clash = await coordinator.mirror_append(
        "m1", epoch, new_key(), 200, [mb(0, 4, size=99), mb(11), mb(0, tp=TopicPartition(TOPIC, 1))]
    )
    assert [r.outcome for r in clash] == [
        MirrorOutcome.CONFLICT,
        MirrorOutcome.AFTER_REFUSAL,
        MirrorOutcome.APPENDED,
    ]
    (offsets,) = await coordinator.partition_offsets([TP])
    assert offsets is not None and offsets.high_watermark == 11
    # Below the log start nothing is left to compare: mirrored already.
    (deleted,) = await coordinator.delete_records([DeleteRecordsRequest(TP, 10)])
    assert deleted.error == ErrorCode.NONE
    late = await coordinator.mirror_append("m1", epoch, new_key(), 100, [mb(0, 4, size=1)])
    assert [r.outcome for r in late] == [MirrorOutcome.DUPLICATE]


async def test_a_stale_epoch_and_other_states_are_fenced(coordinator: BatchCoordinator) -> None:
    epoch = await mirroring(coordinator)
    claim = await coordinator.mirror_claim(TOPIC, "m1")  # a restarted mirror process
    assert claim.mark is not None and claim.mark.epoch == epoch + 1
    stale = await coordinator.mirror_append("m1", epoch, new_key(), 100, [mb(0)])
    assert [r.outcome for r in stale] == [MirrorOutcome.FENCED]
    preparing = await coordinator.mirror_append("m1", epoch + 1, new_key(), 100, [mb(0)])
    assert [r.outcome for r in preparing] == [MirrorOutcome.FENCED]
    assert (await coordinator.mirror_claim(TOPIC, "other")).refusal
    paused = await coordinator.mirror_set_state(TOPIC, "m1", epoch + 1, MirrorState.PAUSED)
    assert paused.mark is not None and paused.mark.state is MirrorState.PAUSED
    assert [
        r.outcome for r in await coordinator.mirror_append("m1", epoch + 1, new_key(), 1, [mb(0)])
    ] == [MirrorOutcome.FENCED]
    status = await coordinator.mirror_status(TOPIC)
    assert status is not None and status.state is MirrorState.PAUSED


async def test_a_topic_with_records_of_its_own_is_not_claimed(
    coordinator: BatchCoordinator,
) -> None:
    assert await coordinator.create_topic(TOPIC, 1) == ErrorCode.NONE
    await Committer(coordinator).one(batch(TP))
    claim = await coordinator.mirror_claim(TOPIC, "m1")
    assert claim.mark is None and "records of its own" in claim.refusal


async def test_the_mark_survives_config_changes_and_stopping_makes_the_topic_writable(
    coordinator: BatchCoordinator,
) -> None:
    epoch = await mirroring(coordinator)
    await coordinator.mirror_append("m1", epoch, new_key(), 100, [mb(0, 4, pid=3, epoch=0, seq=0)])
    (described,) = await coordinator.describe_topics([TOPIC])
    assert read_only_refusal(described.config) is not None
    version = await coordinator.config_version()
    # A config change by a client keeps the mark.
    bare = msgspec.structs.replace(described.config, inapplicable_configs=())
    await coordinator.alter_topic_config(TOPIC, msgspec.structs.replace(bare, retention_ms=5))
    (described,) = await coordinator.describe_topics([TOPIC])
    assert described.config.retention_ms == 5
    assert read_only_refusal(described.config) is not None
    stopped = await coordinator.mirror_stop(TOPIC, "m1")
    assert stopped.mark is not None and stopped.mark.state is MirrorState.STOPPED
    assert await coordinator.config_version() > version  # brokers drop their cached copy
    (described,) = await coordinator.describe_topics([TOPIC])
    assert read_only_refusal(described.config) is None
    # Writable: a new producer (its id above every mirrored one) continues at the end.
    pid = await coordinator.allocate_producer_ids(1)
    assert pid > 3
    written = await Committer(coordinator).one(batch(TP, pid=pid, epoch=0, seq=0))
    assert (written.error, written.base_offset) == (ErrorCode.NONE, 5)
    # Stopped for good: neither the mirror nor another claims it again.
    assert (await coordinator.mirror_claim(TOPIC, "m1")).refusal
    after = await coordinator.mirror_append("m1", epoch, new_key(), 100, [mb(6)])
    assert [r.outcome for r in after] == [MirrorOutcome.FENCED]


async def test_mirrored_markers_rebuild_the_lso_and_the_aborted_index(
    coordinator: BatchCoordinator,
) -> None:
    epoch = await mirroring(coordinator)
    appended = await coordinator.mirror_append(
        "m1",
        epoch,
        new_key(),
        600,
        [
            mb(0, 1, pid=5, epoch=0, seq=0, txn=True),  # 5 opens at 0
            mb(2, pid=6, epoch=0, seq=0, txn=True),  # 6 opens at 2
            mb(3, pid=5, epoch=1, control=ControlType.ABORT),  # 5 aborted
            mb(4, 5, pid=9, epoch=0, seq=0),  # idempotent, not transactional
        ],
    )
    assert all(r.ok for r in appended), appended
    (response,) = await fetch(coordinator, 0, committed=True)
    assert response.high_watermark == 6
    assert response.last_stable_offset == 2  # 6's transaction is open
    assert response.aborted_transactions == [(5, 0)]
    await coordinator.mirror_append(
        "m1", epoch, new_key(), 100, [mb(6, pid=6, epoch=1, control=ControlType.COMMIT)]
    )
    (response,) = await fetch(coordinator, 0, committed=True)
    assert response.last_stable_offset == 7


async def test_stopping_aborts_what_mirrored_producers_left_open(
    coordinator: BatchCoordinator,
) -> None:
    epoch = await mirroring(coordinator)
    await coordinator.mirror_append(
        "m1", epoch, new_key(), 100, [mb(0, 2, pid=11, epoch=4, seq=0, txn=True)]
    )
    (response,) = await fetch(coordinator, 0, committed=True)
    assert response.last_stable_offset == 0
    stopped = await coordinator.mirror_stop(TOPIC, "m1")
    assert stopped.mark is not None and stopped.mark.state is MirrorState.STOPPED
    (response,) = await fetch(coordinator, 0, committed=True)
    assert (response.high_watermark, response.last_stable_offset) == (4, 4)
    assert response.aborted_transactions == [(11, 0)]
    marker = response.batches[-1]
    assert (marker.base_offset, marker.control) == (3, ControlType.ABORT)
    # A second stop changes nothing.
    again = await coordinator.mirror_stop(TOPIC, "m1")
    assert again.mark == stopped.mark and not again.refusal


async def test_a_topic_created_with_a_config_keeps_it_after_the_claim(
    coordinator: BatchCoordinator,
) -> None:
    config = TopicConfig(retention_ms=60_000, inapplicable_configs=(("segment.bytes", "1"),))
    assert await coordinator.create_topic(TOPIC, 1, config) == ErrorCode.NONE
    claim = await coordinator.mirror_claim(TOPIC, "m1")
    assert claim.mark is not None
    (described,) = await coordinator.describe_topics([TOPIC])
    assert described.config.retention_ms == 60_000
    assert described.config.kept_config("segment.bytes") == "1"
    assert described.config.kept_config("mirror.name") == "m1"


async def test_no_client_transaction_registers_a_mirrored_partition(
    coordinator: BatchCoordinator,
) -> None:
    await mirroring(coordinator)
    pid = await coordinator.allocate_producer_ids(1)
    other = TopicPartition("elsewhere", 0)
    assert await coordinator.create_topic("elsewhere", 1) == ErrorCode.NONE
    assert await coordinator.add_partitions_to_txn(pid, 0, [TP, other]) == [
        ErrorCode.INVALID_TOPIC_EXCEPTION,
        ErrorCode.NONE,
    ]
    await coordinator.mirror_stop(TOPIC, "m1")
    assert await coordinator.add_partitions_to_txn(pid, 0, [TP]) == [ErrorCode.NONE]


async def test_stopping_forgets_mirrored_producers_so_their_ids_start_afresh(
    coordinator: BatchCoordinator,
) -> None:
    """The MIRROR_PID_RESET barrier: a destination producer given a mirrored producer's id (a
    broker reserved the block before the id was mirrored) is not taken for it."""
    epoch = await mirroring(coordinator)
    await coordinator.mirror_append(
        "m1", epoch, new_key(), 200, [mb(0, 4, pid=7, epoch=3, seq=0), mb(5, pid=8, epoch=0, seq=0)]
    )
    assert {p.producer_id for p in await coordinator.describe_producers(TP)} == {7, 8}
    await coordinator.mirror_stop(TOPIC, "m1")
    assert await coordinator.describe_producers(TP) == []
    committer = Committer(coordinator)
    fresh = await committer.one(batch(TP, pid=7, epoch=0, seq=0))
    assert (fresh.error, fresh.base_offset) == (ErrorCode.NONE, 6)
    again = await committer.one(batch(TP, pid=8, epoch=0, seq=0))  # seq 0 again: not a duplicate
    assert (again.error, again.base_offset, again.duplicate) == (ErrorCode.NONE, 7, False)
