-- Transaction records (the transactional-id state), due_ms indexed for the sweepers.
CREATE TABLE txn_records (
            transactional_id TEXT PRIMARY KEY,
            record BLOB NOT NULL,
            due_ms INTEGER
        ) WITHOUT ROWID;
CREATE INDEX txn_records_due ON txn_records (due_ms) WHERE due_ms IS NOT NULL;
