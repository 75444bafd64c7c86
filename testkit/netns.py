"""Hosts on a private network, for tests of a cluster spread over several machines.

Each host is a Linux network namespace with its own address on a test subnet (`SUBNET`,
10.213.7.0/24 unless `DISKLESS_NETNS_SUBNET` or the caller says otherwise), its loopback up and one
interface, `eth0`, a veth whose other end is a port (`h1`, `h2`...) of a bridge. The bridge lives in
a namespace of its own, the switch, so nothing is added to the machine's own network: no interface,
no route, no address. Hosts have no default route, so their traffic stays on the test subnet; the
subnet cannot clash with the machine's, nor with another run's (each run has its own switch).

    host 1 (10.213.7.1) ─eth0──h1─┐
    host 2 (10.213.7.2) ─eth0──h2─┼─ br0, in the switch namespace
    host 5 (10.213.7.5) ─eth0──h5─┘

A multi-host cluster test puts, say, brokers in hosts 1-3, PostgreSQL and the S3 endpoint in
host 4 (`postgres_in`, `s3_server_in`) and its clients in host 5:

    async def test_cluster(network_of: NetworkFactory) -> None:
        net = network_of(5)
        infra, clients = net.hosts[3], net.hosts[4]
        with postgres_in(infra) as pg, s3_server_in(infra) as endpoint:
            brokers = [h.popen([sys.executable, "-m", "diskless.kafka_server", ...]) ...]
            result = clients.python(CLIENT_CODE, bootstrap)   # a client in a process of host 5
            net.cut_between(net.hosts[0], infra)              # broker 1 loses PostgreSQL and S3

Running something in a host:
- `Host.popen` / `Host.run` / `Host.python`: a process in the host (`ip netns exec`); it sees the
  same files, so the virtual environment and the repository are there (`python` runs the
  interpreter of this run, with the repository on its path).
- `Host.call(fn)`: `fn` in a thread of this process that has joined the host's namespace. A socket
  belongs to the namespace it was created in, so `Host.socket()` gives this process's event loop a
  socket of that host, and the threads `fn` starts (a server's, a client library's) are in the
  host too. A Kafka client runs in-process from a host when all of its code runs in `call`: a
  library may connect from whichever thread calls it (kafka-python's consumer does), though
  confluent-kafka's and kafka-python's producer's own threads are born where they are made. For
  aiokafka, the loop runs there: `await asyncio.to_thread(host.call, asyncio.run, main())`.

Partitions (no firewall involved, only `ip`):
- `Network.cut(host)`: the host's switch port goes down, as a pulled cable. Every frame to or
  from the host is dropped; open connections stay open with nothing arriving; a new connection
  fails with EHOSTUNREACH after about 3 s, once ARP gives up (unless its own timeout is shorter).
  `restore(host)` brings the port up: open connections carry on where they were (TCP resends
  what was held), and a first new connection may take a second (its SYN resent).
- `Network.cut_between(a, b)`: `a` and `b` lose each other, and only each other: each host's
  neighbour entry for the other is pinned to a MAC address nobody has, so the frames between them
  go nowhere and every other pair still talks. Connections between them time out, with no error
  at all; `restore_between(a, b)` lets them resolve each other again.
One-way loss (a host that sends but does not receive), delay and partial loss are not modelled.

Names are `dkl-<pid>-<start time>-<nonce>-...`; `Network` removes, before it builds anything,
the namespaces of runs whose process is gone (and kills what still runs in them), so a killed run
leaves nothing behind past the next one. Closing a network (the fixture does, however the test
ended; an exit handler does, should the run end first) kills every process left in its hosts and
deletes its namespaces, which takes their veths and the bridge with them.

Where namespaces are not available (not root, no `ip`, not permitted) the tests skip with the
reason; under CI (`CI` set) or with `DISKLESS_REQUIRE_NETNS` set they fail instead.
"""

from __future__ import annotations

import atexit
import contextlib
import ctypes
import ipaddress
import os
import re
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any, Final, TypeVar

import pytest

from testkit.postgres import bindir_or_skip
from testkit.postgres_server import PostgresServer
from testkit.s3server import running_s3_server

T = TypeVar("T")

