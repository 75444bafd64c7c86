"""Where requests meet the APIs: a frame's API key and version pick its route in the handler
table (`_handlers.table`), and only there.

A frame whose (key, version) has no route closes its connection: an API key this server does not
know, or a version it does not advertise, other than ApiVersions, which is answered, as Kafka does,
with a v0 response carrying UNSUPPORTED_VERSION and the supported ranges. Requests are counted per
API key and client id (`received`), and every answered one is measured here, once.

A frame above `inline_frame_bytes_max` is decoded, and its response encoded, in a worker thread:
time on the event loop is shared by every broker of the process.
"""

from __future__ import annotations

import asyncio
import collections
import concurrent.futures
import functools
import time
from collections.abc import Awaitable, Callable
from typing import TypeVar

from kio.static.protocol import ResponsePayload

from diskless.kafka_server._handlers.context import BrokerContext, Session
from diskless.kafka_server._handlers.table import route, unsupported_version_answer
from diskless.kafka_server._protocol.apis import ApiKey
from diskless.kafka_server._protocol.codec import (
    DecodedRequest,
    Frame,
    FrameError,
    decode_request,
    encode_response,
    encode_response_parts,
    read_prefix,
    request_schema,
)
from diskless.kafka_server._server.network._responses import Answer
from diskless.kafka_server._server.network.response_errors import error_codes
from diskless.metrics import NULL_METRICS

_Result = TypeVar("_Result")


class Dispatcher:
    """Request to handler for one broker's connections (their `Dispatch`); `open` before the
    first request, `close` after the last."""

    def __init__(self, context: BrokerContext, *, inline_frame_bytes_max: int) -> None:
        """`context`: what the handlers are given, and where requests are measured
        (`context.metrics`)."""
        self._context = context
        self._inline_frame_bytes_max = inline_frame_bytes_max
        self._codec: concurrent.futures.ThreadPoolExecutor | None = None
        self._received: collections.Counter[tuple[ApiKey, str]] = collections.Counter()

    def open(self) -> None:
        # One thread: the codec is pure Python under the GIL, more would not make it faster.
        self._codec = concurrent.futures.ThreadPoolExecutor(
            1, thread_name_prefix=f"kafka-codec-{self._context.broker_id}"
        )

    def close(self) -> None:
        """Requests still decoding or encoding in the worker thread fail (`ConnectionError`)."""
        if self._codec is not None:
            self._codec.shutdown(wait=False, cancel_futures=True)
            self._codec = None

    def received(self, api: ApiKey) -> collections.Counter[str]:
        """Requests of `api` received, per client id."""
        return collections.Counter(
            {client: n for (key, client), n in self._received.items() if key is api}
        )

    async def __call__(self, session: Session, frame: memoryview) -> Answer:
        """Decode one request and start its handler; FrameError when the connection must close
        (see `_connection.Dispatch`)."""
        started = time.perf_counter()
        prefix = read_prefix(frame)
        key, version = prefix.api_key, prefix.api_version
        handler = route(key, version)
        if handler is None:
            response = unsupported_version_answer(key)
            if response is None:
                raise FrameError(f"api key {key} v{version} is not supported")
            done: Answer = asyncio.get_running_loop().create_future()
            done.set_result(encode_response(prefix.correlation_id, response))
            return done
        schema = request_schema(key, version)
        assert schema is not None, (key, version)  # every advertised version is modelled
        large = len(frame) > self._inline_frame_bytes_max
        request: DecodedRequest
        if large:
            request = await self._in_codec_thread(functools.partial(decode_request, frame, schema))
        else:
            request = decode_request(frame, schema)
        self._received[(handler.api.key, request.client_id or "")] += 1
        session.client_id = request.client_id or ""
        handling = handler(self._context, session, request.body)
        answer = self._answer(handling, prefix.correlation_id, handler.api.key, started, large)
        return asyncio.ensure_future(answer)

    async def _answer(
        self,
        handling: Awaitable[ResponsePayload | None],
        correlation_id: int,
        api: ApiKey,
        started: float,
        large: bool,
    ) -> Frame | None:
        """The framed response; a large request's response is encoded off the event loop
        (its size grows with the request's: 100,000 topics in, 100,000 out). The one place
        every answered request is measured."""
        response = await handling
        metrics = self._context.metrics
        if metrics is not NULL_METRICS:  # the walk for error codes only where they count
            errors = error_codes(response) if response is not None else ()
            metrics.request_answered(api.name, time.perf_counter() - started, errors)
        if response is None:
            return None
        if large:
            return await self._in_codec_thread(
                functools.partial(encode_response_parts, correlation_id, response)
            )
        return encode_response_parts(correlation_id, response)

    async def _in_codec_thread(self, function: Callable[[], _Result]) -> _Result:
        if self._codec is None:
            raise ConnectionError("the server is closing")
        return await asyncio.get_running_loop().run_in_executor(self._codec, function)
