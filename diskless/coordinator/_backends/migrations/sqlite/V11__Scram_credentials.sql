-- SCRAM credentials (KIP-554), salted and iterated: never a password.
CREATE TABLE scram_credentials (
            user_name TEXT NOT NULL,
            mechanism INTEGER NOT NULL,
            salt BLOB NOT NULL,
            stored_key BLOB NOT NULL,
            server_key BLOB NOT NULL,
            iterations INTEGER NOT NULL,
            PRIMARY KEY (user_name, mechanism)
        ) WITHOUT ROWID;
