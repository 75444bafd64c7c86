"""Server-side functions of the PostgreSQL store: a commit's load and apply in one round trip each.

They only load and store, as the statements they replace did; every decision stays in the
shared Python rules. `diskless_load` takes the row locks in the store's fixed order (partitions,
leases, brokers, files), each kind sorted by key, then reads the rows keyed by the locked
partitions. A PL/pgSQL function runs each statement on a fresh snapshot under READ COMMITTED,
so those reads see everything committed before the locks were granted, as separate statements
from the client did.

Partitions are found by (topic, index) one index probe per key (the OFFSET 0 fence keeps a
plan cached before the table had statistics from scanning a topic's partitions per key), then
locked by id in a statement of their own: a locking clause inside such a subquery would lock
in whatever order the join produced rows, which differs between steps and deadlocks them.

`diskless_load` answers one row per loaded item in a wide shape: `kind`, then columns whose
meaning depends on it (`LOADED_*` below; unused columns are NULL). `diskless_apply_commits`
stores what a commit of one or several objects decided (their files, batches, partitions,
producer entries, released leases, opened transactions) and answers the transaction's id,
which resolves a lost COMMIT.

`diskless_peek_commit` and `diskless_apply_rebased` are the optimistic commit's read and apply
(`postgres_optimistic`).

These texts are those of their migrations and, like every released migration, never change: a
later version of a function is a new constant, installed (CREATE OR REPLACE) by a new
migration. Texts shared between versions are built from the same pieces.
"""

from __future__ import annotations

from typing import Final

from diskless.coordinator._backends.sqlite_rows import SHIFT_MARK

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

_LOADED_ROWS: Final = """RETURNS TABLE (
    kind int, a bigint, name text, b bigint, c bigint, d bigint, e bigint, f bigint, g bigint,
    h bigint, i bigint, j bigint, k bigint, l bigint, m bigint, blob bytea
)"""
"""What a load function answers: one row per loaded item, as `LOADED_*` describe."""

_LOAD_PARAMETERS: Final = f"""
    part_names text[], part_nums int[],
    producer_slots int[], producer_ids bigint[],
    registration_slots int[], registration_ids bigint[],
    lease_ids bigint[], broker_ids bigint[], file_keys text[]
) {_LOADED_ROWS}"""

_FIND_PARTITIONS: Final = """
        SELECT array_agg(q.n), array_agg(p.partition_id) INTO slots, ids
            FROM unnest(part_names, part_nums) WITH ORDINALITY q(name, part, n)
            JOIN topics t ON t.name = q.name
            CROSS JOIN LATERAL (SELECT p0.partition_id FROM partitions p0
                WHERE p0.topic_id = t.topic_id AND p0.partition = q.part OFFSET 0) p;"""
"""Each named partition's slot (its position in the arguments) and id, into `slots`, `ids`."""

_PARTITION_ROWS: Final = f"""
        RETURN QUERY SELECT {LOADED_PARTITION}, p.partition_id, t.name, p.partition::bigint,
            t.timestamp_type::bigint, t.retention_ms, t.retention_bytes, t.max_message_bytes,
            p.high_watermark, p.log_start_offset, p.size_bytes, p.ts_running_max,
            (SELECT min(o.first_offset) FROM ongoing_txns o
                WHERE o.partition_id = p.partition_id),
            t.timestamp_before_max_ms, t.timestamp_after_max_ms, NULL::bytea
            FROM partitions p JOIN topics t ON t.topic_id = p.topic_id
            WHERE p.partition_id = ANY(ids);"""


def _producer_rows(versioned: bool) -> str:
    """The producer entries of the found partitions, if `versioned` with their row's version
    (`xmin`) in column `h`."""
    version, version_column = ("r.version", ", r0.xmin::text::bigint AS version")
    if not versioned:
        version, version_column = "NULL::bigint", ""
    entries = f"(SELECT *{version_column} FROM producers r0"
    return f"""
    IF cardinality(producer_slots) > 0 AND ids IS NOT NULL THEN
        RETURN QUERY SELECT {LOADED_PRODUCER}, r.partition_id, NULL::text, r.producer_id,
            r.producer_epoch::bigint, r.last_timestamp, r.last_update_ms,
            r.coordinator_epoch::bigint, r.txn_first_offset, {version}, NULL::bigint,
            NULL::bigint, NULL::bigint, NULL::bigint, NULL::bigint, r.batches
            FROM unnest(producer_slots, producer_ids) q(slot, pid)
            JOIN unnest(slots, ids) s(slot, id) ON s.slot = q.slot
            CROSS JOIN LATERAL {entries} WHERE r0.partition_id = s.id
                AND r0.producer_id = q.pid OFFSET 0) r;
    END IF;"""


