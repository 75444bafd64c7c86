"""The mirror: fetch from the source, upload as a WAL object, append at the source's offsets.

KIP-1279's states, per run: PREPARING (each topic claimed at a new epoch, which fences any older
mirror process; the destination's end checked against the source's), MIRRORING, PAUSED (no
appends, the topics stay read-only), STOPPED (failover: the topics become writable for good).

Progress lives in the coordinator and nowhere else: a partition's mirrored end *is* its high
watermark, because batches land at the source's offsets in one atomic step with their object.
A restarted mirror (SIGKILL at any point) resumes from those ends: no gap, and no duplicate (an
object uploaded but never committed is an orphan the file manager reclaims; an append whose
answer was lost is retried as it was, and answers DUPLICATE if it had landed).

Memory is bounded by `fetchers` x `fetch_max_bytes`, times the few copies one response goes
through (its frame, its batches with their leader epochs cleared, the object built from them):
each fetcher holds one fetch response at a time, and the fetchers share the partitions
(KIP-1279: fetcher threads multiplex partitions). The destination follows the source's log
start (retention, DeleteRecords) with DeleteRecords of its own.

The destination's leader epoch never falls below the source's (KIP-1279): a client that moves
over with a position tagged by the source's epoch must not be answered UNKNOWN_LEADER_EPOCH for
good. The destination's epoch is its membership version, one for every partition, so the mirror
raises it (`BatchCoordinator.raise_membership_version`) to the highest source epoch it learned:
from the source's Metadata (at PREPARING, at each leader refresh and each group sync round) and
from the batches' own partition leader epochs, before the batches land.
"""

from __future__ import annotations

import asyncio
import logging
import secrets
from collections.abc import Sequence
from typing import Final

import msgspec

from diskless._object_keys import new_object_key
from diskless._types import ErrorCode, TopicPartition
from diskless.clock import Clock, SystemClock, sleep_unless
from diskless.coordinator import (
    BatchCoordinator,
    DeleteRecordsRequest,
    MirrorBatch,
    MirrorOutcome,
    MirrorState,
    TopicConfig,
)
from diskless.errors import CommitOutcomeUnknownError, DisklessError
from diskless.metrics import NULL_METRICS, Metrics
from diskless.mirror._batches import Mirrored, mirrored_batches, placed
from diskless.mirror._groups import GroupFilter, GroupSync, sync_groups
from diskless.mirror._source import SourceCluster, SourceError
from diskless.storage import ObjectStore
from diskless.wal import encode_segment

_log = logging.getLogger(__name__)

FETCHERS_MAX: Final = 64
FETCH_BYTES_MAX: Final = 64 * 1024 * 1024
_RETRY_S: Final = 0.5


class MirrorError(DisklessError):
    """The mirror cannot go on: the destination holds what the source does not (a conflict), or
    another process took the topics over (fenced)."""


class MirrorConfig(msgspec.Struct, frozen=True, kw_only=True):
    name: str
    topics: tuple[str, ...]
    groups: GroupFilter = GroupFilter()
    fetchers: int = 1
    fetch_max_bytes: int = 8 * 1024 * 1024
    """A fetch response's most (Kafka's fetch.max.bytes): with `fetchers`, the memory bound."""
    partition_max_bytes: int = 1024 * 1024
    fetch_max_wait_ms: int = 500
    group_sync_interval_ms: int = 5_000
    node_id: int = 0
    """Written in the names of the objects the mirror uploads (`new_object_key`)."""

    def __post_init__(self) -> None:
        if not self.name or not self.topics:
            raise ValueError("a mirror needs a name and at least one topic")
        if not 1 <= self.fetchers <= FETCHERS_MAX:
            raise ValueError(f"fetchers must be within 1..{FETCHERS_MAX}")
        if not 1 <= self.partition_max_bytes <= self.fetch_max_bytes <= FETCH_BYTES_MAX:
            raise ValueError(
                f"need 1 <= partition_max_bytes <= fetch_max_bytes <= {FETCH_BYTES_MAX}"
            )


class PartitionLag(msgspec.Struct, frozen=True):
    topic_partition: TopicPartition
    mirrored_end: int
    source_end: int

    @property
    def records(self) -> int:
        """Offsets the source holds beyond what is mirrored."""
        return max(0, self.source_end - self.mirrored_end)


