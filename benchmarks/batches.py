"""Record batches for the micro-benchmarks, built by kafka-python as a producer would send them.

The library has no general batch encoder of its own (a broker only receives batches), so the
benchmarks build them with the same independent codec the harness uses, without depending on the
test suite.
"""

from __future__ import annotations

from collections.abc import Sequence

from benchmarks.harness.records import kafka_records

CREATE_TIME_MS = 1_700_000_000_000


def build_batch(values: Sequence[bytes], *, timestamp_ms: int = CREATE_TIME_MS) -> bytes:
    """A v2 batch of keyless records, base offset 0, no producer id; record i is stamped
    `timestamp_ms + i`."""
    builder_class, _ = kafka_records()
    builder = builder_class(
        magic=2,
        compression_type=0,
        is_transactional=False,
        producer_id=-1,
        producer_epoch=-1,
        base_sequence=-1,
        batch_size=1 << 30,
    )
    for i, value in enumerate(values):
        if builder.append(i, timestamp=timestamp_ms + i, key=None, value=value, headers=[]) is None:
            raise ValueError(f"record {i} does not fit in the batch")
    return bytes(builder.build())