def _broker_and_file_rows(lock: str) -> str:
    """The brokers and files asked for, each kind sorted by key and locked with `lock`."""
    return f"""
    IF cardinality(broker_ids) > 0 THEN
        RETURN QUERY SELECT {LOADED_BROKER}, x.broker_id, NULL::text, x.epoch, NULL::bigint,
            NULL::bigint, NULL::bigint, NULL::bigint, NULL::bigint, NULL::bigint, NULL::bigint,
            NULL::bigint, NULL::bigint, NULL::bigint, NULL::bigint, NULL::bytea
            FROM (SELECT * FROM brokers WHERE broker_id = ANY(broker_ids)
                ORDER BY broker_id{lock}) x;
    END IF;
    IF cardinality(file_keys) > 0 THEN
        RETURN QUERY SELECT {LOADED_FILE}, NULL::bigint, x.key, x.state::bigint, x.size,
            x.since_ms, x.live_batches, NULL::bigint, NULL::bigint, NULL::bigint,
            NULL::bigint, NULL::bigint, NULL::bigint, NULL::bigint, NULL::bigint, NULL::bytea
            FROM (SELECT * FROM files WHERE key = ANY(file_keys) ORDER BY key{lock}) x;
    END IF;"""


LOAD_FUNCTION: Final = f"""
CREATE OR REPLACE FUNCTION diskless_load({_LOAD_PARAMETERS} LANGUAGE plpgsql AS $fn$
DECLARE
    slots int[];
    ids bigint[];
BEGIN
    IF cardinality(part_names) > 0 THEN{_FIND_PARTITIONS}
        PERFORM 1 FROM partitions WHERE partition_id = ANY(ids)
            ORDER BY partition_id FOR UPDATE;{_PARTITION_ROWS}
    END IF;{_producer_rows(versioned=False)}
    IF cardinality(registration_slots) > 0 AND ids IS NOT NULL THEN
        RETURN QUERY SELECT {LOADED_REGISTRATION}, r.partition_id, NULL::text, r.producer_id,
            r.producer_epoch::bigint, r.ending::int::bigint, r.client_epoch::bigint,
            r.sequence_base::bigint, NULL::bigint, NULL::bigint, NULL::bigint, NULL::bigint,
            NULL::bigint, NULL::bigint, NULL::bigint, NULL::bytea
            FROM unnest(registration_slots, registration_ids) q(slot, pid)
            JOIN unnest(slots, ids) s(slot, id) ON s.slot = q.slot
            CROSS JOIN LATERAL (SELECT * FROM txn_registrations r0
                WHERE r0.partition_id = s.id AND r0.producer_id = q.pid OFFSET 0) r;
    END IF;
    IF cardinality(lease_ids) > 0 THEN
        RETURN QUERY SELECT {LOADED_LEASE}, x.lease_id, NULL::text, x.partition_id,
            x.producer_id, x.producer_epoch::bigint, x.expires_ms, NULL::bigint,
            NULL::bigint, NULL::bigint, NULL::bigint, NULL::bigint, NULL::bigint, NULL::bigint,
            NULL::bigint, NULL::bytea
            FROM (SELECT * FROM txn_leases WHERE lease_id = ANY(lease_ids)
                ORDER BY lease_id FOR UPDATE) x;
    END IF;{_broker_and_file_rows(" FOR UPDATE")}
END
$fn$
"""

GATED_LOAD_FUNCTION: Final = f"""
CREATE OR REPLACE FUNCTION diskless_gated_load(gate_key bigint, gate_overlap bigint,
    {_LOAD_PARAMETERS.strip()} LANGUAGE plpgsql AS $fn$
BEGIN
    IF cardinality(part_names)::bigint * cardinality(part_names)
            >= gate_overlap * (SELECT coalesce(sum(partition_count), 0) FROM topics) THEN
        PERFORM pg_advisory_xact_lock(gate_key);
    END IF;
    RETURN QUERY SELECT * FROM diskless_load(part_names, part_nums, producer_slots,
        producer_ids, registration_slots, registration_ids, lease_ids, broker_ids, file_keys);
END
$fn$
"""
"""`diskless_load` behind the commit gate when the step is wide (`postgres_txn`'s module doc);
migration 5. The caller makes sure it is the transaction's first lock."""

