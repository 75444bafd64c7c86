"""How a decoded request reaches its typed handler, and what every handler shares.

A handler serves every advertised version of one API with one body: it takes the union of that
API's kio request classes (`_messages`) and the response class of the request's version, and
returns an instance of it (or None: no response, as for Produce with acks=0). `Route` is the
one place where the server's generic `RequestPayload` becomes the handler's union: it checks the
request's class and the response class at run time before the call, so a handler can rely on
its annotation.
"""

from __future__ import annotations

import datetime
import types
from collections.abc import Awaitable, Callable
from typing import Final, Generic, Protocol, TypeGuard, TypeVar

from kio.static.protocol import RequestPayload, ResponsePayload

from diskless.kafka_server._handlers.context import BrokerContext, Connection
from diskless.kafka_server._protocol.codec import request_schema, response_schema
from diskless.kafka_server._protocol.versions import SUPPORTED_VERSIONS, ApiKey

NO_THROTTLE: Final = datetime.timedelta(0)

Request = TypeVar("Request", bound=RequestPayload)
Response = TypeVar("Response", bound=ResponsePayload)


class Handler(Protocol):
    """What the server calls for one request: the route of its API key."""

    def __call__(
        self, context: BrokerContext, connection: Connection, request: RequestPayload
    ) -> Awaitable[ResponsePayload | None]: ...


class Route(Generic[Request, Response]):
    """One API key: the kio classes of its advertised versions and the handler that serves them."""

    __slots__ = ("_handle", "_requests", "_responses", "_schemas", "api_key")

    def __init__(
        self,
        api_key: ApiKey,
        requests: types.UnionType,
        responses: types.UnionType,
        handle: Callable[
            [BrokerContext, Connection, Request, type[Response]], Awaitable[Response | None]
        ],
    ) -> None:
        """`requests` and `responses`: the `_messages` unions that `handle` is annotated with."""
        self.api_key = api_key
        self._requests = requests
        self._responses = responses
        self._handle = handle
        low, high = SUPPORTED_VERSIONS[api_key]
        self._schemas: dict[int, type[Response]] = {}
        for version in range(low, high + 1):
            request = request_schema(int(api_key), version)
            if request is None or not issubclass(request, requests):
                raise TypeError(f"{request} is not in the request union of {api_key.name}")
            schema = response_schema(int(api_key), version)
            if not self._is_response(schema):
                raise TypeError(f"{schema} is not in the response union of {api_key.name}")
            self._schemas[version] = schema

    def response_schema(self, version: int) -> type[Response]:
        """The response class of an advertised `version`."""
        return self._schemas[version]

    def _is_request(self, request: RequestPayload) -> TypeGuard[Request]:
        return isinstance(request, self._requests)

    def _is_response(self, schema: type[ResponsePayload]) -> TypeGuard[type[Response]]:
        return issubclass(schema, self._responses)

    async def __call__(
        self, context: BrokerContext, connection: Connection, request: RequestPayload
    ) -> ResponsePayload | None:
        if not self._is_request(request):
            raise TypeError(f"{type(request)} is not a request of {self.api_key.name}")
        schema = self._schemas[request.__version__]
        return await self._handle(context, connection, request, schema)


def millis(value: datetime.timedelta) -> int:
    return round(value.total_seconds() * 1000)
