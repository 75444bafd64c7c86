"""A broker dies mid-run; idempotent producers carry on through the others, losing nothing.

Integration test. Killing resets every connection of the broker at once, answered or not, and
stops its listener. Then either what its WAL had accepted still commits (`flush`: responses lost
on the way, so the producers' retries elsewhere are duplicates the coordinator must recognise) or
it fails (`crash`: nothing unanswered is committed, the retries are first writes). Either way the
metadata from the live brokers names new leaders and every record lands exactly once.
"""

from __future__ import annotations

import asyncio

import pytest

from diskless.kafka_server import ApiKey, KafkaCluster
from testkit.clients import confluent_consume, confluent_produce
from testkit.cluster import end_offsets

PARTITIONS = 12
PER_PRODUCER = 30_000
ACKED_BEFORE_KILL = 1_000
VICTIM = 0


@pytest.mark.parametrize("flush", [True, False], ids=["flush", "crash"])
async def test_producers_survive_a_broker_kill_without_loss_or_duplicates(
    cluster: KafkaCluster, flush: bool
) -> None:
    topic = "survivors"
    await cluster.create_topic(topic, PARTITIONS)
    racks = cluster.racks
    names = [f"producer-{rack}" for rack in racks]
    acked: list[list[int]] = [[] for _ in racks]
    producing = [
        asyncio.create_task(
            asyncio.to_thread(
                confluent_produce,
                cluster.bootstrap(rack),
                topic,
                name,
                PER_PRODUCER,
                PARTITIONS,
                rack=rack,
                # Small batches keep many requests in flight when the broker dies.
                extra={"batch.num.messages": 200, "linger.ms": 1},
                acknowledged=progress,
            )
        )
        for rack, name, progress in zip(racks, names, acked, strict=True)
    ]
    victim = cluster.servers[VICTIM]
    while not victim.received(ApiKey.PRODUCE) or min(len(a) for a in acked) < ACKED_BEFORE_KILL:
        assert not any(t.done() for t in producing), "a producer finished before the kill"
        await asyncio.sleep(0.01)
    await cluster.kill(VICTIM, flush=flush)
    # Counted once it is dead: a request read while its connections were being reset counts.
    requests_at_kill = sum(victim.received(ApiKey.PRODUCE).values())
    results = await asyncio.gather(*producing)
    assert requests_at_kill > 0
    assert sum(victim.received(ApiKey.PRODUCE).values()) == requests_at_kill  # none after
    for result in results:
        assert sorted(result) == list(range(PER_PRODUCER))
    ends = await end_offsets(cluster, topic, PARTITIONS)
    assert sum(ends.values()) == PER_PRODUCER * len(racks)
    audit = await asyncio.to_thread(confluent_consume, cluster.bootstrap(), topic, ends)
    audit.check(dict(zip(names, results, strict=True)))
    # The live brokers took over the produce path.
    assert all(cluster.servers[b].received(ApiKey.PRODUCE) for b in cluster.servers if b != VICTIM)
