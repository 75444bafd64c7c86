"""The hosts of `testkit.netns`: each reaches the others on its own address, partitions cut what
they say and nothing else, and nothing outlives a network, not even a killed run's."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import textwrap

import pytest

from testkit.netns import (
    REPOSITORY,
    Network,
    NetworkFactory,
    _ip,
    namespaces,
    network,
    remove_stale,
    require_netns,
    running,
)
from tests.netns._echo import TIMEOUT_S, connection, echo_server, echoes, reaches

CLIENT = textwrap.dedent(
    """
    import socket, sys
    with socket.create_connection((sys.argv[1], int(sys.argv[2])), timeout=5) as s:
        s.sendall(b"hello")
        print(s.recv(5).decode(), s.getsockname()[0])
    """
)


def root_links() -> list[str]:
    """The interfaces of the machine's own namespace."""
    return sorted(line.split(":")[1].strip() for line in _ip("-o", "link").splitlines())


async def test_hosts_reach_each_other_on_their_own_addresses(network_of: NetworkFactory) -> None:
    net = network_of(3)
    one, two, three = net.hosts
    assert [h.address for h in net.hosts] == [
        str(net.subnet.network_address + i) for i in (1, 2, 3)
    ]
    async with echo_server(one) as server:
        assert await echoes(two, server, b"from two") == b"from two"
        # A process in host three, through `ip netns exec`.
        out = await asyncio.to_thread(three.python, CLIENT, one.address, str(server.port))
        assert out.stdout.split() == ["hello", three.address]
        assert server.peers == [two.address, three.address]
        # The server is on host one's address, not on the loopback of the others.
        with pytest.raises(ConnectionRefusedError):
            async with connection(two, "127.0.0.1", server.port):
                pass
    # Each host's loopback is up, and its own.
    async with echo_server(two, "127.0.0.1") as local:
        assert await echoes(two, local) == b"ping"
        assert local.peers == ["127.0.0.1"]


async def test_a_cut_host_is_silent_until_its_link_is_back(network_of: NetworkFactory) -> None:
    net = network_of(3)
    one, two, three = net.hosts
    async with echo_server(one) as server:
        assert await reaches(three, server)
        async with connection(three, one.address, server.port) as (reader, writer):
            net.cut(three)
            assert not await reaches(three, server)
            assert await reaches(two, server)  # the others still talk
            # An open connection stays open, and nothing crosses it.
            writer.write(b"held")
            with pytest.raises(TimeoutError):
                await asyncio.wait_for(reader.readexactly(4), TIMEOUT_S)
            net.restore(three)
            # TCP retransmits what was held: it arrives once the link is back.
            assert await asyncio.wait_for(reader.readexactly(4), 30) == b"held"
        assert await reaches(three, server)


async def test_a_cut_between_two_hosts_leaves_the_other_pairs(network_of: NetworkFactory) -> None:
    net = network_of(3)
    one, two, three = net.hosts
    async with echo_server(one) as at_one, echo_server(two) as at_two:
        net.cut_between(one, two)
        assert not await reaches(two, at_one)
        assert not await reaches(one, at_two)
        assert await reaches(three, at_one)
        assert await reaches(three, at_two)
        net.restore_between(one, two)
        assert await reaches(two, at_one)
        assert await reaches(one, at_two)


def test_closing_a_network_deletes_it_and_kills_its_processes() -> None:
    require_netns()
    links = root_links()
    with network(3) as net:
        names = [net.switch, *(h.name for h in net.hosts)]
        assert set(names) <= set(namespaces())
        assert root_links() == links  # nothing of it in the machine's own namespace
        sleeper = net.hosts[0].popen(["sleep", "300"])
        try:
            assert net.hosts[0].pids() == [sleeper.pid]
        except BaseException:
            sleeper.kill()
            sleeper.wait()
            raise
    assert sleeper.wait(10) == -signal.SIGKILL
    assert not set(names) & set(namespaces())
    assert root_links() == links


def test_a_failing_test_still_deletes_its_network() -> None:
    require_netns()
    names: list[str] = []
    with pytest.raises(ZeroDivisionError), network(2) as net:
        names += [net.switch, *(h.name for h in net.hosts)]
        assert set(names) <= set(namespaces())
        _ = 1 / 0
    assert not set(names) & set(namespaces())


KILLED_RUN = textwrap.dedent(
    """
    import os, signal, subprocess
    from testkit.netns import Network
    net = Network(2)
    quiet = subprocess.DEVNULL  # the pipes to the test must close with this process
    sleeper = net.hosts[0].popen(["sleep", "300"], stdout=quiet, stderr=quiet)
    print(sleeper.pid, net.switch, *(h.name for h in net.hosts), flush=True)
    os.kill(os.getpid(), signal.SIGKILL)
    """
)


def test_the_namespaces_of_a_killed_run_are_removed_by_the_next() -> None:
    require_netns()
    out = subprocess.run(
        [sys.executable, "-c", KILLED_RUN],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=REPOSITORY,
        env={**os.environ, "PYTHONPATH": str(REPOSITORY)},
    )
    assert out.returncode == -signal.SIGKILL, out.stderr
    pid, *names = out.stdout.split()
    assert len(names) == 3
    try:
        remove_stale()
        # (Another run starting meanwhile may have removed them first: the same code.)
        assert not set(names) & set(namespaces())
        assert not running(int(pid))  # killed; an orphan, so init reaps it
    finally:
        remove_stale()


def test_networks_of_one_process_do_not_share_names() -> None:
    require_netns()
    first, second = Network(1), Network(1)
    try:
        assert first.switch != second.switch
        assert first.hosts[0].address == second.hosts[0].address  # separate wires
    finally:
        first.close()
        second.close()
