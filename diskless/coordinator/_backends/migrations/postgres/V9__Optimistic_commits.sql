-- Optimistic commits, planned on an unlocked peek and moved onto the state they land on
-- (dropped by 11).

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
;

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
;
