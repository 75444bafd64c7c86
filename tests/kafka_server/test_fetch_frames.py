"""A Fetch response refers to its records instead of copying them into the frame, and its buffers
reach the socket in order, over plain TCP and over TLS: the bytes a client receives are the
frame kio encodes, byte for byte.
"""

from __future__ import annotations

import asyncio
import io
import random
import socket
import ssl
from pathlib import Path

import pytest
from kio.index import load_request_schema, load_response_schema
from kio.serial import entity_reader, entity_writer
from kio.static.protocol import ResponsePayload

from diskless import ErrorCode, FetchResult, TopicPartition
from diskless._types import IsolationLevel
from diskless.kafka_server._handlers._fetch import _encode_fetch
from diskless.kafka_server._protocol.codec import (
    FRAME_SIZE,
    PART_BYTES_MIN,
    Frame,
    encode_response,
    encode_response_parts,
)
from diskless.kafka_server._server.network._responses import (
    SEND_BYTES_MAX,
    Answer,
    InOrderResponses,
)
from testkit.batches import build_batch
from testkit.tls import Certs
from testkit.wire import fetch_request

SEED = random.randrange(1 << 32)
TOPIC = "frames"


def _records(rng: random.Random, size: int) -> bytes:
    values: list[bytes] = []
    while sum(map(len, values)) < size:
        values.append(rng.randbytes(rng.randrange(10, 2000)))
    return build_batch(values)


def _response(version: int, records: list[bytes]) -> ResponsePayload:
    """A Fetch response of `version` whose partition i returns `records[i]`."""
    request_schema = load_request_schema(1, 12)
    request = fetch_request(TOPIC, len(records))
    assert isinstance(request, request_schema)
    results = {
        TopicPartition(TOPIC, p): FetchResult(ErrorCode.NONE, 100, 100, 0, data)
        for p, data in enumerate(records)
    }
    return _encode_fetch(
        load_response_schema(1, version), request, IsolationLevel.READ_UNCOMMITTED, results, {}
    )


def _plainly_encoded(correlation_id: int, payload: ResponsePayload) -> bytes:
    """The frame as kio writes it into one buffer."""
    body = io.BytesIO()
    entity_writer(type(payload).__header_schema__)(
        body,
        type(payload).__header_schema__(correlation_id=correlation_id),  # type: ignore[call-arg]
    )
    entity_writer(type(payload))(body, payload)
    return FRAME_SIZE.pack(len(body.getvalue())) + body.getvalue()


@pytest.mark.parametrize("version", [4, 12])
def test_large_records_are_referred_to_and_the_frame_is_kio_s_byte_for_byte(version: int) -> None:
    rng = random.Random(SEED + version)
    records = [_records(rng, PART_BYTES_MIN * 3), b"", _records(rng, 100), _records(rng, 70_000)]
    payload = _response(version, records)

    frame = encode_response_parts(41, payload)

    assert isinstance(frame, tuple)
    referred = [part.obj for part in frame if isinstance(part, memoryview)]
    assert [i for i, r in enumerate(records) if any(o is r for o in referred)] == [0, 3]
    joined = b"".join(frame)
    assert joined == _plainly_encoded(41, payload) == encode_response(41, payload)
    body, _ = entity_reader(type(payload))(memoryview(joined), 4 + len(_header(payload, 41)))
    assert [bytes(p.records or b"") for p in body.responses[0].partitions] == records


def _header(payload: ResponsePayload, correlation_id: int) -> bytes:
    header = io.BytesIO()
    schema = type(payload).__header_schema__
    entity_writer(schema)(header, schema(correlation_id=correlation_id))  # type: ignore[call-arg]
    return header.getvalue()


def test_a_response_without_large_values_is_one_buffer() -> None:
    payload = _response(12, [_records(random.Random(SEED), 1000), b""])
    frame = encode_response_parts(5, payload)
    assert isinstance(frame, bytes)
    assert frame == _plainly_encoded(5, payload)


