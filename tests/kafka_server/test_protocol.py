"""Wire-level behaviour: version negotiation, malformed frames, unknown API keys, fuzzing.

Integration tests against a running 3-broker cluster, through a raw socket client.
"""

from __future__ import annotations

import asyncio
import logging
import os
import random
import struct
import sys
from typing import Any

import hypothesis
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from kio.index import load_request_schema, load_response_schema
from kio.schema.api_versions.v0.response import ApiVersionsResponse as ApiVersionsResponseV0
from kio.schema.api_versions.v3.request import ApiVersionsRequest as ApiVersionsRequestV3
from kio.schema.api_versions.v4.request import ApiVersionsRequest as ApiVersionsRequestV4
from kio.schema.errors import ErrorCode as WireError
from kio.schema.metadata.v12.request import MetadataRequest, MetadataRequestTopic
from kio.serial import entity_reader

from diskless.kafka_server import SUPPORTED_VERSIONS, ApiKey, KafkaCluster
from diskless.kafka_server._protocol.codec import FrameError, decode_request, request_schema
from testkit.processes import run_in_bounded_memory
from testkit.wire import WireClient, decode_response, encode_request, fetch_request
from tests.kafka_server._strategies import TOPICS, requests

FUZZ_SEED = int(os.environ.get("KAFKA_FUZZ_SEED", random.randrange(2**32)))
FUZZ_IN_CHILD = os.environ.get("KAFKA_FUZZ_CHILD") == "1"
FUZZ_ADDRESS_SPACE = 3 * 1024**3
"""Room for the broker and its cluster; a declared array count kio reserved for blindly needed
16 GiB and more (`_declared_sizes`)."""


async def _api_versions_ok(cluster: KafkaCluster, broker_id: int = 0) -> None:
    client = await WireClient.connect(cluster.servers[broker_id])
    try:
        response = await client.request(
            ApiVersionsRequestV3(client_software_name="wire", client_software_version="1")
        )
        assert response.error_code == WireError.none
    finally:
        await client.close()


def test_every_advertised_version_is_modelled_by_kio() -> None:
    for key, (low, high) in SUPPORTED_VERSIONS.items():
        assert low <= high
        for version in range(low, high + 1):
            assert load_request_schema(int(key), version).__version__ == version
            assert load_response_schema(int(key), version).__version__ == version


@pytest.mark.parametrize("version", [0, 1, 2, 3])
async def test_api_versions_lists_the_supported_ranges(cluster: KafkaCluster, version: int) -> None:
    schema = load_request_schema(int(ApiKey.API_VERSIONS), version)
    body = (
        schema(client_software_name="wire", client_software_version="1")
        if version >= 3
        else schema()
    )
    client = await WireClient.connect(cluster.servers[1])
    try:
        response = await client.request(body)
    finally:
        await client.close()
    assert response.error_code == WireError.none
    advertised = {k.api_key: (k.min_version, k.max_version) for k in response.api_keys}
    assert advertised == {int(k): v for k, v in SUPPORTED_VERSIONS.items()}


async def test_api_versions_of_an_unsupported_version_answers_v0_with_the_ranges(
    cluster: KafkaCluster,
) -> None:
    client = await WireClient.connect(cluster.servers[0])
    try:
        await client.send_raw(
            encode_request(
                ApiVersionsRequestV4(client_software_name="wire", client_software_version="1"), 7
            )
        )
        frame = await client.read_frame()
        assert frame is not None
        (correlation_id,) = struct.unpack_from(">i", frame)
        assert correlation_id == 7
        body, size = entity_reader(ApiVersionsResponseV0)(frame, 4)
        assert 4 + size == len(frame)
        assert body.error_code == WireError.unsupported_version
        assert {k.api_key for k in body.api_keys} == {int(k) for k in SUPPORTED_VERSIONS}
        # The connection stays usable: the client retries with a version it found.
        await client.send_raw(
            encode_request(
                ApiVersionsRequestV3(client_software_name="wire", client_software_version="1"), 8
            )
        )
        assert await client.read_frame() is not None
    finally:
        await client.close()


async def test_unknown_api_key_closes_only_that_connection(
    cluster: KafkaCluster, caplog: pytest.LogCaptureFixture
) -> None:
    bystander = await WireClient.connect(cluster.servers[0])
    offender = await WireClient.connect(cluster.servers[0])
    try:
        # UpdateFeatures (57): a real API this server does not implement; header v2 layout.
        frame = struct.pack(">hhih", 57, 0, 1, 4) + b"test" + b"\x00" + b"\x00\x00"
        with caplog.at_level(logging.WARNING, logger="diskless.kafka_server"):
            await offender.send_raw(struct.pack(">i", len(frame)) + frame)
            assert await offender.read_frame() is None
        assert "api key 57 v0 is not supported" in caplog.text
        response = await bystander.request(
            ApiVersionsRequestV3(client_software_name="wire", client_software_version="1")
        )
        assert response.error_code == WireError.none
    finally:
        await bystander.close()
        await offender.close()
    await _api_versions_ok(cluster)


