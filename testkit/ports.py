"""Ports for servers that must be told theirs before they start: a Spark master, PostgreSQL, a
broker named in a properties file.

A port the kernel chose for a socket bound to port 0 and then closed is free only for a moment:
the kernel hands out the same range (`ip_local_port_range`) as the local ports of outgoing
connections, and a test run opens thousands of them, in two workers at once. So these ports
come from just below that range, where the kernel never picks one by itself, from a random
start, each checked by binding it; `count` consecutive ones for a process whose brokers listen
on port + k.
"""

from __future__ import annotations

import random
import socket
from pathlib import Path
from typing import Final

SPAN: Final = 12_000
"""How many ports below the ephemeral range are drawn from."""
ATTEMPTS: Final = 500


def _ephemeral_low() -> int:
    try:
        return int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return 32_768


def free_port(count: int = 1, host: str = "127.0.0.1") -> int:
    """The first of `count` consecutive ports that were free on `host` just now, from below the
    kernel's ephemeral range."""
    high = _ephemeral_low() - count
    low = max(1_024, high - SPAN)
    for _ in range(ATTEMPTS):
        first = random.randint(low, high)
        if all(_bindable(host, port) for port in range(first, first + count)):
            return first
    raise RuntimeError(f"no {count} consecutive free ports in [{low}, {high + count})")


def _bindable(host: str, port: int) -> bool:
    with socket.socket() as sock:
        try:
            sock.bind((host, port))
        except OSError:
            return False
        return True
