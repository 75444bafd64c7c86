-- Dynamic configs of brokers (by id; "" the cluster-wide default) and groups, by Kafka's
-- ConfigResource type code: a JSON object of names to values.
CREATE TABLE resource_configs (
            resource_type SMALLINT NOT NULL,
            resource_name TEXT NOT NULL,
            configs TEXT NOT NULL,
            PRIMARY KEY (resource_type, resource_name)
        );
