"""The commit step on PostgreSQL, applied natively: one server-side function stores it all.

The engine names the step (`Operation.COMMIT_FILES`), so the store runs it with this `StoreStep`:
its loads are the generic ones (`diskless_load`, behind the gate when wide), and its apply calls
`diskless_apply_commits` (migration 8) once, with every row as an array, which
also answers the transaction id that resolves a lost COMMIT. The rows are those the generic
apply would store; only the round trips differ.
"""

from __future__ import annotations

from typing import Final

from diskless.coordinator._backends.postgres_rows import (
    BATCH_TYPES,
    PRODUCER_TYPES,
    batch_columns,
    bytea_array,
    columns,
    entry_columns,
    int_array,
    text_array,
)
from diskless.coordinator._backends.postgres_step import PostgresStep
from diskless.coordinator._backends.sql_rows import FILE_STATE_CODES
from diskless.coordinator._store import Changes

APPLY_COMMITS_TYPES: Final = (
    *["text", "boolean", "smallint", "bigint", "bigint", "bigint"],  # files
    *BATCH_TYPES,
    *["bigint"] * 5,  # partitions
    *PRODUCER_TYPES,
    "bigint",  # released leases
    *["bigint"] * 3,  # opened transactions
)
"""The parameters of `diskless_apply_commits`, in order (each sent as a literal)."""
APPLY_COMMITS_CALL: Final = (
    "SELECT diskless_apply_commits("
    + ", ".join(f"${n}::text::{t}[]" for n, t in enumerate(APPLY_COMMITS_TYPES, 1))
    + ")"
)
_STORED: Final = frozenset(
    {"files", "batches", "partitions", "producers", "leases_released", "ongoing_opened"}
)
"""The changes `diskless_apply_commits` stores: all a commit step makes (`Operation`)."""
_UNSTORED: Final = tuple(name for name in Changes.__struct_fields__ if name not in _STORED)


class PostgresCommitStep(PostgresStep):
    """A commit step's access to the store: generic loads, one native apply."""

    async def apply(self, changes: Changes) -> list[int]:
        assert not any(getattr(changes, name) for name in _UNSTORED), changes
        self._gate_considered = True
        file_keys = list(changes.files)
        slots = {key: slot for slot, key in enumerate(file_keys, 1)}
        # Each file's row: (known, state, size, since, live batches); a commit forgets none.
        files = [
            (
                int(key in self._files_seen),
                FILE_STATE_CODES[f.state],
                f.size,
                f.since_ms,
                f.live_batches,
            )
            for key, f in changes.files.items()
            if f is not None
        ]
        assert len(files) == len(file_keys), changes.files
        # A batch row with its file's slot for the file id, which the function assigns.
        batches = batch_columns(changes.batches, [slots[b.object_key] for b in changes.batches])
        partitions = [
            (s.key, s.high_watermark, s.log_start_offset, s.size_bytes, s.ts_running_max)
            for s in changes.partitions
        ]
        producer_columns = entry_columns(changes.producers)
        arrays = [
            text_array(file_keys),
            *(int_array(c) for c in columns(files, 5)),
            *(int_array(c) for c in batches),
            *(int_array(c) for c in columns(partitions, 5)),
            *(int_array(c) for c in producer_columns[:7]),
            bytea_array(producer_columns[7]),
            int_array(changes.leases_released),
            *(int_array(c) for c in columns(changes.ongoing_opened, 3)),
        ]
        self.xid = await self._conn.fetchval(APPLY_COMMITS_CALL, *arrays)
        self._files_seen.update(file_keys)
        return []
