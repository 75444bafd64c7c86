"""Group offsets synced from a source cluster (seed 004's clamp), through real parts: a source
diskless cluster whose groups commit offsets with a real client, and a destination coordinator
whose mirrored partition holds offsets [10, 20).

    synced = max(destinationLogStart, min(sourceCommitted, destinationLogEnd))

Committed beyond the destination's end: the end (a failover re-reads at most the lag, and never
resets past unread records). Below its log start: the log start. In between: as committed. A
group active on the destination (members joined it there), or excluded by the patterns, is
left alone; one only looked up there is not active.
"""

from __future__ import annotations

import asyncio

import pytest
from confluent_kafka import Consumer
from confluent_kafka import TopicPartition as CkTopicPartition

from diskless._types import CommittedOffset, ErrorCode, GroupOwnership, TopicPartition
from diskless.coordinator import InMemoryBatchCoordinator, MirrorBatch, MirrorState
from diskless.mirror import GroupFilter, SourceCluster, sync_groups, synced_offset
from testkit.cluster import local_cluster
from testkit.commits import new_key

TOPIC = "synced"
TP = TopicPartition(TOPIC, 0)


@pytest.mark.parametrize(
    ("committed", "expected"),
    [(150, 100), (5, 10), (42, 42), (10, 10), (100, 100)],
    ids=["beyond-the-end", "below-the-log-start", "in-between", "at-the-start", "at-the-end"],
)
def test_the_clamp(committed: int, expected: int) -> None:
    assert synced_offset(committed, 10, 100) == expected


def _commit(bootstrap: str, group: str, offset: int) -> None:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": group})
    try:
        consumer.commit(offsets=[CkTopicPartition(TOPIC, 0, offset)], asynchronous=False)
    finally:
        consumer.close()


async def test_inactive_admitted_groups_get_the_clamped_offsets() -> None:
    destination = InMemoryBatchCoordinator()
    async with local_cluster() as source_cluster, local_cluster(destination) as dest_cluster:
        await source_cluster.create_topic(TOPIC, 1)
        await destination.create_topic(TOPIC, 1)
        claim = await destination.mirror_claim(TOPIC, "m")
        assert claim.mark is not None
        epoch = claim.mark.epoch
        await destination.mirror_set_state(TOPIC, "m", epoch, MirrorState.MIRRORING)
        batch = MirrorBatch(TP, 10, 19, 0, 100, 10, 1)
        (appended,) = await destination.mirror_append("m", epoch, new_key(), 100, [batch])
        assert appended.ok
        bootstrap = source_cluster.bootstrap()
        for group, offset in [
            ("beyond", 30),
            ("below", 1),
            ("between", 15),
            ("excluded-1", 12),
            ("active", 16),
            ("probed", 17),
        ]:
            await asyncio.to_thread(_commit, bootstrap, group, offset)
        # "active" has members on the destination (a rebalance there), and an offset of its
        # own; "probed" was only looked up there (its coordinator found, no member joined).
        broker = dest_cluster.live[0].broker
        for group in ("active", "probed"):
            owner = await destination.claim_group(group, broker.broker_id, broker.broker_epoch)
            assert owner is not None
        joined = GroupOwnership(broker.broker_id, broker.broker_epoch, 1)
        assert await destination.store_group_generation("active", joined) == ErrorCode.NONE
        await destination.commit_offsets("active", {TP: CommittedOffset(11)})
        source = SourceCluster(bootstrap)
        try:
            await source.metadata([TOPIC])
            result = await sync_groups(
                source, destination, [TOPIC], GroupFilter(exclude=r"excluded-.*")
            )
            assert result.skipped_active == ["active"]
            assert result.synced == {
                "beyond": {TP: 20},
                "below": {TP: 10},
                "between": {TP: 15},
                "probed": {TP: 17},
            }
            for group, offset in [("beyond", 20), ("below", 10), ("between", 15), ("active", 11)]:
                committed = (await destination.fetch_offsets(group))[TP]
                assert committed.offset == offset, group
                assert committed.leader_epoch == -1
            assert await destination.fetch_offsets("excluded-1") == {}
            # Nothing changed since: nothing written again.
            again = await sync_groups(
                source, destination, [TOPIC], GroupFilter(exclude=r"excluded-.*")
            )
            assert again.synced == {}
        finally:
            await source.close()