_APPLY_PARAMETERS: Final = """\
    b_size bigint[], b_max_timestamp bigint[], b_append_time bigint[], b_timestamp bigint[],
    b_running_max bigint[], b_producer bigint[], b_epoch int[], b_control int[],
    b_coordinator_epoch int[],
    p_id bigint[], p_hw bigint[], p_start bigint[], p_size bigint[], p_running_max bigint[],
    r_partition bigint[], r_producer bigint[], r_epoch int[], r_last_timestamp bigint[],
    r_update bigint[], r_coordinator_epoch int[], r_txn_first bigint[], r_batches bytea[],
    released bigint[],
    o_partition bigint[], o_first bigint[], o_producer bigint[]
) RETURNS bigint LANGUAGE plpgsql AS $fn$
"""
"""The parameters every apply function ends with: the rest of the batch columns, then the
partitions, producer entries, released leases and opened transactions."""

_APPLY_TAIL: Final = """\
    UPDATE partitions p SET high_watermark = q.hw, log_start_offset = q.start,
        size_bytes = q.size, ts_running_max = q.running_max
        FROM unnest(p_id, p_hw, p_start, p_size, p_running_max) q(id, hw, start, size, running_max)
        WHERE p.partition_id = q.id;
    INSERT INTO producers SELECT * FROM unnest(r_partition, r_producer, r_epoch,
        r_last_timestamp, r_update, r_coordinator_epoch, r_txn_first, r_batches)
        ON CONFLICT (partition_id, producer_id) DO UPDATE SET
        producer_epoch = excluded.producer_epoch, last_timestamp = excluded.last_timestamp,
        last_update_ms = excluded.last_update_ms, coordinator_epoch = excluded.coordinator_epoch,
        txn_first_offset = excluded.txn_first_offset, batches = excluded.batches;
    IF cardinality(released) > 0 THEN
        DELETE FROM txn_leases WHERE lease_id = ANY(released);
    END IF;
    IF cardinality(o_partition) > 0 THEN
        INSERT INTO ongoing_txns SELECT * FROM unnest(o_partition, o_first, o_producer);
    END IF;
    RETURN txid_current();
END
$fn$
"""
"""What every apply function ends with: the partitions, producer entries, released leases and
opened transactions, then the transaction id."""

APPLY_COMMIT_FUNCTION: Final = (
    """
CREATE OR REPLACE FUNCTION diskless_apply_commit(
    file_key text, file_known boolean, file_state smallint, file_size bigint,
    file_since bigint, file_live bigint,
    b_partition bigint[], b_base bigint[], b_last bigint[], b_byte_offset bigint[],
"""
    + _APPLY_PARAMETERS
    + """DECLARE
    fid bigint;
BEGIN
    IF file_known THEN
        UPDATE files SET state = file_state, size = file_size, since_ms = file_since,
            live_batches = file_live WHERE key = file_key RETURNING file_id INTO fid;
    ELSE
        INSERT INTO files (key, state, size, since_ms, live_batches)
            VALUES (file_key, file_state, file_size, file_since, file_live)
            RETURNING file_id INTO fid;
    END IF;
    INSERT INTO batches SELECT q.partition_id, q.base, q.last, fid, q.byte_offset, q.size,
        q.max_timestamp, q.append_time, q.ts, q.running_max, q.producer, q.epoch, q.control,
        q.coordinator_epoch
        FROM unnest(b_partition, b_base, b_last, b_byte_offset, b_size, b_max_timestamp,
            b_append_time, b_timestamp, b_running_max, b_producer, b_epoch, b_control,
            b_coordinator_epoch) q(partition_id, base, last, byte_offset, size, max_timestamp,
            append_time, ts, running_max, producer, epoch, control, coordinator_epoch);
"""
    + _APPLY_TAIL
)

