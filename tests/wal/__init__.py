"""WAL writer, format and simulation tests; kafka-python builds and decodes the batches."""
