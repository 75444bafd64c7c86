-- A share-partition's whole state (KIP-932): its start, end, state epoch and in-flight ranges, as
-- one encoded value per share group and partition, changed by atomic steps of any broker.
CREATE TABLE share_states (
            group_id TEXT NOT NULL,
            topic TEXT NOT NULL,
            partition INTEGER NOT NULL,
            state BLOB NOT NULL,
            PRIMARY KEY (group_id, topic, partition)
        ) WITHOUT ROWID;
