"""One broker process: the cluster of brokers it runs, its lifecycle services, its metrics and
health, its log lines, the command line and `server.properties` it starts from, and a start
that fails in one line."""
