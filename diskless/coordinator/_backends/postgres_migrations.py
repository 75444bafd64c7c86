"""The PostgreSQL coordinator's migrations, as the literal texts databases ran.

A released migration never changes, not even by a byte (`tests/coordinator/test_migrations.py`
pins their hashes): a database that ran it is never brought the new text, so an edit would only
make new databases differ from old ones. Hence no text here is built from shared pieces. A later
version of a server-side function is a new migration that replaces it (CREATE OR REPLACE).

The server-side functions only load and store, as statements from the client would; every
decision stays in the shared Python rules.
- `diskless_load` (4) takes the row locks in the store's fixed order (partitions, leases,
  brokers, files), each kind sorted by key, then reads the rows keyed by the locked partitions.
  A PL/pgSQL function runs each statement on a fresh snapshot under READ COMMITTED, so those
  reads see everything committed before the locks were granted. Partitions are found by
  (topic, index) one index probe per key (the OFFSET 0 fence keeps a plan cached before the
  table had statistics from scanning a topic's partitions per key), then locked by id in a
  statement of their own: a locking clause inside such a subquery would lock in whatever order
  the join produced rows, which differs between steps and deadlocks them. It answers one row per
  loaded item in a wide shape: `kind`, then columns whose meaning depends on it
  (`postgres_rows.LOADED_*`; unused columns are NULL).
- `diskless_gated_load` (5) is `diskless_load` behind the commit gate when the step is wide
  (`postgres_step`'s module doc); the caller makes sure it is the transaction's first lock.
- `diskless_apply_commits` (8) stores what a commit of one or several objects decided (their
  files, batches, partitions, producer entries, released leases, opened transactions), each
  batch naming its file by position in `f_key` (1-based), and answers the transaction's id,
  which resolves a lost COMMIT.
"""

from __future__ import annotations

from typing import Final

