"""One handler per API key, by family, and the table that declares them (`table`). Each handler
decodes its typed request, calls the library, and encodes the typed response; it sees the broker
serving it only through `context.BrokerContext`."""
