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
from moto.server import ThreadedMotoServer

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


@contextlib.contextmanager
def running_s3_server(
    ip_address: str = "127.0.0.1",
    start_in: Callable[[Callable[[], None]], object] = lambda start: start(),
) -> Iterator[str]:
    """Start moto on `ip_address` on a free port; yield its endpoint URL; stop it on exit.
    `start_in` runs moto's start, which starts its serving thread: a thread started in another
    network namespace serves there (`tests._netns.Host.call`)."""
    server = ThreadedMotoServer(ip_address=ip_address, port=0, verbose=False)
    start_in(server.start)
    try:
        host, port = server.get_host_and_port()
        yield f"http://{host}:{port}"
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
async def s3_client(endpoint_url: str) -> Any:
    """A raw aiobotocore client, for test set-up and for looking behind a store's back."""
    async with shared_session().create_client(
        "s3",
        endpoint_url=endpoint_url,
        region_name=REGION,
        aws_access_key_id=S3_CREDENTIALS["aws_access_key_id"],
        aws_secret_access_key=S3_CREDENTIALS["aws_secret_access_key"],
    ) as client:
        yield client


async def create_bucket(endpoint_url: str, name: str | None = None) -> str:
    """Create a bucket (a fresh uniquely named one by default) and return its name."""
    bucket = name if name is not None else f"test-{uuid.uuid4().hex[:16]}"
    async with s3_client(endpoint_url) as client:
        await client.create_bucket(Bucket=bucket)
    return bucket
