-- No index on producers' last update. Every commit changes that column, so the index
-- cost each producer upsert new index entries (no HOT update), about 6% of a commit; the
-- expiry it served runs with the retention checks, minutes apart, and scans instead.
DROP INDEX producers_idle;
