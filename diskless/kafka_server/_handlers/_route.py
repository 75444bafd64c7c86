"""How a decoded request reaches its typed handler, and what every handler shares.

A handler serves every advertised version of one API with one body: it takes the union of that
API's kio request classes (`_protocol.messages`) and the response class of the request's
version, and returns an instance of it (or None: no response, as for Produce with acks=0).
`Route(handler)` reads the union from the handler's own annotation, so the handler is the one
place an API is declared: its key, its versions and its response classes all follow from the
union (`_protocol.apis.Api`). `Route` is also the one place where the server's generic
`RequestPayload` becomes the handler's union: it checks the request's class before the call and
the response's after it, so a handler can rely on its annotation.
"""

from __future__ import annotations

import datetime
import typing
from collections.abc import Awaitable, Callable
from typing import Final, Generic, Protocol, TypeGuard, TypeVar

from kio.static.protocol import RequestPayload, ResponsePayload

from diskless.kafka_server._handlers.context import BrokerContext, Session
from diskless.kafka_server._protocol.apis import Api

NO_THROTTLE: Final = datetime.timedelta(0)

Request = TypeVar("Request", bound=RequestPayload)
Response = type[ResponsePayload]
"""What a handler is given to answer with: the response class of the request's version."""


class Handler(Protocol):
    """What the server calls for one request: the route of its API key."""

    @property
    def api(self) -> Api: ...

    def __call__(
        self, context: BrokerContext, session: Session, request: RequestPayload
    ) -> Awaitable[ResponsePayload | None]: ...


class Route(Generic[Request]):
    """One API key: the handler that serves it, and the API its annotation declares."""

    __slots__ = ("_handle", "api")

    def __init__(
        self,
        handle: Callable[
            [BrokerContext, Session, Request, Response], Awaitable[ResponsePayload | None]
        ],
    ) -> None:
        self._handle = handle
        self.api = Api(typing.get_type_hints(handle)["request"])

    def _is_request(self, request: RequestPayload) -> TypeGuard[Request]:
        return self.api.is_request(request)

    async def __call__(
        self, context: BrokerContext, session: Session, request: RequestPayload
    ) -> ResponsePayload | None:
        if not self._is_request(request):
            raise TypeError(f"{type(request)} is not a request of {self.api.key.name}")
        schema = self.api.response_schema(request.__version__)
        response = await self._handle(context, session, request, schema)
        if response is not None and type(response) is not schema:
            raise TypeError(f"{self.api.key.name} answered {type(response)}, not {schema}")
        return response


def millis(value: datetime.timedelta) -> int:
    return round(value.total_seconds() * 1000)
