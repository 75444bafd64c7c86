"""The cleaner's core: its map, its filter, and Kafka's rules read back by kafka-python."""
