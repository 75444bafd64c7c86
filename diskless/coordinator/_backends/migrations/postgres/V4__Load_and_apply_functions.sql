-- A commit's load and apply as server-side functions, one round trip each. They only load and
-- store, as statements from the client would; every decision stays in the shared Python rules.
-- `diskless_load` takes the row locks in the store's fixed order (partitions, leases, brokers,
-- files), each kind sorted by key, then reads the rows keyed by the locked partitions. A PL/pgSQL
-- function runs each statement on a fresh snapshot under READ COMMITTED, so those reads see
-- everything committed before the locks were granted. Partitions are found by (topic, index) one
-- index probe per key (the OFFSET 0 fence keeps a plan cached before the table had statistics
-- from scanning a topic's partitions per key), then locked by id in a statement of their own: a
-- locking clause inside such a subquery would lock in whatever order the join produced rows,
-- which differs between steps and deadlocks them. It answers one row per loaded item in a wide
-- shape: `kind`, then columns whose meaning depends on it (`postgres_rows.LOADED_*`; unused
-- columns are NULL).

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
;

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
;
