"""Integration: a topic config altered through one broker process applies in another.

Two broker processes share a batch coordinator (SQLite over one data directory, or PostgreSQL).
IncrementalAlterConfigs through the first sets a topic's `retention.ms`; the second describes
the new value at once (DescribeConfigs reads the coordinator), and retention, whichever process
runs it, deletes the records the new value no longer keeps: the second's ListOffsets answers
the moved log start. The second process's produce checks apply a new `max.message.bytes` as
soon as its change feed tells it (PostgreSQL's NOTIFY names the topic; SQLite's check says that
something changed, and the grown config version says that configs did), well within its cached
copy's time to live.
"""

from __future__ import annotations

import time
from pathlib import Path

import kio.schema.describe_configs.v4.request as describe_v4
import kio.schema.incremental_alter_configs.v1.request as incremental_v1
import kio.schema.list_offsets.v7.request as list_offsets_v7
import pytest
from kio.schema.errors import ErrorCode as WireError
from kio.static.primitive import i8, i32, i64

from testkit.batches import build_batch
from testkit.postgres import database_dsn
from testkit.processes import broker_processes
from testkit.wire import ask, produce_to

TIMEOUT_S = 30
FEED_WITHIN_S = 10


def _produce(address: str, topic: str, count: int, size: int = 1) -> WireError:
    """`count` records of `size` bytes, stamped now."""
    records = build_batch([b"v" * size] * count, timestamp_ms=int(time.time() * 1000))
    return produce_to(address, topic, records, TIMEOUT_S)


def _set(address: str, topic: str, name: str, value: str) -> WireError:
    config = incremental_v1.AlterableConfig(name=name, config_operation=i8(0), value=value)
    resource = incremental_v1.AlterConfigsResource(
        resource_type=i8(2), resource_name=topic, configs=(config,)
    )
    body = incremental_v1.IncrementalAlterConfigsRequest(resources=(resource,), validate_only=False)
    (answer,) = ask(address, body, TIMEOUT_S).responses
    return WireError(answer.error_code)


def _retention(address: str, topic: str) -> tuple[str | None, int]:
    resource = describe_v4.DescribeConfigsResource(
        resource_type=i8(2), resource_name=topic, configuration_keys=("retention.ms",)
    )
    body = describe_v4.DescribeConfigsRequest(
        resources=(resource,), include_synonyms=False, include_documentation=False
    )
    (answer,) = ask(address, body, TIMEOUT_S).results
    (entry,) = answer.configs
    return entry.value, int(entry.config_source)


def _log_start(address: str, topic: str) -> int:
    body = list_offsets_v7.ListOffsetsRequest(
        replica_id=i32(-1),
        isolation_level=i8(0),
        topics=(
            list_offsets_v7.ListOffsetsTopic(
                name=topic,
                partitions=(
                    list_offsets_v7.ListOffsetsPartition(
                        partition_index=i32(0),
                        current_leader_epoch=i32(-1),
                        timestamp=i64(-2),  # the earliest offset
                    ),
                ),
            ),
        ),
    )
    ((partition,),) = [t.partitions for t in ask(address, body, TIMEOUT_S).topics]
    assert partition.error_code is WireError.none
    return int(partition.offset)


@pytest.mark.parametrize("backend", ["sqlite", "postgresql"])
def test_a_retention_altered_through_one_process_deletes_through_every_one(
    backend: str, tmp_path: Path
) -> None:
    options = [
        "--data-dir", str(tmp_path / "data"),
        "--topic", "kept:1",
        "--retention-check-interval-ms", "200",
    ]  # fmt: skip
    if backend == "postgresql":
        options += ["--coordinator", database_dsn(tmp_path, "cluster")]
    with broker_processes(2, tmp_path, options) as (one, other):
        assert _produce(other.address, "kept", 10, 100) is WireError.none
        assert _retention(other.address, "kept") == (str(7 * 24 * 3_600_000), 5)  # DEFAULT
        time.sleep(1.5)  # several retention runs: the default keeps the records
        assert _log_start(other.address, "kept") == 0
        assert _set(one.address, "kept", "retention.ms", "1000") is WireError.none
        assert _retention(other.address, "kept") == ("1000", 1)  # DYNAMIC_TOPIC_CONFIG
        deadline = time.monotonic() + TIMEOUT_S
        while _log_start(other.address, "kept") < 10:
            assert time.monotonic() < deadline, "retention never deleted the old records"
            time.sleep(0.2)
        assert _set(one.address, "kept", "max.message.bytes", "500") is WireError.none
        # The other's cached copy of the topic lives 30 s (`topic_metadata_ttl_ms`): only the
        # feed's notice (and, over SQLite, the grown config version) makes it read the new
        # limit well before.
        deadline = time.monotonic() + FEED_WITHIN_S
        while (code := _produce(other.address, "kept", 10, 100)) is WireError.none:
            assert time.monotonic() < deadline, "the new limit never applied"
            time.sleep(0.1)
        assert code is WireError.message_too_large
