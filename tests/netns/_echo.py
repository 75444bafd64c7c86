"""A TCP echo server in one host and clients in others, to see who reaches whom.

Everything runs on the test's event loop: the sockets are the hosts' (`Host.socket`), so a
server's listening socket is on its host's address and a client's connection leaves from its own.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from dataclasses import dataclass, field

from testkit.netns import Host

TIMEOUT_S = 1.0
"""How long a connection or an answer may take on a link that works (they take milliseconds)."""


@dataclass
class EchoServer:
    host: Host
    address: str
    port: int
    peers: list[str] = field(default_factory=list)
    """The address each connection came from, in order."""


@contextlib.asynccontextmanager
async def echo_server(host: Host, address: str | None = None) -> AsyncIterator[EchoServer]:
    """An echo server listening in `host` on `address` (the host's own by default)."""
    sock = host.socket()
    sock.bind((address or host.address, 0))
    sock.listen()
    sock.setblocking(False)
    echo = EchoServer(host, *sock.getsockname())

    async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        echo.peers.append(writer.get_extra_info("peername")[0])
        try:
            while data := await reader.read(4096):
                writer.write(data)
                await writer.drain()
        except ConnectionError:
            pass
        finally:
            writer.close()

    server = await asyncio.start_server(serve, sock=sock)
    async with server:
        yield echo


@contextlib.asynccontextmanager
async def connection(
    client: Host, address: str, port: int, timeout: float = TIMEOUT_S
) -> AsyncIterator[tuple[asyncio.StreamReader, asyncio.StreamWriter]]:
    """A TCP connection from `client` to `address:port`, closed on exit."""
    sock = client.socket()
    sock.setblocking(False)
    try:
        await asyncio.wait_for(
            asyncio.get_running_loop().sock_connect(sock, (address, port)), timeout
        )
    except BaseException:
        sock.close()
        raise
    reader, writer = await asyncio.open_connection(sock=sock)
    try:
        yield reader, writer
    finally:
        writer.close()
        with contextlib.suppress(ConnectionError):
            await writer.wait_closed()


async def echoes(client: Host, server: EchoServer, payload: bytes = b"ping") -> bytes:
    """Connect from `client`, send `payload`, return what came back."""
    async with connection(client, server.address, server.port) as (reader, writer):
        writer.write(payload)
        return await asyncio.wait_for(reader.readexactly(len(payload)), TIMEOUT_S)


async def reaches(client: Host, server: EchoServer) -> bool:
    """Whether `client` gets an echo from `server` within the timeouts."""
    try:
        return await echoes(client, server) == b"ping"
    except (TimeoutError, OSError, asyncio.IncompleteReadError):
        return False
