"""Storage adapters of the coordinator engine: each only loads and applies (`_store`)."""
