"""Fixtures shared by the storage tests: one moto S3 server per session, a bucket per test."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from testkit.s3server import create_bucket, running_s3_server


@pytest.fixture(scope="session")
def s3_endpoint() -> Iterator[str]:
    with running_s3_server() as endpoint_url:
        yield endpoint_url


@pytest.fixture
async def s3_bucket(s3_endpoint: str) -> str:
    return await create_bucket(s3_endpoint)
