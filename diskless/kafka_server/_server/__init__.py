"""The server: each broker's listener and its connections (framing, ordering, limits), the
cluster of brokers one process runs, their settings, and the command line. It hands decoded
requests to the handler table and knows no API of its own."""
