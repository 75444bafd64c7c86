-- The commit gate in front of wide loads: `diskless_gated_load` is `diskless_load` behind the
-- gate when the step is wide (`postgres_step`'s module doc); the caller makes sure it is the
-- transaction's first lock.

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
;
