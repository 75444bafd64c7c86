-- SCRAM credentials (KIP-554), salted and iterated: never a password.
CREATE TABLE scram_credentials (
            user_name TEXT NOT NULL,
            mechanism SMALLINT NOT NULL,
            salt BYTEA NOT NULL,
            stored_key BYTEA NOT NULL,
            server_key BYTEA NOT NULL,
            iterations INTEGER NOT NULL,
            PRIMARY KEY (user_name, mechanism)
        );
