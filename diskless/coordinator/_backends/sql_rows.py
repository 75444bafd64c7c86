"""How both SQL stores (SQLite and PostgreSQL) lay rows out: columns, row decoders and batched
key lookups."""

from __future__ import annotations

import functools
import re
import uuid
from collections.abc import Awaitable, Callable, Iterable, Iterator, Mapping, Sequence
from typing import Any, Final

import msgspec

from diskless._scram import ScramCredential, ScramMechanism
from diskless._types import CompressionType, TimestampType, TopicPartition
from diskless.coordinator._rules.files import FileRow
from diskless.coordinator._rules.reads import FETCH_HEAD_ROWS, FetchHead
from diskless.coordinator._rules.rows import PartitionState, StoredBatch, TxnRegistration
from diskless.coordinator._store import TopicRow
from diskless.coordinator._values import FileState, TopicConfig
from diskless.txn import ProducerEntry, RetainedBatch, TxnRecord

_MARK: Final = re.compile(r"\$(\d+)")


@functools.cache
def numbered(sql: str) -> str:
    """`sql` with SQLite's numbered placeholders (`?1`) for PostgreSQL's (`$1`): the statements
    both stores run are written once, with PostgreSQL's."""
    return _MARK.sub(r"?\1", sql)


KEYS_PER_QUERY_MAX: Final = 4096
"""Keys looked up per statement when loading state for a step (2 parameters each)."""
READ_CHUNK_ROWS_MAX: Final = 256
"""Rows fetched per query when a reader walks batches lazily."""

FILE_STATE_CODES: Final = {FileState.LIVE: 0, FileState.UNREFERENCED: 1, FileState.CONDEMNED: 2}
FILE_STATES: Final = {code: state for state, code in FILE_STATE_CODES.items()}
MARKER_FILE_ID: Final = 0
"""Markers have no file (file_id 0, which no file has): hence the outer joins."""

BATCH_COLUMNS: Final = (
    "b.partition_id, b.base_offset, b.last_offset, coalesce(f.key, ''), b.byte_offset, b.size,"
    " b.max_timestamp, b.log_append_time, b.timestamp, b.ts_running_max, b.producer_id,"
    " b.producer_epoch, b.control, b.coordinator_epoch, -1, -1, coalesce(f.size, -1)"
)
BATCH_FROM: Final = "batches b LEFT JOIN files f ON f.file_id = b.file_id"
BATCH_WIDTH: Final = 17
"""The columns of a `BATCH_COLUMNS` row."""
TIME_MARK_OFFSETS: Final = 1024
"""A batch holding an offset that is a multiple of this is a time mark (see `TIME_MARK`)."""
TIME_MARK: Final = (
    f"(base_offset + {TIME_MARK_OFFSETS - 1}) / {TIME_MARK_OFFSETS}"
    f" <= last_offset / {TIME_MARK_OFFSETS}"
)
"""Whether a batch row is a time mark, the only rows the time index holds: as Kafka's time index
has an entry per interval of the log, not per batch. Fewer than `TIME_MARK_OFFSETS` batches lie
between two marks, so a lookup by time is one probe of that small index and a bounded walk of the
primary key. Indexing every batch (twice, before) cost each commit an index page per partition it
wrote to, most of what it wrote. Integer division in SQLite and PostgreSQL alike; a query can use
the partial index only if it repeats this text, as the index's migration does (a test checks
that they agree)."""


@functools.cache
def last_mark_below(partition: str, timestamp: str) -> str:
    """The offset of the last time mark whose running max is below `timestamp` (arguments:
    placeholders; each backend builds its statements once, hence the caches here)."""
    return (
        f"SELECT base_offset FROM batches WHERE partition_id = {partition}"
        f" AND ts_running_max < {timestamp} AND {TIME_MARK}"
        " ORDER BY ts_running_max DESC, base_offset DESC LIMIT 1"
    )