SUBNET: Final = ipaddress.IPv4Network(os.environ.get("DISKLESS_NETNS_SUBNET", "10.213.7.0/24"))
NAME_PREFIX: Final = "dkl"
NOWHERE_MAC: Final = "02:00:00:00:00:01"
"""Locally administered and given to no interface: frames sent to it are dropped by every host."""
NETNS_DIR: Final = Path("/run/netns")
REPOSITORY: Final = Path(__file__).resolve().parent.parent
IP_TIMEOUT_S: Final = 30.0
KILL_WAIT_S: Final = 10.0
JOIN_WAIT_S: Final = 30.0
_CLONE_NEWNET: Final = 0x40000000
_NAME = re.compile(rf"^{NAME_PREFIX}-(\d+)-(\d+)-[0-9a-f]+-")


class NetnsError(RuntimeError):
    """An `ip` command failed."""


def _ip_binary() -> str | None:
    # /usr/sbin is not on a non-root user's PATH; such a user is told about root instead.
    return shutil.which("ip", path=f"{os.environ.get('PATH', '')}:/usr/sbin:/sbin")


def _ip(*args: str, batch: Sequence[str] = ()) -> str:
    """Run `ip args` (fed `batch`, one command a line, when given); raise NetnsError on failure."""
    binary = _ip_binary()
    assert binary is not None, "availability is checked before any network is built"
    argv = [binary, *args, *(["-batch", "-"] if batch else [])]
    out = subprocess.run(
        argv,
        input="".join(f"{line}\n" for line in batch),
        capture_output=True,
        text=True,
        timeout=IP_TIMEOUT_S,
    )
    if out.returncode != 0:
        commands = f" (commands: {'; '.join(batch)})" if batch else ""
        raise NetnsError(f"{' '.join(argv)} failed: {out.stderr.strip()}{commands}")
    return out.stdout


def _start_time(pid: int) -> int | None:
    """The process's start time (clock ticks after boot), or None when there is no such process:
    with the pid, it names a process even after its pid is reused."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return int(stat.rpartition(")")[2].split()[19])


def _run_tag() -> str:
    pid = os.getpid()
    return f"{NAME_PREFIX}-{pid}-{_start_time(pid)}-{secrets.token_hex(3)}"


def namespaces() -> list[str]:
    """Every named network namespace of the machine whose name this module gives."""
    if not NETNS_DIR.is_dir():
        return []
    return sorted(p.name for p in NETNS_DIR.iterdir() if p.name.startswith(f"{NAME_PREFIX}-"))


def _join(name: str) -> None:
    """Move the calling thread (only it) into namespace `name`."""
    libc = ctypes.CDLL(None, use_errno=True)
    fd = os.open(NETNS_DIR / name, os.O_RDONLY | os.O_CLOEXEC)
    try:
        if libc.setns(fd, _CLONE_NEWNET) != 0:
            errno = ctypes.get_errno()
            raise OSError(errno, f"setns into {name}: {os.strerror(errno)}")
    finally:
        os.close(fd)


def _pids(name: str) -> list[int]:
    try:
        return [int(p) for p in _ip("netns", "pids", name).split()]
    except NetnsError:
        return []


def running(pid: int) -> bool:
    """Whether `pid` still runs (a zombie, which only waits to be reaped, does not)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rpartition(")")[2].split()[0] not in ("Z", "X")


def _delete(name: str) -> None:
    """Kill what runs in namespace `name`, then delete it (its interfaces go with it)."""
    pids = [p for p in _pids(name) if p != os.getpid()]
    for pid in pids:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
    deadline = time.monotonic() + KILL_WAIT_S
    while any(running(p) for p in pids) and time.monotonic() < deadline:
        time.sleep(0.02)
    with contextlib.suppress(NetnsError):
        _ip("netns", "delete", name)


def remove_stale() -> list[str]:
    """Delete the namespaces of runs whose process is gone; the names deleted."""
    stale = []
    for name in namespaces():
        match = _NAME.match(name)
        if match and _start_time(int(match[1])) != int(match[2]):
            _delete(name)
            stale.append(name)
    return stale