async def test_unadvertised_version_of_a_known_api_closes_the_connection(
    cluster: KafkaCluster,
) -> None:
    client = await WireClient.connect(cluster.servers[2])
    try:
        # Produce v2 (magic 0/1 message sets): header v1, null client id, acks, timeout, no topics.
        frame = struct.pack(">hhih", 0, 2, 1, -1) + struct.pack(">hii", -1, 1000, 0)
        await client.send_raw(struct.pack(">i", len(frame)) + frame)
        assert await client.read_frame() is None
    finally:
        await client.close()
    await _api_versions_ok(cluster, 2)


@pytest.mark.parametrize(
    ("frame", "reason"),
    [
        (struct.pack(">i", -5), "frame size -5"),
        (struct.pack(">i", 2**31 - 1), "frame size 2147483647"),
        (struct.pack(">i", 3) + b"\x00\x12\x00", "shorter than a request header"),
        (struct.pack(">i", 10) + b"\x00\x03", "ended after 2 of 10 bytes"),
    ],
    ids=["negative-size", "oversized", "short-header", "truncated"],
)
async def test_malformed_frames_close_the_connection_with_a_logged_reason(
    cluster: KafkaCluster, caplog: pytest.LogCaptureFixture, frame: bytes, reason: str
) -> None:
    client = await WireClient.connect(cluster.servers[0])
    try:
        with caplog.at_level(logging.WARNING, logger="diskless.kafka_server"):
            await client.send_raw(frame)
            if reason.startswith("ended after"):
                client.writer.write_eof()
            assert await client.read_frame() is None
        assert reason in caplog.text
    finally:
        await client.close()
    await _api_versions_ok(cluster)


async def test_a_body_that_does_not_decode_closes_the_connection(
    cluster: KafkaCluster, caplog: pytest.LogCaptureFixture
) -> None:
    good = encode_request(
        MetadataRequest(
            topics=(MetadataRequestTopic(topic_id=None, name="some-topic"),),
            allow_auto_topic_creation=False,
            include_topic_authorized_operations=False,
        ),
        1,
    )
    cut = good[4:-6]
    trailing = good[4:] + b"\x00\x00"
    for payload, reason in ((cut, "does not decode"), (trailing, "bytes after the body")):
        client = await WireClient.connect(cluster.servers[1])
        try:
            with caplog.at_level(logging.WARNING, logger="diskless.kafka_server"):
                await client.send_raw(struct.pack(">i", len(payload)) + payload)
                assert await client.read_frame() is None
            assert reason in caplog.text
        finally:
            await client.close()
    await _api_versions_ok(cluster, 1)


def _fuzz_frames() -> st.SearchStrategy[bytes]:
    """Frames whose header names an advertised API (any version near its range), then noise."""
    keys = sorted(int(k) for k in SUPPORTED_VERSIONS)

    @st.composite
    def framed(draw: st.DrawFn) -> bytes:
        key = draw(st.sampled_from(keys))
        low, high = SUPPORTED_VERSIONS[ApiKey(key)]
        version = draw(st.integers(low - 1, high + 1))
        flexible_header = draw(st.booleans())
        client_id = draw(st.one_of(st.none(), st.text(max_size=8)))
        raw_id = (
            b"\xff\xff"
            if client_id is None
            else (struct.pack(">h", len(client_id.encode())) + client_id.encode())
        )
        body = draw(st.binary(max_size=300))
        payload = struct.pack(">hhi", key, version, 99) + raw_id
        payload += (b"\x00" if flexible_header else b"") + body
        return struct.pack(">i", len(payload)) + payload

    return st.one_of(framed(), st.binary(min_size=4, max_size=200))


def test_fuzzed_requests_never_break_the_broker_within_bounded_memory() -> None:
    """The fuzz below runs in a child with a limited address space: a frame that makes the
    broker reserve gigabytes then fails this test instead of waking the OOM killer."""
    print(f"fuzz seed: {FUZZ_SEED} (set KAFKA_FUZZ_SEED to replay)")
    child = run_in_bounded_memory(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-s", "-n", "0",
         f"{__file__}::test_fuzzed_requests_never_break_the_broker"],
        FUZZ_ADDRESS_SPACE,
        timeout_s=240,
        env=dict(os.environ, KAFKA_FUZZ_SEED=str(FUZZ_SEED), KAFKA_FUZZ_CHILD="1"),
    )  # fmt: skip
    assert child.returncode == 0, child.stdout[-6000:] + child.stderr[-3000:]
    assert "1 passed" in child.stdout, child.stdout[-3000:]


