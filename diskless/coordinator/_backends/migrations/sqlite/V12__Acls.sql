-- ACL bindings (Kafka's authorizer), and the counter every change of them increments.
CREATE TABLE acls (
            resource_type INTEGER NOT NULL,
            resource_name TEXT NOT NULL,
            pattern_type INTEGER NOT NULL,
            principal TEXT NOT NULL,
            host TEXT NOT NULL,
            operation INTEGER NOT NULL,
            permission INTEGER NOT NULL,
            PRIMARY KEY (resource_type, resource_name, pattern_type, principal, host, operation,
                permission)
        ) WITHOUT ROWID;
INSERT OR IGNORE INTO meta VALUES ('acl_version', 0);