@functools.cache
def first_reaching(partition: str, timestamp: str) -> str:
    """The first batch whose running max is at least `timestamp`, in one statement: it lies after
    the last mark below `timestamp` and no later than the next mark, so the walk of the primary
    key from that mark is short."""
    return (
        f"SELECT {BATCH_COLUMNS} FROM {BATCH_FROM} WHERE b.partition_id = {partition}"
        f" AND b.base_offset > coalesce(({last_mark_below(partition, timestamp)}), -1)"
        f" AND b.ts_running_max >= {timestamp} ORDER BY b.base_offset LIMIT 1"
    )


@functools.cache
def last_running_max(partition: str) -> str:
    """The running max of the partition's last batch row: the largest timestamp of its rows,
    unless the batch that carried it is gone."""
    return (
        f"SELECT ts_running_max FROM batches WHERE partition_id = {partition}"
        " ORDER BY base_offset DESC LIMIT 1"
    )


@functools.cache
def max_timestamp_scan(partition: str) -> str:
    """The first batch row with the largest timestamp, by reading them all: only for when the
    batch that carried the running max was deleted (trimmed), which no index answers."""
    return (
        f"SELECT {BATCH_COLUMNS} FROM {BATCH_FROM} WHERE b.partition_id = {partition}"
        " ORDER BY b.timestamp DESC, b.base_offset LIMIT 1"
    )


RowFetcher = Callable[..., Awaitable[Sequence[Any] | None]]
"""Runs a query with its arguments and answers its first row (None when it has none)."""


async def first_batch_reaching(
    fetch: RowFetcher, marks: Sequence[str], partition_id: int, timestamp: int
) -> StoredBatch | None:
    """The first batch row whose running max is at least `timestamp`, through the time marks
    (`marks`: the backend's placeholders for the first and second argument)."""
    row = await fetch(first_reaching(marks[0], marks[1]), partition_id, timestamp)
    return None if row is None else batch_from_row(row)


async def max_timestamp_row(
    fetch: RowFetcher, marks: Sequence[str], partition_id: int, unless_at_most: int | None
) -> StoredBatch | None:
    """The first batch row with the largest timestamp; None if there is none, or if that
    timestamp is at most `unless_at_most` (an earlier candidate's, which wins ties)."""
    last = await fetch(last_running_max(marks[0]), partition_id)
    if last is None or (unless_at_most is not None and last[0] <= unless_at_most):
        return None
    first = await first_batch_reaching(fetch, marks, partition_id, last[0])
    if first is not None and first.timestamp == last[0]:
        return first
    row = await fetch(max_timestamp_scan(marks[0]), partition_id)
    return None if row is None else batch_from_row(row)


HEADS_FROM: Final = (
    "topics t JOIN partitions p ON p.topic_id = t.topic_id"
    " JOIN batches b ON b.partition_id = p.partition_id LEFT JOIN files f ON f.file_id = b.file_id"
    " WHERE b.base_offset = (SELECT min(b2.base_offset) FROM batches b2"
    " WHERE b2.partition_id = p.partition_id)"
)
"""Each partition holding batch rows with its first one, for partition columns followed by
`BATCH_COLUMNS`."""
TXN_TABLES: Final = ("txn_registrations", "txn_leases", "ongoing_txns", "aborted_txns")
TOPIC_COLUMNS: Final = (
    "t.name, t.partition_count, t.timestamp_type, t.retention_ms, t.retention_bytes,"
    " t.max_message_bytes, t.timestamp_before_max_ms, t.timestamp_after_max_ms,"
    " t.compression_type, t.compression_gzip_level, t.compression_lz4_level,"
    " t.compression_zstd_level, t.topic_uuid, t.inapplicable_configs"
)


def first_ongoing(partition: str, other_than: str | None = None) -> str:
    """`_rules.txn.first_ongoing` as a subquery of the ongoing-transaction index (one probe of
    its key): the partition's earliest ongoing first offset, with `other_than` that of another
    producer's (arguments: SQL expressions)."""
    other = "" if other_than is None else f" AND o.producer_id <> {other_than}"
    return (
        f"(SELECT min(o.first_offset) FROM ongoing_txns o WHERE o.partition_id = {partition}"
        f"{other})"
    )