@pytest.mark.skipif(not FUZZ_IN_CHILD, reason="run in a child process by the test above")
@hypothesis.seed(FUZZ_SEED)
@settings(
    max_examples=150,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(frames=st.lists(_fuzz_frames(), min_size=1, max_size=3))
# FindCoordinator v4 whose coordinator keys are a null array
@hypothesis.example(frames=[b"\x00\x00\x00\x0e\x00\n\x00\x04\x00\x00\x00c\xff\xff\x00\x00\x00\x00"])
async def test_fuzzed_requests_never_break_the_broker(
    cluster: KafkaCluster, caplog: pytest.LogCaptureFixture, frames: list[bytes]
) -> None:
    print(f"fuzz seed: {FUZZ_SEED} (set KAFKA_FUZZ_SEED to replay)")
    caplog.clear()  # one fixture for all examples: each example judges only its own logs
    client = await WireClient.connect(cluster.servers[0])
    try:
        with caplog.at_level(logging.ERROR, logger="diskless.kafka_server"):
            await client.send_raw(b"".join(frames))
            client.writer.write_eof()
            # Whatever is answered is a whole response frame with a correlation id.
            while (frame := await client.read_frame(timeout_s=2.0)) is not None:
                assert len(frame) >= 4
    except TimeoutError:
        pass  # e.g. acks=0 produce: no answer, and the connection stays open
    finally:
        await client.close()
    errors = [r for r in caplog.records if r.levelno >= logging.ERROR]
    assert not errors, [r.getMessage() for r in errors]
    await asyncio.wait_for(_api_versions_ok(cluster), 10)


@hypothesis.seed(FUZZ_SEED)
@settings(
    max_examples=300,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(body=requests())
async def test_well_formed_requests_of_every_api_are_answered_without_handler_errors(
    cluster: KafkaCluster, caplog: pytest.LogCaptureFixture, body: Any
) -> None:
    print(f"fuzz seed: {FUZZ_SEED} (set KAFKA_FUZZ_SEED to replay)")
    caplog.clear()  # one fixture for all examples: each example judges only its own logs
    await cluster.create_topic(TOPICS[0], 2)
    key, version = type(body).__api_key__, type(body).__version__
    client = await WireClient.connect(cluster.servers[1])
    try:
        with caplog.at_level(logging.ERROR, logger="diskless.kafka_server"):
            await client.send_raw(encode_request(body, 5))
            frame = await client.read_frame(timeout_s=0.5)
    except TimeoutError:
        frame = None  # acks=0 produce, or a group member waiting for others: no answer yet
    finally:
        await client.close()
    errors = [r for r in caplog.records if r.levelno >= logging.ERROR]
    assert not errors, [r.getMessage() for r in errors]
    if frame is not None:
        decode_response(frame, key, version, 5)  # a well-formed answer to that request


async def test_a_fetch_with_an_unknown_isolation_level_is_answered_invalid_request(
    cluster: KafkaCluster,
) -> None:
    await cluster.create_topic("iso", 1)
    client = await WireClient.connect(cluster.servers[0])
    try:
        response = await client.request(fetch_request("iso", 1, isolation_level=5))
        (partition,) = response.responses[0].partitions
        assert partition.error_code == WireError.invalid_request
        committed = await client.request(fetch_request("iso", 1, isolation_level=1))
        assert committed.responses[0].partitions[0].error_code == WireError.none
    finally:
        await client.close()


@pytest.mark.parametrize(
    ("frame", "field"),
    [
        # FindCoordinator v4 whose coordinator keys are a null array (not nullable)
        (b"\x00\n\x00\x04\x00\x00\x00c\xff\xff\x00\x00\x00\x00", "coordinator_keys"),
        # Fetch v4 with one topic whose partitions are a null array (not nullable), nested
        (
            b"\x00\x01\x00\x04\x00\x00\x00\x07\xff\xff\xff\xff\xff\xff\x00\x00\x01\xf4"
            b"\x00\x00\x00\x01\x00\x10\x00\x00\x00\x00\x00\x00\x01\x00\x01t\xff\xff\xff\xff",
            "topics.partitions",
        ),
    ],
)
def test_a_null_where_the_schema_allows_none_is_refused_naming_the_field(
    frame: bytes, field: str
) -> None:
    key, version = struct.unpack_from(">hh", frame)
    schema = request_schema(key, version)
    assert schema is not None
    with pytest.raises(FrameError, match=rf": {field} is null"):
        decode_request(memoryview(frame), schema)
