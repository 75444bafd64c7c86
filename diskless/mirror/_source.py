"""The source cluster, as the mirror reads it: a small Kafka wire client over kio's schemas.

Any Kafka-protocol cluster will do (a Kafka cluster, another diskless one). The mirror needs raw
record batches, byte for byte, which the client libraries decode away; and it needs only five
requests (Metadata, Fetch, ListOffsets, ListGroups, FindCoordinator, OffsetFetch), each at one
version that
every Kafka from 2.8 to 4 answers. One request in flight per connection, a connection per broker
and lane (each fetcher's, and one for everything else): the memory a fetch holds is its
response's `max_bytes`.
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime
import io
import struct
from collections.abc import Mapping, Sequence
from typing import Any, Final, NamedTuple

from kio.index import load_response_schema
from kio.schema.fetch.v12 import request as fetch_request
from kio.schema.find_coordinator.v4 import request as find_request
from kio.schema.list_groups.v4 import request as groups_request
from kio.schema.list_offsets.v7 import request as list_offsets_request
from kio.schema.metadata.v9 import request as metadata_request
from kio.schema.offset_fetch.v7 import request as offsets_request
from kio.schema.request_header.v2.header import RequestHeader
from kio.schema.response_header.v1.header import ResponseHeader
from kio.serial import entity_reader, entity_writer
from kio.static.primitive import i8, i16, i32, i64

from diskless._types import ErrorCode, TopicPartition
from diskless.errors import DisklessError

RESPONSE_BYTES_MAX: Final = 256 * 1024 * 1024
"""A response frame claiming more is refused (the mirror asks for far less)."""
_SIZE: Final = struct.Struct(">i")
_GROUP_KEY: Final = 0


class SourceError(DisklessError):
    """The source cluster could not be reached or answered outside the protocol."""


class FetchedPartition(NamedTuple):
    error: ErrorCode
    high_watermark: int
    log_start_offset: int
    records: bytes


class SourceMetadata(NamedTuple):
    brokers: dict[int, tuple[str, int]]
    leaders: dict[TopicPartition, int]
    """Each partition of the topics asked for, and the broker id leading it."""
    missing: dict[str, ErrorCode]
    """Topics the source answered with an error."""
    leader_epoch: int
    """The highest leader epoch of those partitions (-1: the source gave none)."""


class _Connection:
    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self._reader = reader
        self._writer = writer
        self._lock = asyncio.Lock()
        self._correlation = 0

    async def request(self, body: Any, client_id: str, timeout_s: float) -> Any:
        async with self._lock:
            self._correlation += 1
            correlation = self._correlation
            buffer = io.BytesIO()
            header = RequestHeader(
                request_api_key=i16(type(body).__api_key__),
                request_api_version=i16(type(body).__version__),
                correlation_id=i32(correlation),
                client_id=client_id,
            )
            entity_writer(RequestHeader)(buffer, header)
            entity_writer(type(body))(buffer, body)
            payload = buffer.getvalue()
            self._writer.write(_SIZE.pack(len(payload)) + payload)
            await self._writer.drain()
            (size,) = _SIZE.unpack(await asyncio.wait_for(self._reader.readexactly(4), timeout_s))
            if not 0 < size <= RESPONSE_BYTES_MAX:
                raise SourceError(f"a response frame of {size} bytes")
            frame = await asyncio.wait_for(self._reader.readexactly(size), timeout_s)
        schema = load_response_schema(type(body).__api_key__, type(body).__version__)
        (got,) = _SIZE.unpack_from(frame)
        if got != correlation:
            raise SourceError(f"response {got} to request {correlation}")
        _, offset = entity_reader(ResponseHeader)(frame, 0)
        response, _ = entity_reader(schema)(frame, offset)
        return response

    async def close(self) -> None:
        self._writer.close()
        with contextlib.suppress(ConnectionError):
            await self._writer.wait_closed()


class SourceCluster:
    """The source cluster reached through `bootstrap` (`host:port[,host:port...]`)."""

    def __init__(
        self, bootstrap: str, client_id: str = "diskless-mirror", timeout_s: float = 30.0
    ) -> None:
        self._bootstrap = [_address(part) for part in bootstrap.split(",") if part.strip()]
        if not self._bootstrap:
            raise ValueError("a source needs at least one bootstrap address")
        self._client_id = client_id
        self._timeout_s = timeout_s
        self._brokers: dict[int, tuple[str, int]] = {}
        self._connections: dict[tuple[tuple[str, int], str], _Connection] = {}
        """By (address, lane): each fetcher has its lane, so a fetch waiting at the source
        (its max wait) delays neither another fetcher's nor the group sync's requests."""

    async def _connection(self, address: tuple[str, int], lane: str) -> _Connection:
        connection = self._connections.get((address, lane))
        if connection is None:
            try:
                reader, writer = await asyncio.wait_for(
                    asyncio.open_connection(*address, limit=1 << 20), self._timeout_s
                )
            except (OSError, TimeoutError) as error:
                raise SourceError(f"cannot reach {address[0]}:{address[1]}: {error}") from None
            connection = self._connections[address, lane] = _Connection(reader, writer)
        return connection

    async def _ask(self, address: tuple[str, int], body: Any, lane: str = "control") -> Any:
        connection = await self._connection(address, lane)
        try:
            return await connection.request(body, self._client_id, self._timeout_s)
        except (OSError, TimeoutError, asyncio.IncompleteReadError, ValueError) as error:
            self._connections.pop((address, lane), None)
            await connection.close()
            raise SourceError(
                f"{address[0]}:{address[1]}: {type(error).__name__} {error}"
            ) from None

    async def _ask_any(self, body: Any) -> Any:
        failures = []
        for address in [*self._brokers.values(), *self._bootstrap]:
            try:
                return await self._ask(address, body)
            except SourceError as error:
                failures.append(str(error))
        raise SourceError("; ".join(failures))

    async def metadata(self, topics: Sequence[str]) -> SourceMetadata:
        body = metadata_request.MetadataRequest(
            topics=tuple(metadata_request.MetadataRequestTopic(name=t) for t in topics),  # type: ignore[arg-type]
            allow_auto_topic_creation=False,
            include_cluster_authorized_operations=False,
            include_topic_authorized_operations=False,
        )
        response = await self._ask_any(body)
        brokers = {int(b.node_id): (b.host, int(b.port)) for b in response.brokers}
        self._brokers = brokers
        leaders: dict[TopicPartition, int] = {}
        missing: dict[str, ErrorCode] = {}
        leader_epoch = -1
        for topic in response.topics:
            if int(topic.error_code) != 0:
                missing[topic.name] = ErrorCode(int(topic.error_code))
                continue
            for p in topic.partitions:
                leaders[TopicPartition(topic.name, int(p.partition_index))] = int(p.leader_id)
                leader_epoch = max(leader_epoch, int(p.leader_epoch))
        return SourceMetadata(brokers, leaders, missing, leader_epoch)

    async def fetch(
        self,
        broker_id: int,
        offsets: Mapping[TopicPartition, int],
        max_bytes: int,
        partition_max_bytes: int,
        max_wait_ms: int,
        lane: str = "fetch",
    ) -> dict[TopicPartition, FetchedPartition]:
        """One sessionless Fetch (read_uncommitted, as a replica reads: markers and aborted
        batches alike) of `offsets` from the broker `broker_id`."""
        by_topic: dict[str, list[fetch_request.FetchPartition]] = {}
        for tp, offset in offsets.items():
            by_topic.setdefault(tp.topic, []).append(
                fetch_request.FetchPartition(
                    partition=i32(tp.partition),
                    current_leader_epoch=i32(-1),
                    fetch_offset=i64(offset),
                    last_fetched_epoch=i32(-1),
                    log_start_offset=i64(-1),
                    partition_max_bytes=i32(partition_max_bytes),
                )
            )
        body = fetch_request.FetchRequest(
            cluster_id=None,
            replica_id=-1,  # type: ignore[arg-type]
            max_wait=datetime.timedelta(milliseconds=max_wait_ms),  # type: ignore[arg-type]
            min_bytes=i32(1),
            max_bytes=i32(max_bytes),
            isolation_level=i8(0),
            session_id=i32(0),
            session_epoch=i32(-1),
            topics=tuple(
                fetch_request.FetchTopic(topic=t, partitions=tuple(ps))  # type: ignore[arg-type]
                for t, ps in by_topic.items()
            ),
            forgotten_topics_data=(),
            rack_id="",
        )
        address = self._brokers.get(broker_id)
        if address is None:
            raise SourceError(f"the source has no broker {broker_id}")
        response = await self._ask(address, body, lane)
        if int(response.error_code) != 0:
            raise SourceError(f"Fetch answered {ErrorCode(int(response.error_code)).name}")
        fetched = {}
        for topic in response.responses:
            for p in topic.partitions:
                fetched[TopicPartition(topic.topic, int(p.partition_index))] = FetchedPartition(
                    _code(int(p.error_code)),
                    int(p.high_watermark),
                    int(p.log_start_offset),
                    bytes(p.records or b""),
                )
        return fetched

    async def log_offset(self, broker_id: int, tp: TopicPartition, latest: bool) -> int:
        """The partition's log start (`latest` False) or end, from its leader `broker_id`."""
        body = list_offsets_request.ListOffsetsRequest(
            replica_id=-1,  # type: ignore[arg-type]
            isolation_level=i8(0),
            topics=(
                list_offsets_request.ListOffsetsTopic(
                    name=tp.topic,  # type: ignore[arg-type]
                    partitions=(
                        list_offsets_request.ListOffsetsPartition(
                            partition_index=i32(tp.partition),
                            current_leader_epoch=i32(-1),
                            timestamp=i64(-1 if latest else -2),
                        ),
                    ),
                ),
            ),
        )
        address = self._brokers.get(broker_id)
        if address is None:
            raise SourceError(f"the source has no broker {broker_id}")
        response = await self._ask(address, body)
        ((answer,),) = [t.partitions for t in response.topics]
        if int(answer.error_code) != 0:
            raise SourceError(f"ListOffsets of {tp}: {_code(int(answer.error_code)).name}")
        return int(answer.offset)

    async def groups(self) -> list[str]:
        """Every consumer group of the source (each broker lists those it coordinates)."""
        found: set[str] = set()
        for address in list(self._brokers.values()) or self._bootstrap[:1]:
            response = await self._ask(address, groups_request.ListGroupsRequest(states_filter=()))
            found.update(g.group_id for g in response.groups)
        return sorted(found)

    async def committed(self, group: str, topics: Sequence[str]) -> dict[TopicPartition, int]:
        """The group's committed offsets on `topics` (its coordinator asked)."""
        find = find_request.FindCoordinatorRequest(
            key_type=i8(_GROUP_KEY), coordinator_keys=(group,)
        )
        (coordinator,) = (await self._ask_any(find)).coordinators
        if int(coordinator.error_code) != 0:
            raise SourceError(f"no coordinator for {group!r}: {coordinator.error_code}")
        body = offsets_request.OffsetFetchRequest(group_id=group, topics=None, require_stable=True)  # type: ignore[arg-type]
        response = await self._ask((coordinator.host, int(coordinator.port)), body)
        if int(response.error_code) != 0:
            raise SourceError(f"OffsetFetch of {group!r}: {response.error_code}")
        wanted = set(topics)
        offsets: dict[TopicPartition, int] = {}
        for topic in response.topics:
            if topic.name not in wanted:
                continue
            for p in topic.partitions:
                if int(p.error_code) == 0 and int(p.committed_offset) >= 0:
                    offsets[TopicPartition(topic.name, int(p.partition_index))] = int(
                        p.committed_offset
                    )
        return offsets

    async def close(self) -> None:
        connections, self._connections = list(self._connections.values()), {}
        for connection in connections:
            await connection.close()


def _address(spec: str) -> tuple[str, int]:
    host, _, port = spec.strip().rpartition(":")
    if not host or not port.isdigit():
        raise ValueError(f"{spec.strip()!r} is not HOST:PORT")
    return host, int(port)


def _code(value: int) -> ErrorCode:
    try:
        return ErrorCode(value)
    except ValueError:
        return ErrorCode.UNKNOWN_SERVER_ERROR
