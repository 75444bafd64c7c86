"""What the declared-size check costs next to kio's own decoding of a Produce request.

    .venv/bin/python -m benchmarks.bench_request_decode

The broker walks every request body along its schema before kio reads it (`_declared_sizes`:
kio reserves memory for declared array counts unchecked). For Produce v9 requests of 1 to 1,000
partitions, with 1 KiB and 16 KiB record sets, it times `check_declared_sizes` and kio's
`entity_reader` on the same bytes, one after the other in the same run; share = check time /
kio time. Each figure is the best of several repeats.
"""

from __future__ import annotations

import argparse
import datetime
import functools
import io
import time
from collections.abc import Callable
from typing import Final

from kio.schema.produce.v9.request import PartitionProduceData, ProduceRequest, TopicProduceData
from kio.serial import entity_reader, entity_writer
from kio.static.primitive import i16, i32

from diskless.kafka_server._protocol._declared_sizes import check_declared_sizes

PARTITION_COUNTS: Final = (1, 10, 100, 1000)
RECORD_BYTES: Final = (1024, 16 * 1024)
TOPICS_MAX: Final = 10


def produce_request(partitions: int, record_bytes: int) -> bytes:
    topics = min(partitions, TOPICS_MAX)
    body = ProduceRequest(
        transactional_id=None,
        acks=i16(-1),
        timeout=datetime.timedelta(seconds=30),
        topic_data=tuple(
            TopicProduceData(
                name=f"topic-{t}",
                partition_data=tuple(
                    PartitionProduceData(index=i32(p), records=bytes(record_bytes))
                    for p in range(partitions // topics)
                ),
            )
            for t in range(topics)
        ),
    )
    buffer = io.BytesIO()
    entity_writer(ProduceRequest)(buffer, body)
    return buffer.getvalue()


def best_seconds(action: Callable[[], object], repeats: int, budget_s: float) -> float:
    """The fastest of `repeats` timings, each of as many calls as fit in `budget_s` / repeats."""
    start = time.perf_counter()
    action()
    calls = max(1, int(budget_s / repeats / max(time.perf_counter() - start, 1e-7)))
    best = float("inf")
    for _ in range(repeats):
        start = time.perf_counter()
        for _ in range(calls):
            action()
        best = min(best, (time.perf_counter() - start) / calls)
    return best


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--seconds", type=float, default=0.5, help="per figure and side")
    args = parser.parse_args()
    read = entity_reader(ProduceRequest)
    print(f"{'partitions':>10} {'records':>8} {'kio decode':>12} {'size check':>12} {'share':>6}")
    for record_bytes in RECORD_BYTES:
        for partitions in PARTITION_COUNTS:
            data = produce_request(partitions, record_bytes)
            assert check_declared_sizes(ProduceRequest, data, 0) == len(data)
            kio_s = best_seconds(functools.partial(read, data, 0), args.repeats, args.seconds)
            check = functools.partial(check_declared_sizes, ProduceRequest, data, 0)
            check_s = best_seconds(check, args.repeats, args.seconds)
            print(
                f"{partitions:>10} {record_bytes // 1024:>6}KiB {kio_s * 1e6:>10.1f}us "
                f"{check_s * 1e6:>10.1f}us {check_s / kio_s:>6.2f}"
            )


if __name__ == "__main__":
    main()
