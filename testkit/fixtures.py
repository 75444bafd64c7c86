"""The suite's shared fixtures, in one pytest plugin (`tests/conftest.py` registers it).

- `clock`: a virtual clock; `coordinator`: a fresh batch coordinator of each backend
  (`testkit.backends`) on that clock, with the options of `coordinator_options`, which a test
  package overrides to give its own (`{}` by default).
- `s3_endpoint`: one moto S3 server per session; `s3_bucket`: a bucket of it per test.
- `postgres_server`, `postgres_dsn`: the run's PostgreSQL server and a fresh database of it
  (`testkit.postgres`).
- `network_of`: hosts in network namespaces (`testkit.netns`).
- `certs`: one CA with server and client certificates per session (`testkit.tls`).

moto and the namespaces' helpers are imported by the fixtures that use them, so that loading the
plugin stays cheap for a run that needs neither.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from diskless.clock import ManualClock
from diskless.coordinator import BatchCoordinator
from testkit.backends import BACKENDS, open_coordinator
from testkit.postgres import postgres_dsn, postgres_server

if TYPE_CHECKING:
    from testkit.netns import Network
    from testkit.tls import Certs

__all__ = [
    "certs",
    "clock",
    "coordinator",
    "coordinator_options",
    "network_of",
    "postgres_dsn",
    "postgres_server",
    "s3_bucket",
    "s3_endpoint",
]


@pytest.fixture
def clock() -> ManualClock:
    return ManualClock()


@pytest.fixture
def coordinator_options() -> dict[str, Any]:
    """Options every coordinator of the `coordinator` fixture is opened with."""
    return {}


@pytest.fixture(params=BACKENDS)
async def coordinator(
    request: pytest.FixtureRequest,
    clock: ManualClock,
    tmp_path: Path,
    coordinator_options: dict[str, Any],
) -> AsyncIterator[BatchCoordinator]:
    backend = open_coordinator(request.param, tmp_path, clock, **coordinator_options)
    try:
        yield backend
    finally:
        await backend.close()


@pytest.fixture(scope="session")
def s3_endpoint() -> Iterator[str]:
    """One moto S3 server for the whole session (tests create their own buckets)."""
    from testkit.s3server import running_s3_server

    with running_s3_server() as endpoint_url:
        yield endpoint_url


@pytest.fixture
async def s3_bucket(s3_endpoint: str) -> str:
    from testkit.s3server import create_bucket

    return await create_bucket(s3_endpoint)


@pytest.fixture
def network_of() -> Iterator[Callable[..., Network]]:
    """`network_of(count, subnet=SUBNET)`: a network of `count` hosts, deleted after the test."""
    from testkit.netns import networks

    yield from networks()


@pytest.fixture(scope="session")
def certs(tmp_path_factory: pytest.TempPathFactory) -> Certs:
    from testkit.tls import make_certs

    return make_certs(tmp_path_factory.mktemp("certs"))
