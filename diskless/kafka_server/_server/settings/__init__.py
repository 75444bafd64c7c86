"""The server's settings: `ServerConfig` with Kafka's names and defaults, the listeners, and
Kafka's `server.properties` (the file format, the properties applied, and those a diskless broker
accepts without applying or refuses)."""
