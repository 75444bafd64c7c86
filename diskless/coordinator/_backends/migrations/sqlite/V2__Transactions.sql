-- Transactions: markers as batch rows (file_id 0: no file), producer ids, KIP-890
-- registrations, leases (the commit barrier), the ongoing (LSO) and aborted indexes.
ALTER TABLE batches ADD COLUMN control INTEGER NOT NULL DEFAULT -1;
ALTER TABLE batches ADD COLUMN coordinator_epoch INTEGER NOT NULL DEFAULT 0;
CREATE TABLE meta (name TEXT PRIMARY KEY, value INTEGER NOT NULL) WITHOUT ROWID;
CREATE TABLE txn_registrations (
            partition_id INTEGER NOT NULL,
            producer_id INTEGER NOT NULL,
            producer_epoch INTEGER NOT NULL,
            ending INTEGER NOT NULL,
            PRIMARY KEY (partition_id, producer_id)
        ) WITHOUT ROWID;
CREATE TABLE txn_leases (
            lease_id INTEGER PRIMARY KEY AUTOINCREMENT,
            partition_id INTEGER NOT NULL,
            producer_id INTEGER NOT NULL,
            producer_epoch INTEGER NOT NULL,
            expires_ms INTEGER NOT NULL
        );
CREATE INDEX txn_leases_by_producer ON txn_leases (partition_id, producer_id);
CREATE TABLE ongoing_txns (
            partition_id INTEGER NOT NULL,
            first_offset INTEGER NOT NULL,
            producer_id INTEGER NOT NULL,
            PRIMARY KEY (partition_id, first_offset)
        ) WITHOUT ROWID;
CREATE TABLE aborted_txns (
            partition_id INTEGER NOT NULL,
            last_offset INTEGER NOT NULL,
            producer_id INTEGER NOT NULL,
            first_offset INTEGER NOT NULL,
            lso INTEGER NOT NULL,
            PRIMARY KEY (partition_id, last_offset)
        ) WITHOUT ROWID;
