"""A real S3 HTTP endpoint (moto's server mode) for any test package to run stores against.

Usage (a session-scoped fixture for the server, a fresh bucket per test):

    with running_s3_server() as endpoint_url:
        async with s3_store(endpoint_url, await create_bucket(endpoint_url)) as store:
            ...
"""

from __future__ import annotations

import contextlib
import uuid
from collections.abc import Callable, Iterator
from typing import Any, TypedDict

from aiobotocore.session import AioSession
from moto.moto_server.werkzeug_app import (
    DomainDispatcherApplication,
    MotoRequestHandler,
    create_backend_app,
)
from moto.server import ThreadedMotoServer
from werkzeug.serving import make_server

from diskless.storage import S3ObjectStore

REGION = "us-east-1"


class S3Credentials(TypedDict):
    region: str
    aws_access_key_id: str
    aws_secret_access_key: str


# Dummy credentials: moto accepts any; explicit so no test depends on the environment.
S3_CREDENTIALS: S3Credentials = {
    "region": REGION,
    "aws_access_key_id": "testing",
    "aws_secret_access_key": "testing",
}


class _HttpsMotoServer(ThreadedMotoServer):
    """moto's threaded server, serving https with the given certificate and key (PEM files)."""

    def __init__(self, ip_address: str, certificate: str, key: str) -> None:
        super().__init__(ip_address=ip_address, port=0, verbose=False)
        self._tls = (certificate, key)

    def _server_entry(self) -> None:
        self._server = make_server(
            self._ip_address,
            self._port,
            DomainDispatcherApplication(create_backend_app),
            True,
            request_handler=MotoRequestHandler,
            ssl_context=self._tls,
        )
        self._server_ready_event.set()
        self._server.serve_forever()


@contextlib.contextmanager
def running_s3_server(
    ip_address: str = "127.0.0.1",
    start_in: Callable[[Callable[[], None]], object] = lambda start: start(),
    tls: tuple[str, str] | None = None,
) -> Iterator[str]:
    """Start moto on `ip_address` on a free port; yield its endpoint URL; stop it on exit.
    `start_in` runs moto's start, which starts its serving thread: a thread started in another
    network namespace serves there (`testkit.netns.Host.call`). `tls`: (certificate, key) PEM
    files to serve https with."""
    server = (
        ThreadedMotoServer(ip_address=ip_address, port=0, verbose=False)
        if tls is None
        else _HttpsMotoServer(ip_address, *tls)
    )
    start_in(server.start)
    try:
        host, port = server.get_host_and_port()
        yield f"{'http' if tls is None else 'https'}://{host}:{port}"
    finally:
        server.stop()
        wsgi = server._server  # stop() shuts the loop down but leaves the socket open
        if wsgi is not None:
            wsgi.server_close()


_session: AioSession | None = None


def shared_session() -> AioSession:
    """One botocore session for every test client: loading its models once saves ~0.3 s each."""
    global _session
    if _session is None:
        _session = AioSession()
    return _session


def s3_store(endpoint_url: str, bucket: str, **options: Any) -> S3ObjectStore:
    """An S3ObjectStore on the test server with dummy credentials; `options` go to it as is."""
    return S3ObjectStore(
        bucket, endpoint_url=endpoint_url, session=shared_session(), **S3_CREDENTIALS, **options
    )


@contextlib.asynccontextmanager
async def s3_client(endpoint_url: str, **options: Any) -> Any:
    """A raw aiobotocore client, for test set-up and for looking behind a store's back."""
    async with shared_session().create_client(
        "s3",
        **options,
        endpoint_url=endpoint_url,
        region_name=REGION,
        aws_access_key_id=S3_CREDENTIALS["aws_access_key_id"],
        aws_secret_access_key=S3_CREDENTIALS["aws_secret_access_key"],
    ) as client:
        yield client


async def create_bucket(endpoint_url: str, name: str | None = None, **options: Any) -> str:
    """Create a bucket (a fresh uniquely named one by default) and return its name; `options`
    go to the client (`verify=CA_FILE` for https)."""
    bucket = name if name is not None else f"test-{uuid.uuid4().hex[:16]}"
    async with s3_client(endpoint_url, **options) as client:
        await client.create_bucket(Bucket=bucket)
    return bucket
