"""The Kafka protocol as this server speaks it: the advertised APIs and their versions, one typed
union of kio request classes per API, framing and the codec, and the checks made before kio
reads a body. Nothing here knows the library or a connection."""