APPLY_COMMITS_FUNCTION: Final = (
    """
CREATE OR REPLACE FUNCTION diskless_apply_commits(
    f_key text[], f_known boolean[], f_state smallint[], f_size bigint[], f_since bigint[],
    f_live bigint[],
    b_partition bigint[], b_base bigint[], b_last bigint[], b_file int[], b_byte_offset bigint[],
"""
    + _APPLY_PARAMETERS
    + """DECLARE
    fids bigint[];
BEGIN
    UPDATE files f SET state = q.state, size = q.size, since_ms = q.since,
        live_batches = q.live
        FROM unnest(f_key, f_known, f_state, f_size, f_since, f_live)
            q(key, known, state, size, since, live)
        WHERE q.known AND f.key = q.key;
    INSERT INTO files (key, state, size, since_ms, live_batches)
        SELECT q.key, q.state, q.size, q.since, q.live
        FROM unnest(f_key, f_known, f_state, f_size, f_since, f_live)
            q(key, known, state, size, since, live)
        WHERE NOT q.known;
    IF cardinality(b_file) > 0 THEN
        SELECT array_agg(f.file_id ORDER BY q.n) INTO fids
            FROM unnest(f_key) WITH ORDINALITY q(key, n) JOIN files f ON f.key = q.key;
        INSERT INTO batches SELECT q.partition_id, q.base, q.last, fids[q.file], q.byte_offset,
            q.size, q.max_timestamp, q.append_time, q.ts, q.running_max, q.producer, q.epoch,
            q.control, q.coordinator_epoch
            FROM unnest(b_partition, b_base, b_last, b_file, b_byte_offset, b_size,
                b_max_timestamp, b_append_time, b_timestamp, b_running_max, b_producer, b_epoch,
                b_control, b_coordinator_epoch) q(partition_id, base, last, file, byte_offset,
                size, max_timestamp, append_time, ts, running_max, producer, epoch, control,
                coordinator_epoch);
    END IF;
"""
    + _APPLY_TAIL
)
"""`diskless_apply_commit` for any number of files, each batch naming its file by position in
`f_key` (1-based) where its row has the file id, for the commits of several objects in one
step; migration 8, which drops the one-file function."""

PEEK_COMMIT_FUNCTION: Final = f"""
CREATE OR REPLACE FUNCTION diskless_peek_commit(
    part_names text[], part_nums int[], producer_slots int[], producer_ids bigint[],
    broker_ids bigint[], file_keys text[]
) {_LOADED_ROWS} LANGUAGE plpgsql STABLE AS $fn$
DECLARE
    slots int[];
    ids bigint[];
BEGIN
    IF cardinality(part_names) > 0 THEN{_FIND_PARTITIONS}{_PARTITION_ROWS}
    END IF;{_producer_rows(versioned=True)}{_broker_and_file_rows("")}
END
$fn$
"""
"""What `diskless_load` reads for a commit, taking no lock, on one snapshot (STABLE: every
statement sees the state as of the call), each producer entry with its version (the `xmin` of
its row) in `h`; migration 9. See `postgres_txn` on optimistic commits."""