PARTITION_COLUMNS_BEFORE_LSO: Final = (
    "p.partition_id, t.name, p.partition, t.timestamp_type, t.retention_ms, t.retention_bytes,"
    " t.max_message_bytes, p.high_watermark, p.log_start_offset, p.size_bytes, p.ts_running_max"
)
PARTITION_COLUMNS_AFTER_LSO: Final = "t.timestamp_before_max_ms, t.timestamp_after_max_ms"
PARTITION_COLUMNS: Final = (
    f"{PARTITION_COLUMNS_BEFORE_LSO}, {first_ongoing('p.partition_id')},"
    f" {PARTITION_COLUMNS_AFTER_LSO}"
)
PARTITION_WIDTH: Final = 14
"""The columns of a `PARTITION_COLUMNS` row, after which a query may select others."""
PARTITION_FROM: Final = "topics t JOIN partitions p ON p.topic_id = t.topic_id"
HEAD_KIND_PARTITION: Final = 0
HEAD_KIND_EXTENT: Final = 1
HEAD_KIND_BATCH: Final = 2
HEAD_PARTITION_AT: Final = 3
"""A `fetch_heads` statement answers rows of (index of the wanted partition, kind, whether an
aborted marker lies at or after the offset), then, from here, `PARTITION_COLUMNS` (a
partition's row) or, from where the store says, `BATCH_COLUMNS` (an extent's or a batch's)."""


def heads_from_rows(
    rows: Iterable[Sequence[Any]], count: int, row_at: int, page: int = FETCH_HEAD_ROWS
) -> list[FetchHead | None]:
    """The `count` heads a `fetch_heads` statement answers, its rows in any order (indexes
    from 0; the rows of extents and batches from `row_at`), each loaded with up to `page`
    batch rows."""
    states: list[PartitionState | None] = [None] * count
    aborted = [False] * count
    loaded: list[list[StoredBatch]] = [[] for _ in range(count)]
    batches = [0] * count
    for row in rows:
        i, kind = row[0], row[1]
        if kind == HEAD_KIND_PARTITION:
            states[i] = partition_from_row(row[HEAD_PARTITION_AT:])
            aborted[i] = bool(row[2])
            continue
        loaded[i].append(batch_from_row(row[row_at:]))
        if kind == HEAD_KIND_BATCH:
            batches[i] += 1
    heads: list[FetchHead | None] = []
    for i, state in enumerate(states):
        if state is None:
            heads.append(None)
            continue
        loaded[i].sort(key=_base_offset)  # extents first: they precede the batch rows
        heads.append(FetchHead(state, loaded[i], batches[i] < page, aborted[i]))
    return heads


def _base_offset(row: StoredBatch) -> int:
    return row.base_offset


ENTRY_COLUMNS: Final = (
    "producer_id, producer_epoch, last_timestamp, last_update_ms, coordinator_epoch,"
    " txn_first_offset, batches"
)
REGISTRATION_COLUMNS: Final = "r.producer_epoch, r.ending, r.client_epoch, r.sequence_base"
"""A `txn_registrations` row (as `r`) in `registration_from_row`'s order."""
FILE_COLUMNS: Final = "key, state, size, since_ms, live_batches"
REGISTRATION_ROW: Final = "broker_id, broker_epoch, host, port, rack, expires_ms"
"""A `BrokerRegistration`'s fields, in order."""
OWNER_COLUMNS: Final = "broker_id, broker_epoch, generation"
SCRAM_COLUMNS: Final = "user_name, mechanism, salt, stored_key, server_key, iterations"
"""A `GroupOwnership`'s fields, in order."""
INSERT_BATCH: Final = "INSERT INTO batches VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)"
UPSERT_PRODUCER: Final = "INSERT OR REPLACE INTO producers VALUES (?, ?, ?, ?, ?, ?, ?, ?)"

