"""Record codec tests; kafka-python is the independent oracle."""
