-- No optimistic commits (migration 9's functions go). Their apply wrote the retained
-- batches of the producer entries it moved in a marked format, which `postgres_schema`
-- rewrites in the plain one after these statements. Writers of producer entries are kept
-- out until this migration commits; after it, no function writes the format any more (a
-- process of an earlier version fails its commits from then on, instead of writing it).
LOCK TABLE producers IN SHARE ROW EXCLUSIVE MODE;
DROP FUNCTION diskless_peek_commit;
DROP FUNCTION diskless_apply_rebased;
