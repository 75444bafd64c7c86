"""A fetch waiting in one broker process is woken by a commit of another broker process.

Integration, real parts only: two `python -m diskless.kafka_server` processes over one SQLite
file or one PostgreSQL database (and one object directory). A raw Fetch, allowed to wait a
minute, is sent to the second process and left parked; a raw Produce to the first process
commits a record. The fetch must then answer with that record long before its minute is out:
the first process's commit reached the second through the coordinator's change feed (SQLite's
per-interval check, PostgreSQL's NOTIFY), not through a poll and not through its timeout.
"""

from __future__ import annotations

import dataclasses
import datetime
import select
import socket
import struct
from pathlib import Path

import pytest
from kio.schema.errors import ErrorCode as WireError
from kio.schema.produce.v9 import request as produce_v9

from testkit.batches import build_batch
from testkit.postgres import database_dsn
from testkit.processes import broker_processes
from testkit.wire import decode_response, encode_request, fetch_request

TOPIC = "wake"
MAX_WAIT_MS = 60_000
ANSWER_WITHIN_S = 20.0
"""Far below the fetch's one-minute wait: an answer by then was a wake-up."""


def _frame(conn: socket.socket) -> bytes:
    stream = conn.makefile("rb")
    (size,) = struct.unpack(">i", stream.read(4))
    return stream.read(size)


def _connect(address: str) -> socket.socket:
    host, _, port = address.rpartition(":")
    return socket.create_connection((host, int(port)), timeout=MAX_WAIT_MS / 1000)


@pytest.mark.parametrize("backend", ["sqlite", "postgres"])
def test_a_parked_fetch_is_woken_by_another_processs_commit(backend: str, tmp_path: Path) -> None:
    options = [
        "--data-dir", str(tmp_path / "data"), "--topic", f"{TOPIC}:1",
        "--server-option", f"fetch_wait_ms_max={MAX_WAIT_MS}", "--commit-interval-ms", "20",
    ]  # fmt: skip
    if backend == "postgres":
        options += ["--coordinator", database_dsn(tmp_path)]
    with broker_processes(2, tmp_path, options) as (writer, waiter):
        fetch = dataclasses.replace(
            fetch_request(TOPIC, 1),
            min_bytes=1,
            max_wait=datetime.timedelta(milliseconds=MAX_WAIT_MS),
        )
        with _connect(waiter.address) as waiting:
            waiting.sendall(encode_request(fetch, 1))
            ready, _, _ = select.select([waiting], [], [], 1.0)
            assert not ready, "the fetch was answered before anything was produced"

            produce = produce_v9.ProduceRequest(
                transactional_id=None,
                acks=-1,
                timeout=datetime.timedelta(seconds=30),
                topic_data=(
                    produce_v9.TopicProduceData(
                        name=TOPIC,
                        partition_data=(
                            produce_v9.PartitionProduceData(
                                index=0, records=build_batch([b"wake up"])
                            ),
                        ),
                    ),
                ),
            )
            with _connect(writer.address) as producing:
                producing.sendall(encode_request(produce, 1))
                produced = decode_response(_frame(producing), 0, 9, 1)
            (partition,) = produced.responses[0].partition_responses
            assert partition.error_code == WireError.none

            ready, _, _ = select.select([waiting], [], [], ANSWER_WITHIN_S)
            assert ready, f"the fetch was not woken within {ANSWER_WITHIN_S} s: {waiter.log_tail()}"
            answer = decode_response(_frame(waiting), 1, 12, 1)
    (fetched,) = answer.responses[0].partitions
    assert fetched.error_code == WireError.none
    assert fetched.high_watermark == 1
    assert b"wake up" in fetched.records