class Host:
    """One host: a network namespace with an address on the network's subnet."""

    def __init__(self, network: Network, index: int, name: str, address: str) -> None:
        self.network = network
        self.index = index
        self.name = name
        self.address = address
        self.port = f"h{index}"
        """Its port on the switch's bridge."""

    def __repr__(self) -> str:
        return f"Host({self.index}, {self.address}, {self.name})"

    def argv(self, *argv: str) -> list[str]:
        """`argv` as a command that runs in this host."""
        binary = _ip_binary()
        assert binary is not None
        return [binary, "netns", "exec", self.name, *argv]

    def popen(self, argv: Sequence[str], **kwargs: Any) -> subprocess.Popen[Any]:
        """`subprocess.Popen` of `argv` in this host (`ip netns exec` execs it: the Popen's pid
        is the command's own). Returns once the process is in the host (or has ended), so that
        `pids` lists it and closing the network kills it."""
        process = subprocess.Popen(self.argv(*argv), **kwargs)
        inside = os.stat(NETNS_DIR / self.name).st_ino
        deadline = time.monotonic() + JOIN_WAIT_S
        while process.poll() is None:
            with contextlib.suppress(OSError):
                if os.stat(f"/proc/{process.pid}/ns/net").st_ino == inside:
                    break
            if time.monotonic() > deadline:
                process.kill()
                process.wait()
                raise NetnsError(f"{argv} did not enter {self.name}")
            time.sleep(0.001)
        return process

    def run(self, argv: Sequence[str], **kwargs: Any) -> subprocess.CompletedProcess[Any]:
        """`subprocess.run` of `argv` in this host."""
        return subprocess.run(self.argv(*argv), **kwargs)

    def python(
        self, code: str, *args: str, timeout: float = 60.0, check: bool = True
    ) -> subprocess.CompletedProcess[str]:
        """Run `code` with this run's interpreter in this host (repository on its path); its
        output as text. `check`: raise, with its stderr, when it exits with an error."""
        env = {**os.environ, "PYTHONPATH": str(REPOSITORY)}
        out = self.run(
            [sys.executable, "-c", code, *args],
            capture_output=True,
            text=True,
            timeout=timeout,
            cwd=REPOSITORY,
            env=env,
        )
        if check and out.returncode != 0:
            raise AssertionError(f"python in {self} exited {out.returncode}:\n{out.stderr}")
        return out

    def call(self, fn: Callable[..., T], *args: Any) -> T:
        """`fn(*args)` in a new thread inside this host; its result (or its exception)."""
        outcome: list[Any] = []

        def inside() -> None:
            try:
                _join(self.name)
                outcome.append((True, fn(*args)))
            except BaseException as error:
                outcome.append((False, error))

        thread = threading.Thread(target=inside, name=f"in {self.name}")
        thread.start()
        thread.join()
        ok, value = outcome[0]
        if not ok:
            raise value
        return value  # type: ignore[no-any-return]

    def socket(
        self,
        family: socket.AddressFamily = socket.AF_INET,
        kind: socket.SocketKind = socket.SOCK_STREAM,
    ) -> socket.socket:
        """A socket of this host, for this process to use."""
        return self.call(socket.socket, family, kind)

    def pids(self) -> list[int]:
        """The processes running in this host."""
        return _pids(self.name)


