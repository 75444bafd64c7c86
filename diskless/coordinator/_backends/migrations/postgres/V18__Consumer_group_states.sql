-- A consumer-protocol group's whole state (KIP-848): its epochs, members and assignments, as one
-- encoded value, written by the group's owner under the fence of its ownership.
CREATE TABLE group_states (
            group_id TEXT PRIMARY KEY,
            state BYTEA NOT NULL
        );
