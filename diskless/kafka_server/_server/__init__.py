"""The server: each broker's listener and its connections (framing, ordering, limits), the
cluster of brokers one process runs, their settings, and the command line. It hands decoded
requests to the handler table and knows no API of its own.

Its packages by job, each importing only the ones before it: `auth` (TLS principals, the SASL
mechanisms and their JAAS users), `settings` (`ServerConfig`, Kafka's listeners and property
names), `network` (listeners, connections, authentication, the request budget), `metrics`
(Prometheus figures and readiness checks), and `process` (the cluster one process runs, its
services, its metrics endpoint, the command line and its start)."""
