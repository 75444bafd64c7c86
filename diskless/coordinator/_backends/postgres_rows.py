"""How the PostgreSQL store lays rows out for its steps' loads and applies.

Rows are decoded by the decoders both SQL stores share (`sql_rows`): both stores select the same
columns in the same order, so one decoder serves both. Key lists go to the server as arrays
(`= ANY($1)`, `unnest`): one statement whatever their length.
"""

from __future__ import annotations

import operator
from collections.abc import Collection, Iterable, Mapping, Sequence
from typing import Any, Final

import msgspec

from diskless.coordinator._backends.sql_rows import (
    PARTITION_COLUMNS_AFTER_LSO,
    PARTITION_COLUMNS_BEFORE_LSO,
    retained_to_blob,
)
from diskless.coordinator._rules.rows import StoredBatch
from diskless.txn import ProducerEntry

_json = msgspec.json.Encoder().encode

PARTITION_COLUMNS_NO_LSO: Final = (
    f"{PARTITION_COLUMNS_BEFORE_LSO}, NULL::bigint, {PARTITION_COLUMNS_AFTER_LSO}"
)
"""Partition columns without the ongoing transactions' first offset: a row locked with FOR
UPDATE may have been re-read after waiting, while a subquery would still see the statement's
older snapshot, so a step reads the ongoing index in a statement after taking the locks."""
TXN_TABLES: Final = ("txn_registrations", "txn_leases", "ongoing_txns", "aborted_txns")
GATE_LOCK_KEY: Final = 0x6469_736B_6C65_7331
"""The commit gate's advisory lock (ASCII "diskles1"; `postgres_step`): one key per database."""
GATE_OVERLAP: Final = 3
"""A step is wide when width^2 >= this times the cluster's partitions (`postgres_step`)."""
GATE_WIDTH_MIN: Final = 8
"""Narrower steps call `diskless_load` itself, sparing them the gated load's sum over topics:
they would be wide only in a cluster of fewer than 22 partitions."""
BATCH_TYPES: Final = (
    *["bigint"] * 3,  # partition, base and last offset, then the file's slot
    "int",
    *["bigint"] * 7,
    *["int"] * 3,
)
"""The element types of an apply function's batch columns."""
PRODUCER_TYPES: Final = ("bigint", "bigint", "int", "bigint", "bigint", "int", "bigint", "bytea")
"""The element types of an apply function's producer entry columns."""
EPOCH_ANY: Final = (1 << 31) - 1
"""Stands for "every epoch" in `leases_dropped` (epochs are 16-bit in Kafka)."""


# What the load functions answer: one row per loaded item, of one of these kinds.
LOADED_PARTITION: Final = 1
"""(id, name, partition, timestamp type, retention ms, retention bytes, max message bytes,
high watermark, log start offset, size, running max timestamp, earliest ongoing first offset,
timestamp before max ms, timestamp after max ms): `PARTITION_COLUMNS` in order."""
LOADED_PRODUCER: Final = 2
"""(partition id, producer id, epoch, last timestamp, last update ms, coordinator epoch,
transaction first offset), the retained batches in `blob`."""
LOADED_REGISTRATION: Final = 3
"""(partition id, producer id, epoch, ending as 0/1, client epoch, sequence base):
`REGISTRATION_COLUMNS` in order from the epoch on."""
LOADED_LEASE: Final = 4
"""(lease id, partition id, producer id, epoch, expires ms)."""
LOADED_BROKER: Final = 5
"""(broker id, epoch)."""
LOADED_FILE: Final = 6
"""(key in `name`, state code, size, since ms, live batches)."""


def columns(rows: Sequence[Sequence[Any]], width: int) -> list[list[Any]]:
    """Rows as `width` column lists: the arrays `unnest` turns back into rows."""
    if not rows:
        return [[] for _ in range(width)]
    return [list(column) for column in zip(*rows, strict=True)]


def two_columns(pairs: Collection[tuple[Any, Any]]) -> list[list[Any]]:
    return columns(list(pairs), 2)


_BATCH_VALUES: Final = (
    "byte_offset",
    "size",
    "max_timestamp",
    "log_append_time",
    "timestamp",
    "ts_running_max",
    "producer_id",
    "producer_epoch",
    "control",
    "coordinator_epoch",
)
"""The batch row's columns after its key and file, named as `StoredBatch`'s fields."""
BATCH_TABLE_COLUMNS: Final = (
    "partition_id",
    "base_offset",
    "last_offset",
    "file_id",
    *_BATCH_VALUES,
)
"""The columns of `batches`, in order."""
_BATCH_FIELDS: Final = [operator.attrgetter(name) for name in _BATCH_VALUES]


def batch_columns(batches: Sequence[StoredBatch], file_ids: list[int]) -> list[list[int]]:
    """The columns of `batches`' rows (`batch_to_row`'s), the i-th batch in file `file_ids[i]`.
    Built column by column, a commit's hottest rows make no tuple per row to be collected."""
    return [
        [b.partition_key for b in batches],
        [b.base_offset for b in batches],
        [b.last_offset for b in batches],
        file_ids,
        *(list(map(field, batches)) for field in _BATCH_FIELDS),
    ]


def entry_columns(entries: Mapping[tuple[int, int], ProducerEntry]) -> list[list[Any]]:
    """The columns of the producer entries' rows (`entry_to_row`'s), by (partition key,
    producer id), built column by column as `batch_columns` are."""
    values = list(entries.values())
    return [
        [key for key, _ in entries],
        [pid for _, pid in entries],
        [e.producer_epoch for e in values],
        [e.last_timestamp for e in values],
        [e.last_update_ms for e in values],
        [e.coordinator_epoch for e in values],
        [e.current_txn_first_offset for e in values],
        [retained_to_blob(e.batches) for e in values],
    ]


def int_array(values: Sequence[int | None]) -> str:
    """An integer column as an array literal, for a `$n::text::bigint[]` parameter: asyncpg
    checks every element of a list it encodes as an array (several isinstance calls against
    ABCs each), which cost a commit of 100 batches more CPU than its rules. A JSON array of
    integers and nulls is that literal but for its brackets (PostgreSQL reads `null` as NULL),
    and msgspec writes it ten times faster than joining `str`s."""
    return "{" + _json(values)[1:-1].decode() + "}"


def text_array(values: Iterable[str]) -> str:
    """A text column as an array literal (see `int_array`), every element quoted."""
    return "{" + ",".join(['"' + _escape(v) + '"' for v in values]) + "}"


def bytea_array(values: Iterable[bytes]) -> str:
    """A bytea column as an array literal of hex strings (see `int_array`)."""
    return "{" + ",".join(['"\\\\x' + v.hex() + '"' for v in values]) + "}"


def _escape(value: str) -> str:
    return value.replace("\\", "\\\\").replace('"', '\\"')
