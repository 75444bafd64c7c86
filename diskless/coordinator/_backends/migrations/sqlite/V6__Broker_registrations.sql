-- Where each broker incarnation listens, with a liveness deadline (cluster membership).
CREATE TABLE broker_registrations (
            broker_id INTEGER PRIMARY KEY,
            broker_epoch INTEGER NOT NULL,
            host TEXT NOT NULL,
            port INTEGER NOT NULL,
            rack TEXT,
            expires_ms INTEGER NOT NULL
        );
