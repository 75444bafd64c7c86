-- The apply of a commit for several files at once (group commits), instead of one.
-- `diskless_apply_commits` stores what a commit of one or several objects decided (their files,
-- batches, partitions, producer entries, released leases, opened transactions), each batch
-- naming its file by position in `f_key` (1-based), and answers the transaction's id, which
-- resolves a lost COMMIT.

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
;
DROP FUNCTION diskless_apply_commit;