class Mirror:
    """One mirror of `config.topics` from `source` into the destination's coordinator and
    store. `run` mirrors until `stop` (failover), `close`, or a `MirrorError`."""

    def __init__(
        self,
        source: SourceCluster,
        coordinator: BatchCoordinator,
        store: ObjectStore,
        config: MirrorConfig,
        *,
        clock: Clock | None = None,
        metrics: Metrics = NULL_METRICS,
    ) -> None:
        self._source = source
        self._coordinator = coordinator
        self._store = store
        self.config = config
        self._clock = clock or SystemClock()
        self._metrics = metrics
        self.state = MirrorState.PREPARING
        self._epochs: dict[str, int] = {}
        self._ends: dict[TopicPartition, int] = {}
        """Mirrored end (the destination's high watermark) per partition."""
        self._source_ends: dict[TopicPartition, int] = {}
        self._log_starts: dict[TopicPartition, int] = {}
        """The destination's log start, as far as this mirror moved it (or found it)."""
        self._positions: dict[TopicPartition, int] = {}
        """Where to fetch from when the source no longer has the mirrored end."""
        self._leaders: dict[TopicPartition, int] = {}
        self._epoch_floor = -1
        """The destination's membership version is known to be at least this."""
        self._resumed = asyncio.Event()
        self._resumed.set()
        self._closing = False
        self._closed = asyncio.Event()
        """Set with `_closing`: wakes the group sync's wait between rounds."""
        self.last_group_sync: GroupSync | None = None

    # --- states -------------------------------------------------------------------------------
    async def prepare(self) -> None:
        """PREPARING: create missing destination topics (the source's partition counts), claim
        every topic at a new epoch, check the ends, then MIRRORING."""
        metadata = await self._source.metadata(self.config.topics)
        if metadata.missing:
            raise MirrorError(f"the source lacks topics: {sorted(metadata.missing)}")
        self._leaders = dict(metadata.leaders)
        counts: dict[str, int] = {}
        for tp in metadata.leaders:
            counts[tp.topic] = max(counts.get(tp.topic, 0), tp.partition + 1)
        for topic in self.config.topics:
            code = await self._coordinator.create_topic(topic, counts[topic], TopicConfig())
            if code not in (ErrorCode.NONE, ErrorCode.TOPIC_ALREADY_EXISTS):
                raise MirrorError(f"cannot create {topic!r} on the destination: {code.name}")
            claim = await self._coordinator.mirror_claim(topic, self.config.name)
            if claim.mark is None or claim.refusal:
                raise MirrorError(f"cannot mirror {topic!r}: {claim.refusal}")
            self._epochs[topic] = claim.mark.epoch
        await self._keep_epoch(metadata.leader_epoch)
        tps = sorted(metadata.leaders)
        for tp, offsets in zip(tps, await self._coordinator.partition_offsets(tps), strict=True):
            if offsets is None:
                raise MirrorError(f"the destination lacks {tp} (fewer partitions than the source)")
            self._ends[tp] = offsets.high_watermark
            self._log_starts[tp] = offsets.log_start_offset
        # Diskless logs are never truncated at their end, and nothing but this mirror writes
        # them, so the destination holds no end the source never had; unless the source lost
        # its end (an unclean election). PREPARING checks that, and ends the mirror rather
        # than truncating (at a later fetch too: `_out_of_range`, or a CONFLICT).
        for tp, end in self._ends.items():
            source_end = await self._source.log_offset(self._leaders[tp], tp, latest=True)
            if end > source_end:
                raise MirrorError(
                    f"{tp}: the destination holds offsets up to {end}, the source ends at"
                    f" {source_end}"
                )
            self._source_ends[tp] = source_end
        await self._set_state(MirrorState.MIRRORING)

    async def pause(self) -> None:
        """PAUSED: no appends (a round in flight is refused, and fetched again on resume), the
        topics still read-only."""
        self._resumed.clear()
        self.state = MirrorState.PAUSED
        await self._set_state(MirrorState.PAUSED)

    async def resume(self) -> None:
        await self._set_state(MirrorState.MIRRORING)
        self._resumed.set()

    async def stop(self) -> None:
        """Failover: every topic becomes writable (mirrored open transactions aborted)."""
        self._closing = True
        self._closed.set()
        self._resumed.set()
        for topic in self.config.topics:
            done = await self._coordinator.mirror_stop(topic, self.config.name)
            if done.refusal:
                raise MirrorError(f"cannot stop mirroring {topic!r}: {done.refusal}")
        self.state = MirrorState.STOPPED

    def close(self) -> None:
        """End `run` at its next step, leaving the topics as they are (a restart resumes)."""
        self._closing = True
        self._closed.set()
        self._resumed.set()

    async def _set_state(self, state: MirrorState) -> None:
        for topic, epoch in self._epochs.items():
            moved = await self._coordinator.mirror_set_state(topic, self.config.name, epoch, state)
            if moved.refusal:
                raise MirrorError(f"fenced on {topic!r}: {moved.refusal}")
        self.state = state

    # --- figures ------------------------------------------------------------------------------
    def lag(self) -> list[PartitionLag]:
        return [
            PartitionLag(tp, end, self._source_ends.get(tp, end))
            for tp, end in sorted(self._ends.items())
        ]

    # --- the loop -----------------------------------------------------------------------------
    async def run(self) -> None:
        """Mirror until closed or stopped: the fetchers, and the group offset sync."""
        if self.state is MirrorState.PREPARING:
            await self.prepare()
        shares: list[list[TopicPartition]] = [[] for _ in range(self.config.fetchers)]
        for i, tp in enumerate(sorted(self._ends)):
            shares[i % len(shares)].append(tp)
        tasks = [
            asyncio.create_task(self._fetcher(share, f"fetch-{i}"))
            for i, share in enumerate(shares)
            if share
        ]
        tasks.append(asyncio.create_task(self._group_syncer()))
        try:
            done, _ = await asyncio.wait(tasks, return_when=asyncio.FIRST_EXCEPTION)
            for task in done:
                task.result()
        finally:
            # Closing first: a cancellation that `asyncio.wait_for` swallows (its inner call
            # done at the same moment) must not leave a loop running.
            self._closing = True
            self._closed.set()
            self._resumed.set()
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)

    async def _fetcher(self, partitions: Sequence[TopicPartition], lane: str) -> None:
        while not self._closing:
            await self._resumed.wait()
            if self._closing:
                return
            try:
                # No pause between rounds: a fetch with nothing to return waits at the source
                # (its max wait) and answers as soon as records arrive.
                await self._round(partitions, lane)
            except SourceError as error:
                _log.warning("mirror %s: the source failed: %s", self.config.name, error)
                await self._refresh_leaders()
                await self._clock.sleep(_RETRY_S)

    async def _refresh_leaders(self) -> None:
        try:
            metadata = await self._source.metadata(self.config.topics)
        except SourceError as error:
            _log.warning("mirror %s: no source metadata: %s", self.config.name, error)
            return
        self._leaders.update(metadata.leaders)
        await self._keep_epoch(metadata.leader_epoch)

    async def _keep_epoch(self, source_epoch: int) -> None:
        """Raise the destination's leader epoch to at least `source_epoch` (KIP-1279)."""
        if source_epoch <= self._epoch_floor:
            return
        while True:
            try:
                version = await self._coordinator.raise_membership_version(source_epoch)
                break
            except CommitOutcomeUnknownError:
                await self._clock.sleep(_RETRY_S)  # raising again is harmless
        self._epoch_floor = max(self._epoch_floor, version)

    async def _round(self, partitions: Sequence[TopicPartition], lane: str) -> bool:
        """One fetch per source broker leading some of `partitions`, each appended in one
        object; whether any batch was mirrored."""
        by_leader: dict[int, dict[TopicPartition, int]] = {}
        for tp in partitions:
            position = max(self._ends[tp], self._positions.get(tp, 0))
            by_leader.setdefault(self._leaders.get(tp, -1), {})[tp] = position
        progressed = False
        for leader, offsets in by_leader.items():
            fetched = await self._source.fetch(
                leader,
                offsets,
                self.config.fetch_max_bytes,
                self.config.partition_max_bytes,
                self.config.fetch_max_wait_ms,
                lane,
            )
            mirrored: list[Mirrored] = []
            for tp, answer in fetched.items():
                if answer.error == ErrorCode.NOT_LEADER_OR_FOLLOWER:
                    await self._refresh_leaders()
                    await self._clock.sleep(_RETRY_S / 5)  # leadership may still be moving
                    continue
                if answer.error == ErrorCode.OFFSET_OUT_OF_RANGE:
                    await self._out_of_range(leader, tp, offsets[tp])
                    continue
                if answer.error != ErrorCode.NONE:
                    raise SourceError(f"{tp}: the source answered {answer.error.name}")
                self._source_ends[tp] = answer.high_watermark
                mirrored += mirrored_batches(tp, answer.records, self._ends[tp], offsets[tp])
                if answer.log_start_offset > 0:
                    await self._follow_log_start(tp, answer.log_start_offset)
            if mirrored:
                await self._append(mirrored)
                progressed = True
            self._report_lag(offsets)
        return progressed

    async def _out_of_range(self, leader: int, tp: TopicPartition, position: int) -> None:
        """The source has no offset `position`: below its log start, its records are gone
        (follow the log start); past its end, the source lost records the destination holds
        (an unclean election), which no mirror can mend."""
        start = await self._source.log_offset(leader, tp, latest=False)
        if position < start:
            await self._follow_log_start(tp, start)
            return
        end = await self._source.log_offset(leader, tp, latest=True)
        if position > end:
            raise MirrorError(
                f"{tp}: the destination holds offsets up to {position}, the source ends at {end}"
            )

    async def _follow_log_start(self, tp: TopicPartition, source_start: int) -> None:
        """The source's log start moved (retention, DeleteRecords): so does the destination's,
        up to what is mirrored; offsets the source deleted before they were mirrored are
        skipped (a gap, below the destination's log start once the batches after it land)."""
        if source_start < 0 or source_start <= self._log_starts.get(tp, 0):
            return
        if self._ends[tp] < source_start:
            self._positions[tp] = max(self._positions.get(tp, 0), source_start)
        target = min(source_start, self._ends[tp])
        if target > self._log_starts.get(tp, 0):
            (done,) = await self._coordinator.delete_records([DeleteRecordsRequest(tp, target)])
            if done.error == ErrorCode.NONE:
                self._log_starts[tp] = target

    async def _append(self, mirrored: list[Mirrored]) -> None:
        await self._keep_epoch(max(m.leader_epoch for m in mirrored))
        data, index = encode_segment([m.entry for m in mirrored])
        key = new_object_key(
            self._coordinator.commit_bounds.object_prefix,
            self._clock.now_ms(),
            self.config.node_id,
            f"m{secrets.token_hex(8)}",
        )
        await self._store.put(key, data)
        batches = placed(mirrored, [entry.byte_offset for entry in index])
        by_topic: dict[str, list[int]] = {}
        for i, b in enumerate(batches):
            by_topic.setdefault(b.topic_partition.topic, []).append(i)
        epochs = {self._epochs[topic] for topic in by_topic}
        if len(epochs) != 1:  # topics claimed at different epochs: one append per topic
            for indexes in by_topic.values():
                await self._append_known(key, len(data), [batches[i] for i in indexes])
            return
        await self._append_known(key, len(data), batches)

    async def _append_known(self, key: str, size: int, batches: list[MirrorBatch]) -> None:
        epoch = self._epochs[batches[0].topic_partition.topic]
        while True:
            try:
                results = await self._coordinator.mirror_append(
                    self.config.name, epoch, key, size, batches
                )
                break
            except CommitOutcomeUnknownError:
                await self._clock.sleep(_RETRY_S)  # landed or not: the retry says which
        for batch, result in zip(batches, results, strict=True):
            if result.outcome is MirrorOutcome.FENCED and self.state is not MirrorState.MIRRORING:
                return  # paused or stopped meanwhile: the batches are fetched again on resume
            if result.outcome is MirrorOutcome.FENCED:
                raise MirrorError(f"fenced on {batch.topic_partition}: {result.message}")
            if not result.ok:
                raise MirrorError(
                    f"{batch.topic_partition} at {batch.base_offset}: {result.outcome.value}"
                    f" {result.message}"
                )
            self._ends[batch.topic_partition] = max(
                self._ends[batch.topic_partition], batch.last_offset + 1
            )

    def _report_lag(self, offsets: dict[TopicPartition, int]) -> None:
        for tp in offsets:
            lag = max(0, self._source_ends.get(tp, self._ends[tp]) - self._ends[tp])
            self._metrics.mirror_lag(self.config.name, tp.topic, tp.partition, lag)

    async def _group_syncer(self) -> None:
        while not self._closing:
            if self.state is MirrorState.MIRRORING:
                await self._refresh_leaders()  # and the source's epoch with them
                try:
                    self.last_group_sync = await sync_groups(
                        self._source, self._coordinator, self.config.topics, self.config.groups
                    )
                except SourceError as error:
                    _log.warning("mirror %s: group sync failed: %s", self.config.name, error)
            await sleep_unless(self._clock, self.config.group_sync_interval_ms / 1000, self._closed)
