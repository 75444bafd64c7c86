"""How a decoded request reaches its typed handler, and what every handler shares.

A handler serves every advertised version of one API with one body: it takes the union of that
API's kio request classes (`_protocol.messages`) and the response class of the request's
version, and returns an instance of it (or None: no response, as for Produce with acks=0).
`Route(handler)` reads the union from the handler's own annotation, so the handler is the one
place an API is declared: its key, its versions and its response classes all follow from the
union (`_protocol.apis.Api`). `Route` is also the one place where the server's generic
`RequestPayload` becomes the handler's union: it checks the request's class before the call and
the response's after it, so a handler can rely on its annotation.

A library failure (`DisklessError`) that a handler lets through is answered by its route, once
for every API: the code the library's error table gives the API's family (`_errors`), on the
whole request, as Kafka's `AbstractRequest.getErrorResponse` answers one (`ErrorResponse`). A
handler catches a failure itself only where its answer says more than one code for everything:
the partitions answered before the call, or a message.
"""

from __future__ import annotations

import datetime
import typing
from collections.abc import Awaitable, Callable
from typing import Final, Generic, Protocol, TypeGuard, TypeVar

from kio.schema.errors import ErrorCode as WireError
from kio.static.protocol import RequestPayload, ResponsePayload

from diskless.errors import DisklessError
from diskless.kafka_server._handlers._errors import Family, failure
from diskless.kafka_server._handlers.context import BrokerContext, Session
from diskless.kafka_server._protocol.apis import Api
from diskless.kafka_server._protocol.fields import build

NO_THROTTLE: Final = datetime.timedelta(0)

Request = TypeVar("Request", bound=RequestPayload)
Response = type[ResponsePayload]
"""What a handler is given to answer with: the response class of the request's version."""
ErrorResponse = Callable[[Request, Response, WireError], ResponsePayload]
"""The whole request answered with one code: every entry it names, or its top-level code."""


def error_response(request: RequestPayload, response: Response, code: WireError) -> ResponsePayload:
    """The `ErrorResponse` of an API whose answer is its top-level code alone."""
    return build(response, throttle_time=NO_THROTTLE, error_code=code)


class Handler(Protocol):
    """What the server calls for one request: the route of its API key."""

    @property
    def api(self) -> Api: ...

    def __call__(
        self, context: BrokerContext, session: Session, request: RequestPayload
    ) -> Awaitable[ResponsePayload | None]: ...


class Route(Generic[Request]):
    """One API key: the handler that serves it, the API its annotation declares, and how a
    library failure under the handler is answered."""

    __slots__ = ("_error_response", "_family", "_handle", "api")

    def __init__(
        self,
        handle: Callable[
            [BrokerContext, Session, Request, Response], Awaitable[ResponsePayload | None]
        ],
        family: Family | None = None,
        failed: ErrorResponse[Request] | None = None,
    ) -> None:
        """`family`: the API's entry in the library's error table, for a `DisklessError` the
        handler lets through, answered `failed` with its code. Neither: the handler answers
        every failure itself (one it let through ends the connection, as an unexpected error
        does)."""
        if (family is None) != (failed is None):
            raise ValueError("a route answers a failure with a family's code and a response")
        self._handle = handle
        self._family = family
        self._error_response = failed
        self.api = Api(typing.get_type_hints(handle)["request"])

    def _is_request(self, request: RequestPayload) -> TypeGuard[Request]:
        return self.api.is_request(request)

    async def __call__(
        self, context: BrokerContext, session: Session, request: RequestPayload
    ) -> ResponsePayload | None:
        if not self._is_request(request):
            raise TypeError(f"{type(request)} is not a request of {self.api.key.name}")
        schema = self.api.response_schema(request.__version__)
        try:
            response = await self._handle(context, session, request, schema)
        except DisklessError as error:
            if self._family is None or self._error_response is None:
                raise
            what = f"{self.api.key.name} on broker {context.broker_id}"
            response = self._error_response(request, schema, failure(self._family, error, what))
        if response is not None and type(response) is not schema:
            raise TypeError(f"{self.api.key.name} answered {type(response)}, not {schema}")
        return response


def millis(value: datetime.timedelta) -> int:
    return round(value.total_seconds() * 1000)
