"""Requests and responses that recur unchanged, decoded, built and encoded once.

An idle consumer's fetch is answered, every `max_wait`, with the same empty response: the same
partitions, offsets and error codes. Building that response's kio entities and encoding them is
a fifth of what such a fetch costs the broker, for bytes it already sent. A handler that knows a
response is one of these asks `RECURRING.payload(key, build)` for it; `encode_response` then
reuses the bytes it encoded the first time (`body_of`, `remember`). kio entities are immutable,
so a shared payload is safe to hand to any number of requests; only the frame header (the
correlation id) differs between them.

The cache is bounded (least recently used out), and holds only what handlers put there: small
responses whose every field is in their key.

Requests recur the same way: an idle consumer sends the same Fetch, byte for byte but for its
correlation id, every `max_wait`. `RecurringRequests` keeps the decoded body of small Fetch
frames by their bytes, so that such a request is decoded and checked once.
"""

from __future__ import annotations

import collections
from collections.abc import Callable, Hashable
from typing import Final, Generic, TypeVar

from kio.static.protocol import ResponsePayload

Payload = TypeVar("Payload", bound=ResponsePayload)
Decoded = TypeVar("Decoded")

ENTRIES_MAX: Final = 4096


class RecurringResponses:
    """Shared payloads by key, and the encoded body of each (see the module doc)."""

    def __init__(self, entries_max: int = ENTRIES_MAX) -> None:
        self._entries_max = entries_max
        self._payloads: collections.OrderedDict[Hashable, ResponsePayload] = (
            collections.OrderedDict()
        )
        self._bodies: dict[int, bytes | None] = {}
        """id(payload) -> its encoded body (None until encoded), for the payloads held in
        `_payloads` only: holding them keeps any other object from taking their id."""

    def payload(self, key: Hashable, build: Callable[[], Payload]) -> Payload:
        """The payload cached under `key`, built by `build` the first time. `key` must determine
        every field `build` gives the payload, and its type."""
        found = self._payloads.get(key)
        if found is not None:
            self._payloads.move_to_end(key)
            return found  # type: ignore[return-value]  # `key` determines the type
        built = build()
        self._payloads[key] = built
        self._bodies[id(built)] = None
        if len(self._payloads) > self._entries_max:
            _, evicted = self._payloads.popitem(last=False)
            del self._bodies[id(evicted)]
        return built

    def holds(self, payload: ResponsePayload) -> bool:
        """Whether `payload` is a shared one."""
        return id(payload) in self._bodies

    def body_of(self, payload: ResponsePayload) -> bytes | None:
        """The encoded body of a shared payload, once `remember`ed."""
        return self._bodies.get(id(payload))

    def remember(self, payload: ResponsePayload, body: bytes) -> None:
        """Keep `body` as the encoding of `payload`, if `payload` is a shared one."""
        if id(payload) in self._bodies:
            self._bodies[id(payload)] = body

    def __len__(self) -> int:
        return len(self._payloads)


RECURRING: Final = RecurringResponses()


class RecurringRequests(Generic[Decoded]):
    """Decoded requests by their frame's bytes after the correlation id (see the module doc)."""

    def __init__(self, entries_max: int = ENTRIES_MAX) -> None:
        self._entries_max = entries_max
        self._decoded: collections.OrderedDict[tuple[type, bytes], Decoded] = (
            collections.OrderedDict()
        )

    def decoded(self, key: tuple[type, bytes], decode: Callable[[], Decoded]) -> Decoded:
        """What `decode` gave for a frame of these bytes under this schema (`key`); a frame
        that does not decode raises, and is not kept."""
        found = self._decoded.get(key)
        if found is not None:
            self._decoded.move_to_end(key)
            return found
        decoded = decode()
        self._decoded[key] = decoded
        if len(self._decoded) > self._entries_max:
            self._decoded.popitem(last=False)
        return decoded

    def __len__(self) -> int:
        return len(self._decoded)
