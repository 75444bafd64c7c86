"""The engine's topics: creating, growing, reconfiguring, describing and deleting them.

Topics have no rules of their own beyond a new topic's name and partition count
(`_rules.checks`); deleting one deletes its partitions' batches, which releases the files they
referred to (`files`). A change of a topic's config increments `CONFIG_VERSION_COUNTER` in its
step, as a change of a broker's or group's configs does: a process told only that something
changed compares it to know whether its copies of topics are stale.
"""

from __future__ import annotations

import uuid
from collections import Counter
from collections.abc import Sequence

from diskless._types import ErrorCode, TopicPartition
from diskless.coordinator._engine.files import FileOperations
from diskless.coordinator._rules.checks import check_new_topic
from diskless.coordinator._rules.mirror import keep_mark
from diskless.coordinator._store import OFFSET_END, Changes, Needs, Operation, StoreStep, TopicRow
from diskless.coordinator._values import CONFIG_VERSION_COUNTER, TopicConfig, TopicDescription


class TopicOperations(FileOperations):
    async def create_topic(
        self, name: str, partitions: int, config: TopicConfig | None = None
    ) -> ErrorCode:
        check_new_topic(name, partitions)
        row = TopicRow(
            name, partitions, config if config is not None else TopicConfig(), uuid.uuid4()
        )

        async def create(db: StoreStep) -> ErrorCode:
            if name in (await db.load(Needs(topics={name}))).topics:
                return ErrorCode.TOPIC_ALREADY_EXISTS
            await db.apply(Changes(topics_created=[row]))
            return ErrorCode.NONE

        return await self._write(Operation.CREATE_TOPIC, create)

    async def create_partitions(self, name: str, total_partitions: int) -> ErrorCode:
        async def grow(db: StoreStep) -> ErrorCode:
            topic = (await db.load(Needs(topics={name}))).topics.get(name)
            if topic is None:
                return ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
            if total_partitions <= topic.partition_count:
                return ErrorCode.INVALID_PARTITIONS
            await db.apply(Changes(partitions_added=[(name, total_partitions)]))
            return ErrorCode.NONE

        return await self._write(Operation.CREATE_PARTITIONS, grow)

    async def alter_topic_config(
        self, name: str, config: TopicConfig, expected: TopicConfig | None = None
    ) -> TopicConfig | None:
        needs = Needs(topics={name}, counters=(CONFIG_VERSION_COUNTER,))

        async def alter(db: StoreStep) -> TopicConfig | None:
            snapshot = await db.load(needs)
            topic = snapshot.topics.get(name)
            if topic is None:
                return None
            if expected is not None and topic.config != expected:
                return topic.config  # another change came first: the caller decides again
            wanted = keep_mark(topic.config, config)
            if topic.config != wanted:
                version = snapshot.counters.get(CONFIG_VERSION_COUNTER, 0) + 1
                await db.apply(
                    Changes(
                        topic_configs={name: wanted}, counters={CONFIG_VERSION_COUNTER: version}
                    )
                )
            return config  # as asked: the mark (`keep_mark`) is none of the caller's business

        return await self._write(Operation.ALTER_TOPIC_CONFIG, alter)

    async def describe_topics(self, names: Sequence[str] | None = None) -> list[TopicDescription]:
        rows = await self._read(lambda view: view.topics(names))
        return [TopicDescription(r.name, r.partition_count, r.config, r.topic_id) for r in rows]

    async def delete_topics(self, names: Sequence[str]) -> list[ErrorCode]:
        async def delete(db: StoreStep) -> list[ErrorCode]:
            now = self._clock.now_ms()
            topics = (await db.load(Needs(topics=set(names)))).topics
            results = [
                ErrorCode.NONE if name in topics else ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
                for name in names
            ]
            if not topics:
                return results
            tps = {
                TopicPartition(t.name, i) for t in topics.values() for i in range(t.partition_count)
            }
            keys = [s.key for s in (await db.load(Needs(partitions=tps))).partitions.values()]
            refs = (await db.load(Needs(batch_refs=dict.fromkeys(keys, OFFSET_END)))).batch_refs
            released: Counter[str] = Counter()
            for partition_refs in refs.values():
                released.update(partition_refs.files)
            files = await self._released_files(db, released, now)
            await db.apply(Changes(topics_deleted=list(topics), files=files))
            return results

        return await self._write(Operation.DELETE_TOPICS, delete)