MIGRATIONS: Final[list[list[str]]] = [
    # 1: topics, partitions, files, batches (markers included: file_id 0, no file), producer
    # state, broker epochs, counters, transaction registrations, leases (the commit barrier),
    # the ongoing (LSO) and aborted indexes, transaction records, committed group offsets.
    [
        """CREATE TABLE topics (
            topic_id BIGSERIAL PRIMARY KEY,
            name TEXT NOT NULL UNIQUE,
            partition_count INTEGER NOT NULL,
            timestamp_type INTEGER NOT NULL,
            retention_ms BIGINT NOT NULL,
            retention_bytes BIGINT NOT NULL,
            max_message_bytes BIGINT NOT NULL,
            timestamp_before_max_ms BIGINT NOT NULL,
            timestamp_after_max_ms BIGINT NOT NULL
        )""",
        """CREATE TABLE partitions (
            partition_id BIGSERIAL PRIMARY KEY,
            topic_id BIGINT NOT NULL,
            partition INTEGER NOT NULL,
            high_watermark BIGINT NOT NULL DEFAULT 0,
            log_start_offset BIGINT NOT NULL DEFAULT 0,
            size_bytes BIGINT NOT NULL DEFAULT 0,
            ts_running_max BIGINT NOT NULL DEFAULT -1,
            UNIQUE (topic_id, partition)
        )""",
        # state: 0 live, 1 unreferenced, 2 condemned.
        """CREATE TABLE files (
            file_id BIGSERIAL PRIMARY KEY,
            key TEXT NOT NULL UNIQUE,
            state SMALLINT NOT NULL,
            size BIGINT NOT NULL,
            since_ms BIGINT NOT NULL,
            live_batches BIGINT NOT NULL
        )""",
        "CREATE INDEX files_dead ON files (since_ms, key) WHERE state <> 0",
        """CREATE TABLE batches (
            partition_id BIGINT NOT NULL,
            base_offset BIGINT NOT NULL,
            last_offset BIGINT NOT NULL,
            file_id BIGINT NOT NULL,
            byte_offset BIGINT NOT NULL,
            size BIGINT NOT NULL,
            max_timestamp BIGINT NOT NULL,
            log_append_time BIGINT NOT NULL,
            timestamp BIGINT NOT NULL,
            ts_running_max BIGINT NOT NULL,
            producer_id BIGINT NOT NULL,
            producer_epoch INTEGER NOT NULL,
            control INTEGER NOT NULL,
            coordinator_epoch INTEGER NOT NULL,
            PRIMARY KEY (partition_id, base_offset)
        )""",
        # MAX_TIMESTAMP: the first batch among those with the largest timestamp.
        "CREATE INDEX batches_by_timestamp ON batches (partition_id, timestamp DESC, base_offset)",
        # By timestamp: the running max grows with the offset, so the first entry >= ts answers.
        "CREATE INDEX batches_by_running_max"
        " ON batches (partition_id, ts_running_max, base_offset)",
        """CREATE TABLE producers (
            partition_id BIGINT NOT NULL,
            producer_id BIGINT NOT NULL,
            producer_epoch INTEGER NOT NULL,
            last_timestamp BIGINT NOT NULL,
            last_update_ms BIGINT NOT NULL,
            coordinator_epoch INTEGER NOT NULL,
            txn_first_offset BIGINT,
            batches BYTEA NOT NULL,
            PRIMARY KEY (partition_id, producer_id)
        )""",
        "CREATE INDEX producers_idle ON producers (last_update_ms) WHERE txn_first_offset IS NULL",
        "CREATE TABLE brokers (broker_id BIGINT PRIMARY KEY, epoch BIGINT NOT NULL)",
        "CREATE TABLE meta (name TEXT PRIMARY KEY, value BIGINT NOT NULL)",
        """CREATE TABLE txn_registrations (
            partition_id BIGINT NOT NULL,
            producer_id BIGINT NOT NULL,
            producer_epoch INTEGER NOT NULL,
            ending BOOLEAN NOT NULL,
            PRIMARY KEY (partition_id, producer_id)
        )""",
        """CREATE TABLE txn_leases (
            lease_id BIGSERIAL PRIMARY KEY,
            partition_id BIGINT NOT NULL,
            producer_id BIGINT NOT NULL,
            producer_epoch INTEGER NOT NULL,
            expires_ms BIGINT NOT NULL
        )""",
        "CREATE INDEX txn_leases_by_producer ON txn_leases (partition_id, producer_id)",
        """CREATE TABLE ongoing_txns (
            partition_id BIGINT NOT NULL,
            first_offset BIGINT NOT NULL,
            producer_id BIGINT NOT NULL,
            PRIMARY KEY (partition_id, first_offset)
        )""",
        """CREATE TABLE aborted_txns (
            partition_id BIGINT NOT NULL,
            last_offset BIGINT NOT NULL,
            producer_id BIGINT NOT NULL,
            first_offset BIGINT NOT NULL,
            lso BIGINT NOT NULL,
            PRIMARY KEY (partition_id, last_offset)
        )""",
        """CREATE TABLE txn_records (
            transactional_id TEXT PRIMARY KEY,
            record BYTEA NOT NULL,
            due_ms BIGINT
        )""",
        "CREATE INDEX txn_records_due ON txn_records (due_ms) WHERE due_ms IS NOT NULL",
        """CREATE TABLE group_offsets (
            group_id TEXT NOT NULL,
            topic TEXT NOT NULL,
            partition INTEGER NOT NULL,
            committed_offset BIGINT NOT NULL,
            metadata TEXT,
            PRIMARY KEY (group_id, topic, partition)
        )""",
        "CREATE INDEX group_offsets_by_topic ON group_offsets (topic)",
        """CREATE TABLE broker_registrations (
            broker_id INTEGER PRIMARY KEY,
            broker_epoch INTEGER NOT NULL,
            host TEXT NOT NULL,
            port INTEGER NOT NULL,
            rack TEXT,
            expires_ms BIGINT NOT NULL
        )""",
    ],
    # 2: extents, each the metadata of a run of batches consolidated into one object.
    [
        """CREATE TABLE extents (
        partition_id BIGINT NOT NULL,
        base_offset BIGINT NOT NULL,
        last_offset BIGINT NOT NULL,
        file_id BIGINT NOT NULL,
        byte_offset BIGINT NOT NULL,
        size BIGINT NOT NULL,
        max_timestamp BIGINT NOT NULL,
        log_append_time BIGINT NOT NULL,
        timestamp BIGINT NOT NULL,
        ts_running_max BIGINT NOT NULL,
        index_byte_offset BIGINT NOT NULL,
        index_size BIGINT NOT NULL,
        PRIMARY KEY (partition_id, base_offset)
    )""",
    ],
    # 3: what a broker needs to rewrite a transaction version 1 producer's batches.
    [
        "ALTER TABLE txn_registrations ADD COLUMN client_epoch INTEGER NOT NULL DEFAULT -1",
        "ALTER TABLE txn_registrations ADD COLUMN sequence_base INTEGER NOT NULL DEFAULT 0",
    ],
    # 4: a commit's load and apply as server-side functions, one round trip each.
    [
        """
CREATE OR REPLACE FUNCTION diskless_load(
    part_names text[], part_nums int[],
    producer_slots int[], producer_ids bigint[],
    registration_slots int[], registration_ids bigint[],
    lease_ids bigint[], broker_ids bigint[], file_keys text[]
) RETURNS TABLE (
    kind int, a bigint, name text, b bigint, c bigint, d bigint, e bigint, f bigint, g bigint,
    h bigint, i bigint, j bigint, k bigint, l bigint, m bigint, blob bytea
) LANGUAGE plpgsql AS $fn$
DECLARE
    slots int[];
    ids bigint[];
BEGIN
    IF cardinality(part_names) > 0 THEN
        SELECT array_agg(q.n), array_agg(p.partition_id) INTO slots, ids
            FROM unnest(part_names, part_nums) WITH ORDINALITY q(name, part, n)
            JOIN topics t ON t.name = q.name
            CROSS JOIN LATERAL (SELECT p0.partition_id FROM partitions p0
                WHERE p0.topic_id = t.topic_id AND p0.partition = q.part OFFSET 0) p;
        PERFORM 1 FROM partitions WHERE partition_id = ANY(ids)
            ORDER BY partition_id FOR UPDATE;
        RETURN QUERY SELECT 1, p.partition_id, t.name, p.partition::bigint,
            t.timestamp_type::bigint, t.retention_ms, t.retention_bytes, t.max_message_bytes,
            p.high_watermark, p.log_start_offset, p.size_bytes, p.ts_running_max,
            (SELECT min(o.first_offset) FROM ongoing_txns o
                WHERE o.partition_id = p.partition_id),
            t.timestamp_before_max_ms, t.timestamp_after_max_ms, NULL::bytea
            FROM partitions p JOIN topics t ON t.topic_id = p.topic_id
            WHERE p.partition_id = ANY(ids);
    END IF;
    IF cardinality(producer_slots) > 0 AND ids IS NOT NULL THEN
        RETURN QUERY SELECT 2, r.partition_id, NULL::text, r.producer_id,
            r.producer_epoch::bigint, r.last_timestamp, r.last_update_ms,
            r.coordinator_epoch::bigint, r.txn_first_offset, NULL::bigint, NULL::bigint,
            NULL::bigint, NULL::bigint, NULL::bigint, NULL::bigint, r.batches
            FROM unnest(producer_slots, producer_ids) q(slot, pid)
            JOIN unnest(slots, ids) s(slot, id) ON s.slot = q.slot
            CROSS JOIN LATERAL (SELECT * FROM producers r0 WHERE r0.partition_id = s.id
                AND r0.producer_id = q.pid OFFSET 0) r;
    END IF;
    IF cardinality(registration_slots) > 0 AND ids IS NOT NULL THEN
        RETURN QUERY SELECT 3, r.partition_id, NULL::text, r.producer_id,
            r.producer_epoch::bigint, r.ending::int::bigint, r.client_epoch::bigint,
            r.sequence_base::bigint, NULL::bigint, NULL::bigint, NULL::bigint, NULL::bigint,
            NULL::bigint, NULL::bigint, NULL::bigint, NULL::bytea
            FROM unnest(registration_slots, registration_ids) q(slot, pid)
            JOIN unnest(slots, ids) s(slot, id) ON s.slot = q.slot
            CROSS JOIN LATERAL (SELECT * FROM txn_registrations r0
                WHERE r0.partition_id = s.id AND r0.producer_id = q.pid OFFSET 0) r;
    END IF;
    IF cardinality(lease_ids) > 0 THEN
        RETURN QUERY SELECT 4, x.lease_id, NULL::text, x.partition_id,
            x.producer_id, x.producer_epoch::bigint, x.expires_ms, NULL::bigint,
            NULL::bigint, NULL::bigint, NULL::bigint, NULL::bigint, NULL::bigint, NULL::bigint,
            NULL::bigint, NULL::bytea
            FROM (SELECT * FROM txn_leases WHERE lease_id = ANY(lease_ids)
                ORDER BY lease_id FOR UPDATE) x;
    END IF;
    IF cardinality(broker_ids) > 0 THEN
        RETURN QUERY SELECT 5, x.broker_id, NULL::text, x.epoch, NULL::bigint,
            NULL::bigint, NULL::bigint, NULL::bigint, NULL::bigint, NULL::bigint, NULL::bigint,
            NULL::bigint, NULL::bigint, NULL::bigint, NULL::bigint, NULL::bytea
            FROM (SELECT * FROM brokers WHERE broker_id = ANY(broker_ids)
                ORDER BY broker_id FOR UPDATE) x;
    END IF;
    IF cardinality(file_keys) > 0 THEN
        RETURN QUERY SELECT 6, NULL::bigint, x.key, x.state::bigint, x.size,
            x.since_ms, x.live_batches, NULL::bigint, NULL::bigint, NULL::bigint,
            NULL::bigint, NULL::bigint, NULL::bigint, NULL::bigint, NULL::bigint, NULL::bytea
            FROM (SELECT * FROM files WHERE key = ANY(file_keys) ORDER BY key FOR UPDATE) x;
    END IF;
END
$fn$
""",
        """
CREATE OR REPLACE FUNCTION diskless_apply_commit(
    file_key text, file_known boolean, file_state smallint, file_size bigint,
    file_since bigint, file_live bigint,
    b_partition bigint[], b_base bigint[], b_last bigint[], b_byte_offset bigint[],
    b_size bigint[], b_max_timestamp bigint[], b_append_time bigint[], b_timestamp bigint[],
    b_running_max bigint[], b_producer bigint[], b_epoch int[], b_control int[],
    b_coordinator_epoch int[],
    p_id bigint[], p_hw bigint[], p_start bigint[], p_size bigint[], p_running_max bigint[],
    r_partition bigint[], r_producer bigint[], r_epoch int[], r_last_timestamp bigint[],
    r_update bigint[], r_coordinator_epoch int[], r_txn_first bigint[], r_batches bytea[],
    released bigint[],
    o_partition bigint[], o_first bigint[], o_producer bigint[]
) RETURNS bigint LANGUAGE plpgsql AS $fn$
DECLARE
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
""",
    ],
    # 5: the commit gate in front of wide loads.
    [
        """
CREATE OR REPLACE FUNCTION diskless_gated_load(gate_key bigint, gate_overlap bigint,
    part_names text[], part_nums int[],
    producer_slots int[], producer_ids bigint[],
    registration_slots int[], registration_ids bigint[],
    lease_ids bigint[], broker_ids bigint[], file_keys text[]
) RETURNS TABLE (
    kind int, a bigint, name text, b bigint, c bigint, d bigint, e bigint, f bigint, g bigint,
    h bigint, i bigint, j bigint, k bigint, l bigint, m bigint, blob bytea
) LANGUAGE plpgsql AS $fn$
BEGIN
    IF cardinality(part_names)::bigint * cardinality(part_names)
            >= gate_overlap * (SELECT coalesce(sum(partition_count), 0) FROM topics) THEN
        PERFORM pg_advisory_xact_lock(gate_key);
    END IF;
    RETURN QUERY SELECT * FROM diskless_load(part_names, part_nums, producer_slots,
        producer_ids, registration_slots, registration_ids, lease_ids, broker_ids, file_keys);
END
$fn$
""",
    ],
    # 6: no index on producers' last update. Every commit changes that column, so the index
    # cost each producer upsert new index entries (no HOT update), about 6% of a commit; the
    # expiry it served runs with the retention checks, minutes apart, and scans instead.
    ["DROP INDEX producers_idle"],
    # 7: a sparse time index (the time marks) for the two per-batch timestamp indexes.
    [
        "DROP INDEX batches_by_timestamp",
        "DROP INDEX batches_by_running_max",
        "CREATE INDEX batches_time_marks ON batches (partition_id, ts_running_max,"
        " base_offset) WHERE (base_offset + 1023) / 1024 <= last_offset / 1024",
    ],
    # 8: the apply of a commit for several files at once (group commits), instead of one.
    [
        """
CREATE OR REPLACE FUNCTION diskless_apply_commits(
    f_key text[], f_known boolean[], f_state smallint[], f_size bigint[], f_since bigint[],
    f_live bigint[],
    b_partition bigint[], b_base bigint[], b_last bigint[], b_file int[], b_byte_offset bigint[],
    b_size bigint[], b_max_timestamp bigint[], b_append_time bigint[], b_timestamp bigint[],
    b_running_max bigint[], b_producer bigint[], b_epoch int[], b_control int[],
    b_coordinator_epoch int[],
    p_id bigint[], p_hw bigint[], p_start bigint[], p_size bigint[], p_running_max bigint[],
    r_partition bigint[], r_producer bigint[], r_epoch int[], r_last_timestamp bigint[],
    r_update bigint[], r_coordinator_epoch int[], r_txn_first bigint[], r_batches bytea[],
    released bigint[],
    o_partition bigint[], o_first bigint[], o_producer bigint[]
) RETURNS bigint LANGUAGE plpgsql AS $fn$
DECLARE
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
""",
        "DROP FUNCTION diskless_apply_commit",
    ],
    # 9: optimistic commits, planned on an unlocked peek and moved onto the state they land on
    # (dropped by 11).
    [
        """
CREATE OR REPLACE FUNCTION diskless_peek_commit(
    part_names text[], part_nums int[], producer_slots int[], producer_ids bigint[],
    broker_ids bigint[], file_keys text[]
) RETURNS TABLE (
    kind int, a bigint, name text, b bigint, c bigint, d bigint, e bigint, f bigint, g bigint,
    h bigint, i bigint, j bigint, k bigint, l bigint, m bigint, blob bytea
) LANGUAGE plpgsql STABLE AS $fn$
DECLARE
    slots int[];
    ids bigint[];
BEGIN
    IF cardinality(part_names) > 0 THEN
        SELECT array_agg(q.n), array_agg(p.partition_id) INTO slots, ids
            FROM unnest(part_names, part_nums) WITH ORDINALITY q(name, part, n)
            JOIN topics t ON t.name = q.name
            CROSS JOIN LATERAL (SELECT p0.partition_id FROM partitions p0
                WHERE p0.topic_id = t.topic_id AND p0.partition = q.part OFFSET 0) p;
        RETURN QUERY SELECT 1, p.partition_id, t.name, p.partition::bigint,
            t.timestamp_type::bigint, t.retention_ms, t.retention_bytes, t.max_message_bytes,
            p.high_watermark, p.log_start_offset, p.size_bytes, p.ts_running_max,
            (SELECT min(o.first_offset) FROM ongoing_txns o
                WHERE o.partition_id = p.partition_id),
            t.timestamp_before_max_ms, t.timestamp_after_max_ms, NULL::bytea
            FROM partitions p JOIN topics t ON t.topic_id = p.topic_id
            WHERE p.partition_id = ANY(ids);
    END IF;
    IF cardinality(producer_slots) > 0 AND ids IS NOT NULL THEN
        RETURN QUERY SELECT 2, r.partition_id, NULL::text, r.producer_id,
            r.producer_epoch::bigint, r.last_timestamp, r.last_update_ms,
            r.coordinator_epoch::bigint, r.txn_first_offset, r.version, NULL::bigint,
            NULL::bigint, NULL::bigint, NULL::bigint, NULL::bigint, r.batches
            FROM unnest(producer_slots, producer_ids) q(slot, pid)
            JOIN unnest(slots, ids) s(slot, id) ON s.slot = q.slot
            CROSS JOIN LATERAL (SELECT *, r0.xmin::text::bigint AS version FROM producers r0 WHERE r0.partition_id = s.id
                AND r0.producer_id = q.pid OFFSET 0) r;
    END IF;
    IF cardinality(broker_ids) > 0 THEN
        RETURN QUERY SELECT 5, x.broker_id, NULL::text, x.epoch, NULL::bigint,
            NULL::bigint, NULL::bigint, NULL::bigint, NULL::bigint, NULL::bigint, NULL::bigint,
            NULL::bigint, NULL::bigint, NULL::bigint, NULL::bigint, NULL::bytea
            FROM (SELECT * FROM brokers WHERE broker_id = ANY(broker_ids)
                ORDER BY broker_id) x;
    END IF;
    IF cardinality(file_keys) > 0 THEN
        RETURN QUERY SELECT 6, NULL::bigint, x.key, x.state::bigint, x.size,
            x.since_ms, x.live_batches, NULL::bigint, NULL::bigint, NULL::bigint,
            NULL::bigint, NULL::bigint, NULL::bigint, NULL::bigint, NULL::bigint, NULL::bytea
            FROM (SELECT * FROM files WHERE key = ANY(file_keys) ORDER BY key) x;
    END IF;
END
$fn$
""",  # noqa: E501 (a released text, kept as it ran)
        """
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
            ELSE decode('c1', 'hex') || int8send(d.hw) || int8send(d.delta)
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
""",
    ],
    # 10: leases held by a broker incarnation (they die with it), and consumer groups' owners.
    [
        "ALTER TABLE txn_leases ADD COLUMN broker_id INTEGER NOT NULL DEFAULT -1",
        "ALTER TABLE txn_leases ADD COLUMN broker_epoch BIGINT NOT NULL DEFAULT -1",
        "CREATE INDEX txn_leases_by_broker ON txn_leases (broker_id, broker_epoch)",
        """CREATE TABLE group_owners (
            group_id TEXT PRIMARY KEY,
            broker_id INTEGER NOT NULL,
            broker_epoch BIGINT NOT NULL,
            generation INTEGER NOT NULL
        )""",
    ],
    # 11: no optimistic commits (migration 9's functions go). Their apply wrote the retained
    # batches of the producer entries it moved in a marked format, which `postgres_schema`
    # rewrites in the plain one after these statements. Writers of producer entries are kept
    # out until this migration commits; after it, no function writes the format any more (a
    # process of an earlier version fails its commits from then on, instead of writing it).
    [
        "LOCK TABLE producers IN SHARE ROW EXCLUSIVE MODE",
        "DROP FUNCTION diskless_peek_commit",
        "DROP FUNCTION diskless_apply_rebased",
    ],
    # 12: SCRAM credentials (KIP-554), salted and iterated: never a password.
    [
        """CREATE TABLE scram_credentials (
            user_name TEXT NOT NULL,
            mechanism SMALLINT NOT NULL,
            salt BYTEA NOT NULL,
            stored_key BYTEA NOT NULL,
            server_key BYTEA NOT NULL,
            iterations INTEGER NOT NULL,
            PRIMARY KEY (user_name, mechanism)
        )""",
    ],
    # 13: ACL bindings (Kafka's authorizer), and the counter every change of them increments
    # (its row exists from here on, so that a change of ACLs always finds it to lock).
    [
        """CREATE TABLE acls (
            resource_type SMALLINT NOT NULL,
            resource_name TEXT NOT NULL,
            pattern_type SMALLINT NOT NULL,
            principal TEXT NOT NULL,
            host TEXT NOT NULL,
            operation SMALLINT NOT NULL,
            permission SMALLINT NOT NULL,
            PRIMARY KEY (resource_type, resource_name, pattern_type, principal, host, operation,
                permission)
        )""",
        "INSERT INTO meta VALUES ('acl_version', 0) ON CONFLICT (name) DO NOTHING",
    ],
    # 14: per-topic compression (compression.type, -1 for "producer", and the codecs' levels).
    [
        "ALTER TABLE topics ADD COLUMN compression_type SMALLINT NOT NULL DEFAULT -1",
        "ALTER TABLE topics ADD COLUMN compression_gzip_level INTEGER NOT NULL DEFAULT -1",
        "ALTER TABLE topics ADD COLUMN compression_lz4_level INTEGER NOT NULL DEFAULT 9",
        "ALTER TABLE topics ADD COLUMN compression_zstd_level INTEGER NOT NULL DEFAULT 3",
    ],
    # 15: the leader epoch committed with each group offset (KIP-320).
    [
        "ALTER TABLE group_offsets ADD COLUMN leader_epoch INTEGER NOT NULL DEFAULT -1",
    ],
    # 16: each topic's id (KIP-516), random at creation; existing topics each get their own (a
    # volatile default is evaluated per row).
    [
        "ALTER TABLE topics ADD COLUMN topic_uuid UUID NOT NULL DEFAULT gen_random_uuid()",
        "ALTER TABLE topics ALTER COLUMN topic_uuid DROP DEFAULT",
    ],
    # 17: Kafka topic configs a diskless topic accepts and does not apply, kept as given.
    [
        "ALTER TABLE topics ADD COLUMN inapplicable_configs TEXT NOT NULL DEFAULT ''",
    ],
]
