-- Leases held by a broker incarnation (they die with it), and consumer groups' owners.
ALTER TABLE txn_leases ADD COLUMN broker_id INTEGER NOT NULL DEFAULT -1;
ALTER TABLE txn_leases ADD COLUMN broker_epoch BIGINT NOT NULL DEFAULT -1;
CREATE INDEX txn_leases_by_broker ON txn_leases (broker_id, broker_epoch);
CREATE TABLE group_owners (
            group_id TEXT PRIMARY KEY,
            broker_id INTEGER NOT NULL,
            broker_epoch BIGINT NOT NULL,
            generation INTEGER NOT NULL
        );
