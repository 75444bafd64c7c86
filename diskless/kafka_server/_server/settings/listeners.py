"""Kafka's listeners: where each broker accepts connections, what it tells clients to connect
to, and which security protocol each listener speaks.

The three properties keep Kafka's forms and rules:
- `listeners`: `NAME://HOST:PORT,...`; an empty HOST binds every interface; names and ports are
  distinct (port 0 picks a free one);
- `advertised.listeners`: the same form, naming listeners of `listeners` (default: `listeners`
  itself); an empty HOST advertises this machine's name, and 0.0.0.0 or :: is refused since no
  client can connect there;
- `listener.security.protocol.map`: `NAME:PROTOCOL,...`, each listener's protocol (default: each
  protocol's own name is a listener name).
Without `listeners`, a broker has one PLAINTEXT listener on 127.0.0.1, as before there were any.

One process may run several brokers from the same settings: broker k of the process (k counts
its brokers from 0, in the order of `--broker-ids`) listens on each listener's PORT + k, and
advertises each advertised PORT + k, so that every broker has its own address; a port of 0 stays
0 (a free port each, advertised as bound).
"""

from __future__ import annotations

import re
import socket
from collections.abc import Mapping
from typing import Final, NamedTuple

from diskless.kafka_server._handlers.context import DEFAULT_LISTENER
from diskless.kafka_server._protocol.security_protocol import SecurityProtocol

LOOPBACK: Final = "127.0.0.1"
PORT_MAX: Final = 65535
DEFAULT_PROTOCOL_MAP: Final = ",".join(f"{p.value}:{p.value}" for p in SecurityProtocol)
"""Kafka's default `listener.security.protocol.map`."""
_ENDPOINT: Final = re.compile(r"^([A-Za-z0-9_-]+)://(\[[0-9A-Fa-f:.%]*\]|[A-Za-z0-9.%_-]*):(\d+)$")
_UNROUTABLE: Final = ("0.0.0.0", "::")


class Listener(NamedTuple):
    """One entry of `listeners` or `advertised.listeners`."""

    name: str
    host: str
    port: int


class BrokerListener(NamedTuple):
    """One listener of one broker: where it binds, its protocol, what it advertises (port 0:
    the port it bound; `advertised` False: a listener that `advertised.listeners` leaves out,
    bound but never named to clients)."""

    name: str
    host: str
    port: int
    protocol: SecurityProtocol
    advertised_host: str
    advertised_port: int
    advertised: bool = True


def parse_listeners(prop: str, text: str) -> tuple[Listener, ...]:
    """`NAME://HOST:PORT,...`; ValueError naming `prop` when malformed."""
    found: list[Listener] = []
    for entry in (e.strip() for e in text.split(",")):
        match = _ENDPOINT.match(entry)
        if match is None:
            raise ValueError(f"{prop}: {entry!r} is not NAME://HOST:PORT")
        name, host, port = match.group(1).upper(), match.group(2), int(match.group(3))
        if port > PORT_MAX:
            raise ValueError(f"{prop}: port {port} of {entry!r} is outside 0..{PORT_MAX}")
        found.append(Listener(name, host.removeprefix("[").removesuffix("]"), port))
    names = [listener.name for listener in found]
    if len(set(names)) != len(names):
        raise ValueError(f"{prop}: each listener must have a different name ({text!r})")
    ports = [listener.port for listener in found if listener.port]
    if prop == "listeners" and len(set(ports)) != len(ports):
        raise ValueError(f"{prop}: each listener must have a different port ({text!r})")
    return tuple(found)


def parse_protocol_map(text: str) -> dict[str, SecurityProtocol]:
    """`NAME:PROTOCOL,...` (`listener.security.protocol.map`)."""
    protocols: dict[str, SecurityProtocol] = {}
    for entry in (e.strip() for e in text.split(",") if e.strip()):
        name, _, protocol = entry.partition(":")
        try:
            protocols[name.strip().upper()] = SecurityProtocol(protocol.strip().upper())
        except ValueError:
            known = ", ".join(p.value for p in SecurityProtocol)
            raise ValueError(
                f"listener.security.protocol.map: {entry!r} is not NAME:PROTOCOL with PROTOCOL"
                f" one of {known}"
            ) from None
    return protocols


class ListenerPlan(NamedTuple):
    """The checked listener settings, from which each broker's listeners are derived."""

    listeners: tuple[Listener, ...]
    """Empty: the one PLAINTEXT listener on 127.0.0.1."""
    advertised: Mapping[str, Listener]
    protocols: Mapping[str, SecurityProtocol]

    def for_broker(self, index: int, default_port: int = 0) -> list[BrokerListener]:
        """The listeners of the process's broker number `index`; `default_port`: the port of
        the 127.0.0.1 listener when `listeners` is not set."""
        if not self.listeners:
            return [
                BrokerListener(
                    DEFAULT_LISTENER,
                    LOOPBACK,
                    default_port,
                    SecurityProtocol.PLAINTEXT,
                    LOOPBACK,
                    0,
                )
            ]
        brokers = []
        for listener in self.listeners:
            advertised = self.advertised.get(listener.name)
            brokers.append(
                BrokerListener(
                    listener.name,
                    listener.host,
                    _shifted(listener.port, index),
                    self.protocols[listener.name],
                    (advertised.host or socket.getfqdn()) if advertised is not None else "",
                    _shifted(advertised.port, index) if advertised is not None else 0,
                    advertised is not None,
                )
            )
        return brokers

    def highest_port(self, brokers: int) -> int:
        """The highest port `brokers` brokers of one process would use."""
        ports = [p.port for p in (*self.listeners, *self.advertised.values()) if p.port]
        return max(ports, default=0) + (brokers - 1 if ports else 0)


def _shifted(port: int, index: int) -> int:
    return port + index if port else 0


def listener_plan(listeners: str, advertised: str, protocol_map: str) -> ListenerPlan:
    """Check the three properties together, as Kafka does at start; ValueError naming the one to
    blame."""
    protocols = parse_protocol_map(protocol_map)
    if not listeners.strip():
        if advertised.strip():
            raise ValueError("advertised.listeners: needs listeners")
        return ListenerPlan((), {}, protocols)
    bound = parse_listeners("listeners", listeners)
    for listener in bound:
        if listener.name not in protocols:
            raise ValueError(
                f"listeners: no security protocol defined for listener {listener.name}"
                " (listener.security.protocol.map)"
            )
    announced = parse_listeners("advertised.listeners", advertised) if advertised.strip() else bound
    names = {listener.name for listener in bound}
    for listener in announced:
        if listener.name not in names:
            raise ValueError(
                f"advertised.listeners: listener {listener.name} is not one of listeners"
            )
        if listener.host in _UNROUTABLE:
            prop = "advertised.listeners" if advertised.strip() else "listeners"
            raise ValueError(
                f"{prop}: cannot advertise the nonroutable address {listener.host} of"
                f" {listener.name}; set advertised.listeners to an address clients can reach"
            )
    return ListenerPlan(bound, {listener.name: listener for listener in announced}, protocols)
