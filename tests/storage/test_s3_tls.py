"""S3 over https: the store verifies the endpoint's certificate against its CA bundle.

Integration test against moto's S3 server serving https with a certificate of a test CA (made
by `openssl`): with that CA as `ca_bundle` objects go in and out; with another CA, or botocore's
own bundle, the store refuses the endpoint with a StorageError, and nothing is written.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from diskless.errors import ObjectNotFoundError, StorageError
from testkit.s3server import create_bucket, running_s3_server, s3_store
from testkit.tls import Certs


@pytest.fixture(scope="module")
def https_endpoint(certs: Certs) -> Iterator[str]:
    with running_s3_server(tls=(str(certs.server_cert), str(certs.server_key))) as endpoint:
        yield endpoint


async def test_objects_go_through_https_verified_by_the_ca_bundle(
    https_endpoint: str, certs: Certs
) -> None:
    assert https_endpoint.startswith("https://127.0.0.1:")
    bucket = await create_bucket(https_endpoint, verify=str(certs.ca))
    async with s3_store(https_endpoint, bucket, ca_bundle=str(certs.ca)) as store:
        await store.put("a/b", b"over tls")
        assert await store.get("a/b") == b"over tls"


async def test_an_endpoint_whose_certificate_does_not_chain_to_the_bundle_is_refused(
    https_endpoint: str, certs: Certs
) -> None:
    bucket = await create_bucket(https_endpoint, verify=str(certs.ca))
    other_ca = certs.stranger_cert.parent / "other-ca.pem"
    for bundle in (str(other_ca), None):  # another CA; botocore's own bundle
        async with s3_store(https_endpoint, bucket, ca_bundle=bundle) as store:
            with pytest.raises(StorageError, match="CERTIFICATE_VERIFY_FAILED"):
                await store.put("refused", b"x")
    async with s3_store(https_endpoint, bucket, ca_bundle=str(certs.ca)) as store:
        with pytest.raises(ObjectNotFoundError):
            await store.get("refused")
