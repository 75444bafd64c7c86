-- ACL bindings (Kafka's authorizer), and the counter every change of them increments
-- (its row exists from here on, so that a change of ACLs always finds it to lock).
CREATE TABLE acls (
            resource_type SMALLINT NOT NULL,
            resource_name TEXT NOT NULL,
            pattern_type SMALLINT NOT NULL,
            principal TEXT NOT NULL,
            host TEXT NOT NULL,
            operation SMALLINT NOT NULL,
            permission SMALLINT NOT NULL,
            PRIMARY KEY (resource_type, resource_name, pattern_type, principal, host, operation,
                permission)
        );
INSERT INTO meta VALUES ('acl_version', 0) ON CONFLICT (name) DO NOTHING;