class Network:
    """`count` hosts on one bridge (see the module doc); `close` deletes it all."""

    def __init__(self, count: int, subnet: ipaddress.IPv4Network | str = SUBNET) -> None:
        self.subnet = ipaddress.IPv4Network(subnet)
        assert 1 <= count <= self.subnet.num_addresses - 2, (count, self.subnet)
        remove_stale()
        tag = _run_tag()
        self.switch = f"{tag}-switch"
        self.hosts = [
            Host(self, i, f"{tag}-host{i}", str(self.subnet.network_address + i))
            for i in range(1, count + 1)
        ]
        self._names = [self.switch, *(h.name for h in self.hosts)]
        self._closed = False
        _open.add(self)
        try:
            self._build()
        except BaseException:
            self.close()
            raise

    def _build(self) -> None:
        for name in self._names:
            _ip("netns", "add", name)
        switch = ["link set lo up", "link add br0 type bridge forward_delay 0", "link set br0 up"]
        for host in self.hosts:
            switch += [
                f"link add {host.port} type veth peer name eth0 netns {host.name}",
                f"link set {host.port} master br0 up",
            ]
        _ip("-n", self.switch, batch=switch)
        for host in self.hosts:
            _ip(
                "-n",
                host.name,
                batch=[
                    "link set lo up",
                    f"addr add {host.address}/{self.subnet.prefixlen} dev eth0",
                    "link set eth0 up",
                ],
            )

    def __repr__(self) -> str:
        return f"Network({self.subnet}, {self.hosts})"

    def cut(self, host: Host) -> None:
        """Pull `host`'s cable: its switch port goes down."""
        _ip("-n", self.switch, "link", "set", host.port, "down")

    def restore(self, host: Host) -> None:
        _ip("-n", self.switch, "link", "set", host.port, "up")

    def cut_between(self, a: Host, b: Host) -> None:
        """`a` and `b` stop hearing each other; every other pair still does."""
        assert a is not b
        for near, far in ((a, b), (b, a)):
            _ip(
                "-n", near.name, "neigh", "replace", far.address,
                "lladdr", NOWHERE_MAC, "nud", "permanent", "dev", "eth0",
            )  # fmt: skip

    def restore_between(self, a: Host, b: Host) -> None:
        for near, far in ((a, b), (b, a)):
            _ip("-n", near.name, "neigh", "del", far.address, "dev", "eth0")

    def close(self) -> None:
        """Kill every process left in the hosts, delete every namespace; idempotent."""
        if self._closed:
            return
        self._closed = True
        _open.discard(self)
        for name in self._names:
            if (NETNS_DIR / name).exists():
                _delete(name)


_open: set[Network] = set()


@atexit.register
def _close_open() -> None:
    """A run ended (or was ended by the watchdog) before its fixtures' teardown."""
    for network in list(_open):
        network.close()


@contextlib.contextmanager
def network(count: int, subnet: ipaddress.IPv4Network | str = SUBNET) -> Iterator[Network]:
    """`count` hosts, deleted on exit however the block ends."""
    require_netns()
    net = Network(count, subnet)
    try:
        yield net
    finally:
        net.close()


_unavailable: list[str | None] = []


def unavailable() -> str | None:
    """Why this machine cannot run the hosts (checked once, by building a one-host network and
    joining it), or None."""
    if not _unavailable:
        _unavailable.append(_probe())
    return _unavailable[0]


def _probe() -> str | None:
    if sys.platform != "linux":
        return "network namespaces are Linux's"
    if os.geteuid() != 0:
        return "network namespaces need root (CI runs the tests as root)"
    if _ip_binary() is None:
        return "`ip` not found (iproute2; ./run installs it)"
    try:
        probe = Network(1)
    except (NetnsError, OSError, subprocess.SubprocessError) as error:
        return f"cannot create network namespaces here: {error}"
    try:
        probe.hosts[0].call(socket.socket).close()
    except OSError as error:
        return f"cannot join a network namespace here: {error}"
    finally:
        probe.close()
    return None


def require_netns() -> None:
    """Skip the calling test when the hosts cannot be made; fail instead under CI."""
    reason = unavailable()
    if reason is None:
        return
    if os.environ.get("CI") or os.environ.get("DISKLESS_REQUIRE_NETNS"):
        raise RuntimeError(reason)
    pytest.skip(reason)


NetworkFactory = Callable[..., Network]


def networks() -> Iterator[NetworkFactory]:
    """The `network_of` fixture's body (`testkit.fixtures`): yields `make(count, subnet=SUBNET)`,
    a network of `count` hosts, each deleted when the generator ends."""
    require_netns()
    made: list[Network] = []

    def make(count: int, subnet: ipaddress.IPv4Network | str = SUBNET) -> Network:
        made.append(Network(count, subnet))
        return made[-1]

    try:
        yield make
    finally:
        for net in made:
            net.close()


@contextlib.contextmanager
def postgres_in(host: Host) -> Iterator[PostgresServer]:
    """A throwaway PostgreSQL server running in `host`, listening on its address, trusting every
    client of the host's network; stopped on exit."""
    server = PostgresServer(
        bindir_or_skip(),
        listen=host.address,
        trusted=str(host.network.subnet),
        launcher=host.argv(),
    )
    try:
        yield server
    finally:
        server.close()


@contextlib.contextmanager
def s3_server_in(host: Host) -> Iterator[str]:
    """moto's S3 server serving from `host` (a thread of this process, in the host); yields its
    endpoint URL, on the host's address."""
    with running_s3_server(host.address, start_in=host.call) as endpoint:
        yield endpoint