def _frames(rng: random.Random) -> list[Frame]:
    frames: list[Frame] = []
    for i in range(12):
        records = [_records(rng, rng.choice([50, PART_BYTES_MIN, 300_000])) for _ in range(3)]
        frames.append(encode_response_parts(i, _response(12, records)))
    return frames


async def _write_in_order(
    writer: asyncio.StreamWriter, frames: list[Frame], rng: random.Random
) -> None:
    responses = InOrderResponses(writer, "peer", 1)
    loop = asyncio.get_running_loop()
    answers: list[Answer] = [loop.create_future() for _ in frames]
    for answer in answers:
        responses.add(answer)
    finishing = list(zip(answers, frames, strict=True))
    rng.shuffle(finishing)
    for answer, frame in finishing:
        answer.set_result(frame)
        await asyncio.sleep(0)
    await asyncio.wait_for(responses.drained(), 30)
    await writer.drain()
    writer.close()


def _expected(frames: list[Frame]) -> bytes:
    return b"".join(f if isinstance(f, bytes) else b"".join(f) for f in frames)


async def test_buffers_of_responses_reach_a_plain_socket_in_request_order() -> None:
    print(f"seed {SEED}")
    rng = random.Random(SEED)
    frames = _frames(rng)
    left, right = socket.socketpair()
    reader, client = await asyncio.open_connection(sock=left)
    _, writer = await asyncio.open_connection(sock=right)
    received, _ = await asyncio.gather(reader.read(), _write_in_order(writer, frames, rng))
    assert received == _expected(frames)
    client.close()


async def test_buffers_of_responses_reach_a_tls_client_in_request_order(certs: Certs) -> None:
    print(f"seed {SEED}")
    rng = random.Random(SEED)
    frames = _frames(rng)
    server_context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    server_context.load_cert_chain(Path(certs.server_cert), Path(certs.server_key))
    client_context = ssl.create_default_context(cafile=str(certs.ca))
    written = asyncio.get_running_loop().create_future()

    async def serve(_: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            await _write_in_order(writer, frames, rng)
            written.set_result(None)
        except BaseException as e:
            written.set_exception(e)

    server = await asyncio.start_server(serve, "127.0.0.1", 0, ssl=server_context)
    port = server.sockets[0].getsockname()[1]
    try:
        reader, client = await asyncio.open_connection(
            "127.0.0.1", port, ssl=client_context, server_hostname="localhost"
        )
        received = await asyncio.wait_for(reader.read(), 60)
        await asyncio.wait_for(written, 10)
        assert received == _expected(frames)
        client.close()
    finally:
        server.close()
        await server.wait_closed()


async def test_a_large_response_reaches_the_transport_a_piece_at_a_time() -> None:
    """The transport is handed a piece of a response only once it holds nothing: it never keeps
    (copies) more than one piece, however large the response and however slow the reader."""
    rng = random.Random(SEED)
    left, right = socket.socketpair()
    right.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 64 * 1024)
    left.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 64 * 1024)
    reader, client = await asyncio.open_connection(sock=left)
    _, writer = await asyncio.open_connection(sock=right)
    responses = InOrderResponses(writer, "peer", 1)
    frames = [
        encode_response_parts(1, _response(12, [_records(rng, 3_000_000), b""])),
        encode_response_parts(2, _response(12, [_records(rng, 100)])),  # one buffer, behind it
    ]
    for frame in frames:
        answer: Answer = asyncio.get_running_loop().create_future()
        responses.add(answer)
        answer.set_result(frame)
    expected = _expected(frames)
    received = bytearray()
    held = 0
    while len(received) < len(expected):
        held = max(held, writer.transport.get_write_buffer_size())
        received += await asyncio.wait_for(reader.read(32 * 1024), 10)
    await asyncio.wait_for(responses.drained(), 10)
    assert received == expected
    assert 0 < held <= SEND_BYTES_MAX
    writer.close()
    client.close()
