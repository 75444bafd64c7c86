"""An idle fetch's request is decoded once, and its empty response built and encoded once: the
same values and bytes as ever."""

from __future__ import annotations

import io

import pytest
from kio.index import load_response_schema
from kio.serial import entity_writer

from diskless import ErrorCode, FetchResult, TopicPartition
from diskless._types import IsolationLevel
from diskless.kafka_server._handlers._fetch import _encode_fetch
from diskless.kafka_server._protocol.codec import (
    FrameError,
    decode_request,
    encode_response,
    request_schema,
)
from diskless.kafka_server._protocol.recurring import RecurringResponses
from testkit.wire import encode_request, fetch_request

RESPONSE = load_response_schema(1, 12)
REQUEST = fetch_request("idle", 2)
TPS = [TopicPartition("idle", 0), TopicPartition("idle", 1)]


def _empty(high_watermark: int) -> dict[TopicPartition, FetchResult]:
    return {tp: FetchResult(ErrorCode.NONE, high_watermark, high_watermark, 0, b"") for tp in TPS}


def test_equal_empty_answers_share_one_payload_and_its_bytes() -> None:
    first = _encode_fetch(RESPONSE, REQUEST, IsolationLevel.READ_UNCOMMITTED, _empty(5), {})
    again = _encode_fetch(RESPONSE, REQUEST, IsolationLevel.READ_UNCOMMITTED, _empty(5), {})
    moved = _encode_fetch(RESPONSE, REQUEST, IsolationLevel.READ_UNCOMMITTED, _empty(6), {})
    committed = _encode_fetch(RESPONSE, REQUEST, IsolationLevel.READ_COMMITTED, _empty(5), {})
    elsewhere = _encode_fetch(
        RESPONSE, REQUEST, IsolationLevel.READ_UNCOMMITTED, _empty(5), {TPS[1]: 4}
    )
    assert first is again
    assert moved is not first and committed is not first and elsewhere is not first
    assert [p.preferred_read_replica for p in elsewhere.responses[0].partitions] == [-1, 4]
    assert moved.responses[0].partitions[0].high_watermark == 6
    assert committed.responses[0].partitions[0].aborted_transactions == ()
    assert first.responses[0].partitions[0].aborted_transactions is None
    for payload in (first, moved, committed):
        body = io.BytesIO()
        entity_writer(type(payload))(body, payload)
        for correlation_id in (7, 8):  # encoded once, then reused: always the plain bytes
            frame = encode_response(correlation_id, payload)
            assert frame[8:].endswith(body.getvalue())
            assert int.from_bytes(frame[4:8], "big") == correlation_id
            assert int.from_bytes(frame[:4], "big") == len(frame) - 4


def test_a_response_with_records_is_never_shared() -> None:
    results = _empty(5)
    results[TPS[1]] = FetchResult(ErrorCode.NONE, 5, 5, 0, b"\x00" * 61)
    one = _encode_fetch(RESPONSE, REQUEST, IsolationLevel.READ_UNCOMMITTED, results, {})
    two = _encode_fetch(RESPONSE, REQUEST, IsolationLevel.READ_UNCOMMITTED, results, {})
    assert one is not two and one == two


def test_the_cache_keeps_the_most_recently_used_and_forgets_the_bodies_of_others() -> None:
    cache = RecurringResponses(entries_max=2)
    a = cache.payload("a", lambda: load_response_schema(18, 0)(error_code=0, api_keys=()))
    cache.remember(a, b"A")
    b = cache.payload("b", lambda: load_response_schema(18, 0)(error_code=35, api_keys=()))
    assert cache.payload("a", lambda: None) is a  # type: ignore[arg-type,return-value]
    cache.payload("c", lambda: load_response_schema(18, 0)(error_code=1, api_keys=()))
    assert len(cache) == 2 and cache.holds(a) and not cache.holds(b)
    assert cache.body_of(a) == b"A" and cache.body_of(b) is None
    unshared = load_response_schema(18, 0)(error_code=0, api_keys=())
    cache.remember(unshared, b"X")
    assert not cache.holds(unshared) and cache.body_of(unshared) is None


def test_a_fetch_frame_that_recurs_is_decoded_once_with_each_correlation_id() -> None:
    first, again = encode_request(REQUEST, 7)[4:], encode_request(REQUEST, 8)[4:]
    schema = request_schema(1, 12)
    assert schema is not None
    one = decode_request(memoryview(first), schema)
    two = decode_request(memoryview(again), schema)
    assert one.body is two.body and one.body == REQUEST
    assert (one.prefix.correlation_id, two.prefix.correlation_id) == (7, 8)
    broken = memoryview(first[:-3])
    for _ in range(2):  # a frame that does not decode is refused every time
        with pytest.raises(FrameError):
            decode_request(broken, schema)