_CONFIGS_ENCODER = msgspec.json.Encoder()
_CONFIGS_DECODER = msgspec.json.Decoder(dict[str, str])
_RECORD_DECODER = msgspec.msgpack.Decoder(TxnRecord)
_RETAINED_ENCODER = msgspec.msgpack.Encoder()
_RETAINED_DECODER = msgspec.msgpack.Decoder(tuple[RetainedBatch, ...])


def topic_from_row(row: Sequence[Any]) -> TopicRow:
    """A topic from a `TOPIC_COLUMNS` row."""
    config = TopicConfig(
        TimestampType(row[2]),
        row[3],
        row[4],
        row[5],
        row[6],
        row[7],
        compression_type=CompressionType(row[8]),
        compression_gzip_level=row[9],
        compression_lz4_level=row[10],
        compression_zstd_level=row[11],
        inapplicable_configs=configs_from_text(row[13]),
    )
    # PostgreSQL answers its uuid type, SQLite the 32 hex digits it keeps as text.
    return TopicRow(row[0], row[1], config, uuid.UUID(str(row[12])))


TOPIC_CONFIG_FIELDS: Final = (
    "timestamp_type", "retention_ms", "retention_bytes", "max_message_bytes",
    "timestamp_before_max_ms", "timestamp_after_max_ms", "compression_type",
    "compression_gzip_level", "compression_lz4_level", "compression_zstd_level",
    "inapplicable_configs",
)  # fmt: skip
"""The `topics` columns a `TopicConfig` fills, in `topic_config_values`' order."""


def update_topic_config(placeholders: Sequence[str]) -> str:
    """The statement replacing a topic's config: `placeholders` name the values of
    `topic_config_values` then the topic's name (`?`s for SQLite, `$n` for PostgreSQL)."""
    assert len(placeholders) == len(TOPIC_CONFIG_FIELDS) + 1
    values = zip(TOPIC_CONFIG_FIELDS, placeholders[:-1], strict=True)
    assigned = ", ".join(f"{column} = {placeholder}" for column, placeholder in values)
    return f"UPDATE topics SET {assigned} WHERE name = {placeholders[-1]}"


def topic_config_values(config: TopicConfig) -> tuple[Any, ...]:
    """A config's column values, in `TOPIC_CONFIG_FIELDS`' order."""
    return (
        int(config.timestamp_type),
        config.retention_ms,
        config.retention_bytes,
        config.max_message_bytes,
        config.message_timestamp_before_max_ms,
        config.message_timestamp_after_max_ms,
        int(config.compression_type),
        config.compression_gzip_level,
        config.compression_lz4_level,
        config.compression_zstd_level,
        configs_text(config),
    )


def configs_text(config: TopicConfig) -> str:
    """`TopicConfig.inapplicable_configs` as its column holds them: a JSON object."""
    return configs_object_text(dict(config.inapplicable_configs))


def configs_object_text(configs: Mapping[str, str]) -> str:
    """Config names and values as a column holds them: a JSON object (`configs_from_text`)."""
    return _CONFIGS_ENCODER.encode(dict(configs)).decode()


def configs_from_text(text: str) -> tuple[tuple[str, str], ...]:
    return tuple(sorted(_CONFIGS_DECODER.decode(text).items())) if text else ()


def partition_from_row(
    row: Sequence[Any], configs: dict[tuple[Any, ...], TopicConfig] | None = None
) -> PartitionState:
    """A partition from a `PARTITION_COLUMNS` row; `configs` shares configs between rows.

    Its config holds what the coordinator's rules read (timestamps, retention, size); the
    compression settings, which only the broker's produce path reads (from the topic), keep
    their defaults here."""
    config_key = (row[3], row[4], row[5], row[6], row[12], row[13])
    config = None if configs is None else configs.get(config_key)
    if config is None:
        config = TopicConfig(TimestampType(row[3]), row[4], row[5], row[6], row[12], row[13])
        if configs is not None:
            configs[config_key] = config
    return PartitionState(
        row[0], TopicPartition(row[1], row[2]), config, row[7], row[8], row[9], row[10], row[11]
    )


def batch_from_row(row: Sequence[Any]) -> StoredBatch:
    return StoredBatch(*row)


