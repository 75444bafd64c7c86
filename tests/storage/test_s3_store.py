"""Integration: S3-only behaviour (multipart, prefixes, error translation) on moto's HTTP server."""

from __future__ import annotations

import asyncio
import random
from collections.abc import AsyncIterator
from typing import Any

import pytest

from diskless.errors import ObjectNotFoundError, StorageError, StorageTimeoutError
from diskless.storage import S3ObjectStore
from testkit.s3server import s3_client, s3_store

MIB = 1024 * 1024


@pytest.fixture
async def raw(s3_endpoint: str) -> AsyncIterator[Any]:
    async with s3_client(s3_endpoint) as client:
        yield client


async def test_large_objects_go_up_as_concurrent_multipart_parts(
    s3_endpoint: str, s3_bucket: str
) -> None:
    data = random.Random(1).randbytes(11 * MIB)
    async with s3_store(
        s3_endpoint, s3_bucket, multipart_threshold=5 * MIB, multipart_part_size=5 * MIB
    ) as store:
        await store.put("big", data)
        await store.put("small", b"x" * 100)
        stats = store.stats()
        assert await store.get("big") == data
    assert (stats.puts, stats.put_requests, stats.bytes_in) == (2, 1 + 3 + 1 + 1, len(data) + 100)


async def test_a_failed_part_aborts_the_upload(
    s3_endpoint: str, s3_bucket: str, raw: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    async with s3_store(
        s3_endpoint, s3_bucket, multipart_threshold=5 * MIB, multipart_part_size=5 * MIB
    ) as store:
        client = await store._get_client()
        real_upload_part = client.upload_part

        async def fail_part_two(**kwargs: Any) -> Any:
            if kwargs["PartNumber"] == 2:
                # A real endpoint's refusal: part two goes to an upload that does not exist.
                kwargs = {**kwargs, "UploadId": "no-such-upload"}
            return await real_upload_part(**kwargs)

        monkeypatch.setattr(client, "upload_part", fail_part_two)
        with pytest.raises(StorageError) as failure:
            await store.put("big", bytes(11 * MIB))
        assert type(failure.value) is StorageError
        with pytest.raises(ObjectNotFoundError):
            await store.get("big")
    uploads = await raw.list_multipart_uploads(Bucket=s3_bucket)
    assert uploads.get("Uploads", []) == []


async def test_store_prefix_isolates_keys(s3_endpoint: str, s3_bucket: str, raw: Any) -> None:
    await raw.put_object(Bucket=s3_bucket, Key="outside", Body=b"o")
    async with s3_store(s3_endpoint, s3_bucket, prefix="tenant/") as store:
        await store.put("a/b", b"1")
        assert [o.key for o in (await store.list_page("")).objects] == ["a/b"]
        assert [o.key for o in (await store.list_page("a/", start_after="a/a")).objects] == ["a/b"]
        assert await store.delete_many(["a/b"]) == ["a/b"]
        with pytest.raises(ObjectNotFoundError):
            await store.get("outside")
    listed = await raw.list_objects_v2(Bucket=s3_bucket)
    assert [item["Key"] for item in listed["Contents"]] == ["outside"]


async def test_a_missing_bucket_is_a_storage_error_not_a_missing_object(s3_endpoint: str) -> None:
    async with s3_store(s3_endpoint, "no-such-bucket") as store:
        with pytest.raises(StorageError) as failure:
            await store.get("k")
    assert not isinstance(failure.value, ObjectNotFoundError)
    assert "NoSuchBucket" in str(failure.value)


async def test_an_unreachable_endpoint_is_a_storage_error() -> None:
    server = await asyncio.start_server(lambda r, w: None, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    server.close()
    await server.wait_closed()
    async with s3_store(f"http://127.0.0.1:{port}", "b", connect_timeout_s=1.0) as store:
        with pytest.raises(StorageError) as failure:
            await store.put("k", b"v")
    assert "Could not connect" in str(failure.value)
    assert "testing" not in str(failure.value)  # no credential in messages


async def test_a_silent_endpoint_times_out_as_storage_timeout() -> None:
    hung: list[asyncio.StreamWriter] = []

    async def never_answer(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        hung.append(writer)

    server = await asyncio.start_server(never_answer, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    try:
        async with s3_store(f"http://127.0.0.1:{port}", "b", read_timeout_s=0.3) as store:
            with pytest.raises(StorageTimeoutError):
                await store.get("k")
    finally:
        for writer in hung:
            writer.close()
        server.close()
        await server.wait_closed()


async def test_the_client_is_created_once_and_unusable_after_close(
    s3_endpoint: str, s3_bucket: str
) -> None:
    store = s3_store(s3_endpoint, s3_bucket)
    await asyncio.gather(*(store.put(f"k{i}", b"v") for i in range(8)))
    assert store._client is not None
    await store.close()
    await store.close()  # idempotent
    with pytest.raises(RuntimeError, match="closed"):
        await store.get("k0")


def test_constructor_rejects_parts_s3_would_refuse() -> None:
    with pytest.raises(ValueError):
        S3ObjectStore("b", multipart_part_size=4 * MIB)
    with pytest.raises(ValueError):
        S3ObjectStore("")
    assert "secret" not in repr(S3ObjectStore("b", aws_secret_access_key="secret"))
