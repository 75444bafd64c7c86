"""The metrics port: `/metrics` (Prometheus's text format), `/healthz` and `/readyz`.

A small HTTP/1.1 server on the process's event loop, so that a scrape reads the counters where
they change (no lock, no thread) and can first await what has to be asked of the coordinator
(consumer lag). Each request is answered and the connection closed. `/healthz` answers 200
while the event loop serves at all; `/readyz` answers 200 only when `ready` finds nothing wrong,
else 503 with the reason in the body, one line.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable
from typing import Final

from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest

from diskless.kafka_server._server.settings.config import parse_host_port

_log = logging.getLogger(__name__)

REQUEST_HEAD_BYTES_MAX: Final = 16 * 1024
REQUEST_HEAD_TIMEOUT_S: Final = 10.0
_REASONS: Final = {
    200: "OK",
    404: "Not Found",
    405: "Method Not Allowed",
    500: "Internal Server Error",
    503: "Unavailable",
}


class MetricsEndpoint:
    """Serves `registry` and the health checks on HOST:PORT until `close`."""

    def __init__(
        self,
        registry: CollectorRegistry,
        *,
        ready: Callable[[], Awaitable[str | None]],
        before_scrape: Callable[[], Awaitable[None]] | None = None,
    ) -> None:
        """`ready`: None when ready, else why not; `before_scrape`: awaited before each scrape
        (figures computed on demand)."""
        self._registry = registry
        self._ready = ready
        self._before_scrape = before_scrape
        self._server: asyncio.Server | None = None

    async def start(self, address: str) -> None:
        host, port = parse_host_port(address)
        self._server = await asyncio.start_server(self._serve, host, port)
        _log.info("metrics and health on http://%s", self.address)

    @property
    def address(self) -> str:
        """HOST:PORT it listens on (the port chosen when 0 was asked)."""
        if self._server is None:
            raise RuntimeError("the metrics endpoint is not listening")
        host, port = self._server.sockets[0].getsockname()[:2]
        return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"

    async def close(self) -> None:
        server, self._server = self._server, None
        if server is not None:
            server.close()
            await server.wait_closed()

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            async with asyncio.timeout(REQUEST_HEAD_TIMEOUT_S):
                head = await reader.readuntil(b"\r\n\r\n")
            method, path = _request_line(head)
            try:
                status, content_type, body = await self._route(method, path)
            except Exception as error:  # a bug: answer it, log it once per request
                _log.exception("%s %s failed", method, path)
                status, content_type = 500, "text/plain; charset=utf-8"
                body = f"{type(error).__name__}: {error}\n".encode()
            writer.write(
                f"HTTP/1.1 {status} {_REASONS[status]}\r\nContent-Type: {content_type}\r\n"
                f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n".encode()
                + (body if method != "HEAD" else b"")
            )
            await writer.drain()
        except (TimeoutError, ConnectionError, asyncio.IncompleteReadError, ValueError):
            pass  # a client that went away or sent no request: nothing to answer
        except asyncio.LimitOverrunError:
            pass
        finally:
            writer.close()
            with contextlib.suppress(ConnectionError):
                await writer.wait_closed()

    async def _route(self, method: str, path: str) -> tuple[int, str, bytes]:
        text = "text/plain; charset=utf-8"
        if method not in ("GET", "HEAD"):
            return 405, text, b"only GET\n"
        path = path.partition("?")[0]
        if path == "/metrics":
            if self._before_scrape is not None:
                await self._before_scrape()
            return 200, CONTENT_TYPE_LATEST, generate_latest(self._registry)
        if path == "/healthz":
            return 200, text, b"ok\n"
        if path == "/readyz":
            reason = await self._ready()
            if reason is None:
                return 200, text, b"ready\n"
            return 503, text, f"not ready: {reason}\n".encode()
        return 404, text, b"try /metrics, /healthz or /readyz\n"


def _request_line(head: bytes) -> tuple[str, str]:
    if len(head) > REQUEST_HEAD_BYTES_MAX:
        raise ValueError("request head too large")
    method, path, _ = head.split(b"\r\n", 1)[0].decode("latin-1").split(" ", 2)
    return method, path