def batch_to_row(b: StoredBatch, file_id: int) -> tuple[Any, ...]:
    return (
        b.partition_key,
        b.base_offset,
        b.last_offset,
        file_id,
        b.byte_offset,
        b.size,
        b.max_timestamp,
        b.log_append_time,
        b.timestamp,
        b.ts_running_max,
        b.producer_id,
        b.producer_epoch,
        b.control,
        b.coordinator_epoch,
    )


def entry_from_row(row: Sequence[Any]) -> ProducerEntry:
    """A producer entry from an `ENTRY_COLUMNS` row."""
    return ProducerEntry(
        producer_id=row[0],
        producer_epoch=row[1],
        batches=_RETAINED_DECODER.decode(row[6]),
        last_timestamp=row[2],
        last_update_ms=row[3],
        coordinator_epoch=row[4],
        current_txn_first_offset=row[5],
    )


def entry_to_row(partition_id: int, e: ProducerEntry) -> tuple[Any, ...]:
    return (
        partition_id,
        e.producer_id,
        e.producer_epoch,
        e.last_timestamp,
        e.last_update_ms,
        e.coordinator_epoch,
        e.current_txn_first_offset,
        retained_to_blob(e.batches),
    )


def retained_to_blob(batches: tuple[RetainedBatch, ...]) -> bytes:
    return _RETAINED_ENCODER.encode(batches)


def file_from_row(row: Sequence[Any]) -> tuple[str, FileRow]:
    """A file from a `FILE_COLUMNS` row."""
    return row[0], FileRow(FILE_STATES[row[1]], row[2], row[3], row[4])


def keyed_lookups(
    select: str, keys: Sequence[tuple[Any, Any]], filler: tuple[Any, Any]
) -> Iterator[tuple[str, list[Any]]]:
    """Statements that look `keys` up through a `k(a, b)` VALUES table, one index probe each.

    Key lists are padded with `filler` (which matches nothing) to a power of two, so that a few
    statement texts serve every step and stay in the statement cache.
    """
    for i in range(0, len(keys), KEYS_PER_QUERY_MAX):
        chunk = list(keys[i : i + KEYS_PER_QUERY_MAX])
        size = 1 << (len(chunk) - 1).bit_length() if chunk else 0
        chunk.extend([filler] * (size - len(chunk)))
        values = ", ".join(["(?, ?)"] * size)
        yield f"WITH k(a, b) AS (VALUES {values}) {select}", [x for key in chunk for x in key]


def in_lists(keys: Sequence[Any]) -> Iterator[tuple[str, list[Any]]]:
    """`IN (...)` placeholder lists for `keys`, a bounded number at a time."""
    for i in range(0, len(keys), KEYS_PER_QUERY_MAX):
        chunk = list(keys[i : i + KEYS_PER_QUERY_MAX])
        yield ", ".join(["?"] * len(chunk)), chunk


def txn_to_row(record: TxnRecord) -> tuple[Any, ...]:
    return (record.transactional_id, _RETAINED_ENCODER.encode(record), record.due_ms)


def txn_from_blob(blob: bytes) -> TxnRecord:
    return _RECORD_DECODER.decode(blob)


def registration_from_row(row: Sequence[Any]) -> TxnRegistration:
    """The columns of `REGISTRATION_COLUMNS`, from SQLite or PostgreSQL."""
    return TxnRegistration(int(row[0]), bool(row[1]), int(row[2]), int(row[3]))


def scram_to_row(key: tuple[str, ScramMechanism], credential: ScramCredential) -> tuple[Any, ...]:
    """A SCRAM credential as the row `SCRAM_COLUMNS` names."""
    user, mechanism = key
    c = credential
    return (user, int(mechanism), c.salt, c.stored_key, c.server_key, c.iterations)


def scram_from_row(row: Sequence[Any]) -> tuple[tuple[str, ScramMechanism], ScramCredential]:
    user, mechanism, salt, stored, server, iterations = row
    key = (user, ScramMechanism(mechanism))
    return key, ScramCredential(bytes(salt), bytes(stored), bytes(server), iterations)