APPLY_REBASED_FUNCTION: Final = f"""
CREATE OR REPLACE FUNCTION diskless_apply_rebased(
    gate_key bigint, gate_overlap bigint,
    w_broker bigint[], w_epoch bigint[],
    v_partition bigint[], v_producer bigint[], v_version bigint[],
    l_id bigint[], l_hw bigint[],
    f_key text[], f_state smallint[], f_size bigint[], f_since bigint[], f_live bigint[],
    b_partition bigint[], b_base bigint[], b_last bigint[], b_file int[], b_byte_offset bigint[],
    b_size bigint[], b_max_timestamp bigint[], b_append_time bigint[], b_timestamp bigint[],
    b_running_max bigint[], b_producer bigint[], b_epoch int[], b_control int[],
    b_coordinator_epoch int[],
    p_id bigint[], p_added bigint[], p_added_size bigint[], p_running_max bigint[],
    r_partition bigint[], r_producer bigint[], r_epoch int[], r_last_timestamp bigint[],
    r_update bigint[], r_coordinator_epoch int[], r_txn_first bigint[], r_batches bytea[],
    OUT xid bigint, OUT moved bigint[], OUT deltas bigint[], OUT starts bigint[]
) LANGUAGE plpgsql AS $fn$
DECLARE
    hws bigint[];
    maxes bigint[];
    fids bigint[];
BEGIN
    IF cardinality(l_id)::bigint * cardinality(l_id)
            >= gate_overlap * (SELECT coalesce(sum(partition_count), 0) FROM topics) THEN
        PERFORM pg_advisory_xact_lock(gate_key);
    END IF;
    SELECT array_agg(p.partition_id), array_agg(q.hw), array_agg(p.high_watermark - q.hw),
            array_agg(p.log_start_offset), array_agg(p.ts_running_max)
        INTO moved, hws, deltas, starts, maxes
        FROM (SELECT partition_id, high_watermark, log_start_offset, ts_running_max
            FROM partitions WHERE partition_id = ANY(l_id) ORDER BY partition_id FOR UPDATE) p
        JOIN unnest(l_id, l_hw) q(id, hw) ON q.id = p.partition_id;
    IF coalesce(cardinality(moved), 0) <> cardinality(l_id)
        OR EXISTS (SELECT 1 FROM unnest(w_broker, w_epoch) q(id, epoch)
            LEFT JOIN (SELECT * FROM brokers WHERE broker_id = ANY(w_broker)
                ORDER BY broker_id FOR SHARE) x ON x.broker_id = q.id
            WHERE x.epoch IS DISTINCT FROM q.epoch)
        OR EXISTS (SELECT 1 FROM unnest(v_partition, v_producer, v_version) q(id, pid, version)
            LEFT JOIN producers r ON r.partition_id = q.id AND r.producer_id = q.pid
            WHERE r.xmin::text::bigint IS DISTINCT FROM q.version) THEN
        RAISE EXCEPTION 'the state this commit was planned on has changed'
            USING ERRCODE = 'serialization_failure';
    END IF;
    INSERT INTO files (key, state, size, since_ms, live_batches)
        SELECT * FROM unnest(f_key, f_state, f_size, f_since, f_live);
    SELECT array_agg(f.file_id ORDER BY q.n) INTO fids
        FROM unnest(f_key) WITH ORDINALITY q(key, n) JOIN files f ON f.key = q.key;
    INSERT INTO batches SELECT q.partition_id, q.base + d.delta, q.last + d.delta,
        fids[q.file], q.byte_offset, q.size, q.max_timestamp, q.append_time, q.ts,
        greatest(q.running_max, d.running_max), q.producer, q.epoch, q.control,
        q.coordinator_epoch
        FROM unnest(b_partition, b_base, b_last, b_file, b_byte_offset, b_size,
            b_max_timestamp, b_append_time, b_timestamp, b_running_max, b_producer, b_epoch,
            b_control, b_coordinator_epoch) q(partition_id, base, last, file, byte_offset,
            size, max_timestamp, append_time, ts, running_max, producer, epoch, control,
            coordinator_epoch)
        JOIN unnest(moved, deltas, maxes) d(id, delta, running_max) ON d.id = q.partition_id;
    UPDATE partitions p SET high_watermark = p.high_watermark + q.added,
        size_bytes = p.size_bytes + q.size,
        ts_running_max = greatest(p.ts_running_max, q.running_max)
        FROM unnest(p_id, p_added, p_added_size, p_running_max) q(id, added, size, running_max)
        WHERE p.partition_id = q.id;
    INSERT INTO producers SELECT r.partition_id, r.producer_id, r.epoch, r.last_timestamp,
        r.update_ms, r.coordinator_epoch, r.txn_first,
        CASE WHEN d.delta = 0 THEN r.batches
            ELSE decode('{SHIFT_MARK:02x}', 'hex') || int8send(d.hw) || int8send(d.delta)
                || r.batches END
        FROM unnest(r_partition, r_producer, r_epoch, r_last_timestamp, r_update,
            r_coordinator_epoch, r_txn_first, r_batches) r(partition_id, producer_id, epoch,
            last_timestamp, update_ms, coordinator_epoch, txn_first, batches)
        JOIN unnest(moved, hws, deltas) d(id, hw, delta) ON d.id = r.partition_id
        ON CONFLICT (partition_id, producer_id) DO UPDATE SET
        producer_epoch = excluded.producer_epoch, last_timestamp = excluded.last_timestamp,
        last_update_ms = excluded.last_update_ms, coordinator_epoch = excluded.coordinator_epoch,
        txn_first_offset = excluded.txn_first_offset, batches = excluded.batches;
    xid := txid_current();
END
$fn$
"""
"""Apply a commit planned on `diskless_peek_commit`'s snapshot, moved onto the current state;
migration 9. Under the gate when wide, it locks every partition the step read (sorted), then
checks that nothing the plan decided on has changed: the brokers' epochs and the producer
entries' versions, read again under those locks (a producer entry changes only under its
partition's lock; a broker's epoch stays while this holds its row FOR SHARE). If anything has,
it raises serialization_failure and the store plans the step again on locked rows. Otherwise
each partition's appends move by the appends that landed since the peek (`deltas`), which
shifts the new batch rows and, marked with `SHIFT_MARK`, the new retained batches of the
producer entries it writes; answers the partitions (`moved`), their shifts and log starts."""
