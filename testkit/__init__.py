"""What the tests and the benchmarks share: throwaway servers (PostgreSQL, S3, broker processes,
network namespaces), free ports, certificates, record batches built by an independent codec, Kafka
clients and wire helpers, and the suite's fixtures.

It sits above the library (it may import `diskless`, which never imports it) and below the tests
and the benchmarks, which import it and never each other (`tests/test_layering.py`).
"""
