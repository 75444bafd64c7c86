"""A raw Kafka wire client for protocol tests: kio-encoded requests, and bytes of any shape."""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import datetime
import io
import socket
import struct
from typing import Any

from kio.index import load_response_schema
from kio.schema.errors import ErrorCode as WireError
from kio.schema.fetch.v12 import request as fetch_v12
from kio.schema.produce.v9 import request as produce_v9
from kio.schema.request_header.v1.header import RequestHeader as RequestHeaderV1
from kio.schema.request_header.v2.header import RequestHeader as RequestHeaderV2
from kio.schema.response_header.v1.header import ResponseHeader as ResponseHeaderV1
from kio.serial import entity_reader, entity_writer
from kio.serial.errors import OutOfBoundValue
from kio.static.primitive import i16, i32

from diskless.kafka_server import BrokerServer
from diskless.kafka_server._protocol.fields import build

_SIZE = struct.Struct(">i")


def encode_request(body: Any, correlation_id: int, client_id: str | None = "wire-test") -> bytes:
    """A framed request: size, the header version of the body's schema, the body."""
    buffer = io.BytesIO()
    header_schema = type(body).__header_schema__
    header = header_schema(
        request_api_key=i16(type(body).__api_key__),
        request_api_version=i16(type(body).__version__),
        correlation_id=i32(correlation_id),
        client_id=client_id,
    )
    assert header_schema in (RequestHeaderV1, RequestHeaderV2)
    entity_writer(header_schema)(buffer, header)
    entity_writer(type(body))(buffer, body)
    payload = buffer.getvalue()
    return _SIZE.pack(len(payload)) + payload


class WireClient:
    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader = reader
        self.writer = writer
        self._correlation = 0

    @classmethod
    async def connect(cls, server: BrokerServer) -> WireClient:
        address = server.address
        reader, writer = await asyncio.open_connection(address.host, address.port)
        return cls(reader, writer)

    async def close(self) -> None:
        self.writer.close()
        with contextlib.suppress(ConnectionError):
            await self.writer.wait_closed()

    async def send_raw(self, data: bytes) -> None:
        self.writer.write(data)
        await self.writer.drain()

    async def read_frame(self, timeout_s: float = 10.0) -> bytes | None:
        """The next response frame, or None when the server closed the connection."""
        try:
            size_bytes = await asyncio.wait_for(self.reader.readexactly(4), timeout_s)
            (size,) = _SIZE.unpack(size_bytes)
            return await asyncio.wait_for(self.reader.readexactly(size), timeout_s)
        except (asyncio.IncompleteReadError, ConnectionError):
            return None

    async def request(self, body: Any) -> Any:
        """Send `body`, read the answer; returns the decoded response entity."""
        self._correlation += 1
        correlation_id = self._correlation
        await self.send_raw(encode_request(body, correlation_id))
        frame = await self.read_frame()
        assert frame is not None, "the server closed the connection"
        return decode_response(
            frame, type(body).__api_key__, type(body).__version__, correlation_id
        )


_UNKNOWN_TIME = struct.pack(">q", -1)


def decode_response(frame: bytes, api_key: int, version: int, correlation_id: int) -> Any:
    """The response body, decoded by kio. Kafka writes -1 for a time it does not know (e.g.
    DescribeTransactions' start time of an Empty transaction), which kio's datetime reader
    refuses: such a frame is decoded again with those int64 -1s read as 0, so its structure is
    still checked whole."""
    schema = load_response_schema(api_key, version)
    (got,) = struct.unpack_from(">i", frame)
    assert got == correlation_id, (got, correlation_id)
    offset = 4
    if schema.__header_schema__ is ResponseHeaderV1:
        _, offset = entity_reader(ResponseHeaderV1)(frame, 0)
    try:
        body, size = entity_reader(schema)(frame, offset)
    except OutOfBoundValue as refused:
        if "negative timestamp" not in str(refused):
            raise
        known_times = frame[:offset] + frame[offset:].replace(_UNKNOWN_TIME, bytes(8))
        body, size = entity_reader(schema)(known_times, offset)
    assert offset + size == len(frame), "trailing bytes after the response body"
    return body


def ask(address: str, body: Any, timeout_s: float = 10.0) -> Any:
    """One request to the broker at `host:port` over a connection of its own; the decoded answer
    (for tests that probe broker processes)."""
    host, _, port = address.rpartition(":")
    with socket.create_connection((host, int(port)), timeout=timeout_s) as connection:
        connection.sendall(encode_request(body, 1))
        stream = connection.makefile("rb")
        (size,) = _SIZE.unpack(stream.read(4))
        frame = stream.read(size)
    return decode_response(frame, type(body).__api_key__, type(body).__version__, 1)


def produce_to(address: str, topic: str, records: bytes, timeout_s: float = 30.0) -> WireError:
    """One Produce v9 (acks=-1) of `records` to partition 0 of `topic`, straight to the broker
    at `address` (no metadata, no retries): the partition's error code."""
    body = produce_v9.ProduceRequest(
        transactional_id=None,
        acks=i16(-1),
        timeout=datetime.timedelta(seconds=10),
        topic_data=(
            produce_v9.TopicProduceData(
                name=topic,
                partition_data=(produce_v9.PartitionProduceData(index=i32(0), records=records),),
            ),
        ),
    )
    ((partition,),) = [t.partition_responses for t in ask(address, body, timeout_s).responses]
    return WireError(partition.error_code)


def fetch_request(topic: str, partitions: int, *, isolation_level: int = 0, rack: str = "") -> Any:
    """A Fetch v12 from offset 0 of partitions 0..partitions-1, without a fetch session."""
    entry = build(
        fetch_v12.FetchPartition,
        partition=0,
        current_leader_epoch=-1,
        fetch_offset=0,
        last_fetched_epoch=-1,
        log_start_offset=-1,
        partition_max_bytes=1 << 20,
    )
    return build(
        fetch_v12.FetchRequest,
        replica_id=-1,
        max_wait=datetime.timedelta(0),
        min_bytes=0,
        max_bytes=1 << 20,
        isolation_level=isolation_level,
        session_id=0,
        session_epoch=-1,
        topics=(
            fetch_v12.FetchTopic(
                topic=topic,
                partitions=tuple(
                    dataclasses.replace(entry, partition=p) for p in range(partitions)
                ),
            ),
        ),
        forgotten_topics_data=(),
        rack_id=rack,
    )
