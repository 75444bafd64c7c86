"""Integration: offsets a source no longer has (compacted away) stay absent on the destination,
and a real consumer reads across the gap, or from inside it, as from a compacted Kafka log: the
next record it gets is the next one that exists. Through the mirror's own steps (framing, the
WAL object, the mirrored append) and a broker's read path."""

from __future__ import annotations

import asyncio

from confluent_kafka import Consumer, KafkaError
from confluent_kafka import TopicPartition as CkTopicPartition

from diskless._types import TopicPartition
from diskless.coordinator import InMemoryBatchCoordinator, MirrorState
from diskless.mirror import mirrored_batches
from diskless.mirror._batches import placed
from diskless.records import set_base_offset
from diskless.storage import MemoryObjectStore
from diskless.wal import encode_segment
from testkit.batches import build_batch
from testkit.cluster import local_cluster
from testkit.commits import new_key

TOPIC = "compacted"
TP = TopicPartition(TOPIC, 0)


def _at(offset: int, values: list[bytes]) -> bytes:
    data = bytearray(build_batch(values, keys=[b"k%d" % i for i in range(len(values))]))
    set_base_offset(data, offset)
    return bytes(data)


def _read(bootstrap: str, start: int) -> list[tuple[int, bytes]]:
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": "gaps",
            "enable.partition.eof": True,
            "enable.auto.commit": False,
        }
    )
    got: list[tuple[int, bytes]] = []
    try:
        consumer.assign([CkTopicPartition(TOPIC, 0, start)])
        while True:
            (message,) = consumer.consume(1, 10) or [None]
            assert message is not None, f"no end reached after {got}"
            error = message.error()
            if error is not None:
                assert error.code() == KafkaError._PARTITION_EOF, error
                return got
            got.append((message.offset() or 0, message.value() or b""))
    finally:
        consumer.close()


async def test_a_consumer_reads_across_and_from_inside_a_gap() -> None:
    destination = InMemoryBatchCoordinator()
    store = MemoryObjectStore()
    async with local_cluster(destination, store=store) as cluster:
        await destination.create_topic(TOPIC, 1)
        claim = await destination.mirror_claim(TOPIC, "m")
        assert claim.mark is not None
        epoch = claim.mark.epoch
        await destination.mirror_set_state(TOPIC, "m", epoch, MirrorState.MIRRORING)
        # The source kept offsets 0..2 and 6..7 (3..5 compacted away).
        records = _at(0, [b"a", b"b", b"c"]) + _at(6, [b"g", b"h"])
        mirrored = mirrored_batches(TP, records, 0)
        data, index = encode_segment([m.entry for m in mirrored])
        key = new_key()
        await store.put(key, data)
        batches = placed(mirrored, [entry.byte_offset for entry in index])
        results = await destination.mirror_append("m", epoch, key, len(data), batches)
        assert all(r.ok for r in results), results
        bootstrap = cluster.bootstrap()
        everything = await asyncio.to_thread(_read, bootstrap, 0)
        assert everything == [(0, b"a"), (1, b"b"), (2, b"c"), (6, b"g"), (7, b"h")]
        assert await asyncio.to_thread(_read, bootstrap, 4) == [(6, b"g"), (7, b"h")]
