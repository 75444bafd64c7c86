"""An S3 (or S3-compatible) object store on aiobotocore."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Iterator, Sequence
from contextlib import AsyncExitStack
from types import TracebackType
from typing import Any

import aiohttp
from aiobotocore.session import AioSession
from botocore.config import Config
from botocore.exceptions import (
    BotoCoreError,
    ClientError,
    ConnectTimeoutError,
    InvalidRegionError,
    NoCredentialsError,
    ParamValidationError,
    ReadTimeoutError,
)
from botocore.exceptions import SSLError as BotocoreSSLError
from botocore.handlers import validate_bucket_name
from botocore.utils import is_valid_endpoint_url, is_valid_ipv6_endpoint_url, validate_region_name

from diskless._availability import log_failure
from diskless.errors import (
    InvalidRangeError,
    ObjectNotFoundError,
    StorageBucketMissingError,
    StorageCredentialsError,
    StorageError,
    StorageTimeoutError,
    StorageTlsError,
)
from diskless.storage._base import (
    DELETE_KEYS_MAX,
    LIST_PAGE_LIMIT_MAX,
    ListPage,
    ObjectInfo,
    ObjectStore,
)
from diskless.storage._keys import check_list_limit, check_range, validate_key, validate_prefix

logger = logging.getLogger(__name__)

MIB = 1024 * 1024
PART_BYTES_MIN = 5 * MIB  # S3 rejects smaller non-last parts of a multipart upload
PARTS_MAX = 10_000  # S3's limit on parts per multipart upload

_NOT_FOUND_CODES = frozenset({"NoSuchKey", "404", "NotFound"})
_TIMEOUT_CODES = frozenset({"RequestTimeout", "RequestTimeoutException"})
_CREDENTIALS_CODES = frozenset(
    {
        "AccessDenied",
        "AllAccessDisabled",
        "ExpiredToken",
        "InvalidAccessKeyId",
        "InvalidToken",
        "SignatureDoesNotMatch",
    }
)
_TRANSLATED = (BotoCoreError, ClientError, aiohttp.ClientError, OSError, TimeoutError)


def _translate(exc: BaseException, operation: str, key: str) -> StorageError:
    """Map a botocore/aiohttp error to ours; messages name the operation, never credentials."""
    if isinstance(exc, ClientError):
        error = exc.response.get("Error", {})
        code = str(error.get("Code", ""))
        status = exc.response.get("ResponseMetadata", {}).get("HTTPStatusCode")
        message = f"S3 {operation} {key!r} failed: {code or 'error'} (HTTP {status})"
        if code in _NOT_FOUND_CODES:
            return ObjectNotFoundError(f"no object {key!r}")
        if code == "InvalidRange" or status == 416:
            return InvalidRangeError(message)
        if code in _TIMEOUT_CODES:
            return StorageTimeoutError(message)
        if code == "NoSuchBucket":
            return StorageBucketMissingError(message)
        if code in _CREDENTIALS_CODES:
            return StorageCredentialsError(message)
        return StorageError(message)
    if isinstance(exc, NoCredentialsError):
        return StorageCredentialsError(f"S3 {operation} {key!r} failed: no credentials found")
    if isinstance(exc, BotocoreSSLError | aiohttp.ClientSSLError):
        return StorageTlsError(f"S3 {operation} {key!r} failed: {' '.join(str(exc).split())}")
    if isinstance(
        exc, ReadTimeoutError | ConnectTimeoutError | TimeoutError | aiohttp.ServerTimeoutError
    ):
        return StorageTimeoutError(f"S3 {operation} {key!r} timed out: {type(exc).__name__}")
    return StorageError(f"S3 {operation} {key!r} failed: {type(exc).__name__}: {exc}")


class S3ObjectStore(ObjectStore):
    """Objects in one bucket under an optional key prefix.

    The client is created on first use (under a lock, so concurrent first calls share one) and
    released by `close()` or by leaving `async with`; a closed store raises RuntimeError.
    Credentials come from the arguments, else botocore's usual chain (env, profile, IMDS).
    Stores built from one `session` share its loaded service models, which makes each client
    cheap (a fresh session costs a few hundred ms of JSON loading).
    botocore's own retries are off: `RetryingObjectStore` owns the retry policy so that a
    simulation can see and replay it. Large objects go up as concurrent multipart parts.
    """

    def __init__(
        self,
        bucket: str,
        prefix: str = "",
        *,
        endpoint_url: str | None = None,
        region: str | None = None,
        aws_access_key_id: str | None = None,
        aws_secret_access_key: str | None = None,
        aws_session_token: str | None = None,
        multipart_threshold: int = 8 * MIB,
        multipart_part_size: int = 8 * MIB,
        multipart_concurrency: int = 4,
        max_pool_connections: int = 32,
        connect_timeout_s: float = 5.0,
        read_timeout_s: float = 30.0,
        session: AioSession | None = None,
        ca_bundle: str | None = None,
    ) -> None:
        """`ca_bundle`: a PEM file of the CA certificates an https endpoint's certificate must
        chain to (botocore's `verify`; default: its own bundle, or `AWS_CA_BUNDLE`)."""
        self.check_location(bucket=bucket, prefix=prefix, endpoint_url=endpoint_url, region=region)
        if multipart_part_size < PART_BYTES_MIN:
            raise ValueError(f"multipart_part_size must be at least {PART_BYTES_MIN} bytes")
        if multipart_threshold < 1 or multipart_concurrency < 1 or max_pool_connections < 1:
            raise ValueError("multipart_threshold, concurrency and pool size must be positive")
        self._bucket = bucket
        self._prefix = prefix
        self._multipart_threshold = multipart_threshold
        self._part_size = multipart_part_size
        self._part_concurrency = multipart_concurrency
        self._client_kwargs: dict[str, Any] = {
            "endpoint_url": endpoint_url,
            "region_name": region,
            "aws_access_key_id": aws_access_key_id,
            "aws_secret_access_key": aws_secret_access_key,
            "aws_session_token": aws_session_token,
            **({"verify": ca_bundle} if ca_bundle is not None else {}),
            "config": Config(
                max_pool_connections=max_pool_connections,
                connect_timeout=connect_timeout_s,
                read_timeout=read_timeout_s,
                retries={"total_max_attempts": 1, "mode": "standard"},
                # Checksums only where S3 requires them: S3-compatible stores vary in support.
                request_checksum_calculation="when_required",
                response_checksum_validation="when_required",
            ),
        }
        self._session = session if session is not None else AioSession()
        self._client: Any = None
        self._exit_stack: AsyncExitStack | None = None
        self._lock = asyncio.Lock()
        self._closed = False

    @staticmethod
    def check_location(
        *,
        bucket: str | None = None,
        prefix: str = "",
        endpoint_url: str | None = None,
        region: str | None = None,
    ) -> None:
        """ValueError unless the given parts of a location are well formed, by botocore's own
        rules (which it applies only at the first request, or the first client): checked when
        a store is created, and by a command line for each of its flags."""
        if bucket is not None:
            if not bucket:
                raise ValueError("bucket is required")
            try:
                validate_bucket_name({"Bucket": bucket})
            except ParamValidationError:
                raise ValueError(f"invalid bucket name {bucket!r}") from None
        if prefix:
            validate_prefix(prefix)
        if endpoint_url is not None and not (
            is_valid_endpoint_url(endpoint_url) or is_valid_ipv6_endpoint_url(endpoint_url)
        ):
            raise ValueError(
                f"invalid endpoint URL {endpoint_url!r}: expected http(s)://HOST[:PORT]"
            )
        try:
            validate_region_name(region)
        except InvalidRegionError:
            raise ValueError(f"invalid region name {region!r}") from None

    @contextlib.contextmanager
    def _boundary(self, operation: str, key: str) -> Iterator[None]:
        """Translate third-party errors raised inside the block, and report the request's
        outcome to the availability; let ours and cancellation pass."""
        try:
            yield
        except _TRANSLATED as exc:
            error = _translate(exc, operation, key)
            self.availability.report(error)
            raise error from exc
        self.availability.answered()

    def __repr__(self) -> str:
        return f"S3ObjectStore(bucket={self._bucket!r}, prefix={self._prefix!r})"

    async def __aenter__(self) -> S3ObjectStore:
        await self.start()
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        await self.close()

    async def start(self) -> None:
        """Create the client now rather than on first use (fail fast on bad configuration)."""
        await self._get_client()

    async def close(self) -> None:
        async with self._lock:
            self._closed = True
            stack, self._exit_stack, self._client = self._exit_stack, None, None
            if stack is not None:
                with self._boundary("close", ""):
                    await stack.aclose()

    async def put(self, key: str, data: bytes | bytearray | memoryview) -> None:
        validate_key(key)
        view = memoryview(data).cast("B")
        client = await self._get_client()
        if view.nbytes < self._multipart_threshold:
            self._counters.put(view.nbytes)
            body = data if isinstance(data, bytes) else view.tobytes()
            with self._boundary("put", key):
                await client.put_object(Bucket=self._bucket, Key=self._prefix + key, Body=body)
        else:
            await self._put_multipart(client, key, view)

    async def get(self, key: str) -> bytes:
        validate_key(key)
        client = await self._get_client()
        self._counters.get()
        with self._boundary("get", key):
            response = await client.get_object(Bucket=self._bucket, Key=self._prefix + key)
            async with response["Body"] as stream:
                blob: bytes = await stream.read()
        self._counters.bytes_read(len(blob))
        return blob

    async def get_range(self, key: str, start: int, end: int) -> bytes:
        validate_key(key)
        check_range(key, start, end)
        client = await self._get_client()
        self._counters.ranged_get()
        with self._boundary("get_range", key):
            response = await client.get_object(
                Bucket=self._bucket, Key=self._prefix + key, Range=f"bytes={start}-{end - 1}"
            )
            async with response["Body"] as stream:
                chunk: bytes = await stream.read()
        self._counters.bytes_read(len(chunk))
        # S3 answers 416 only when start is past the end; an end past it is silently truncated.
        if len(chunk) != end - start:
            raise InvalidRangeError(
                f"range [{start}, {end}) beyond the end of {key!r} ({start + len(chunk)} bytes)"
            )
        return chunk

    async def list_page(
        self,
        prefix: str,
        token: str | None = None,
        limit: int = 1000,
        start_after: str | None = None,
    ) -> ListPage:
        validate_prefix(prefix)
        check_list_limit(limit, LIST_PAGE_LIMIT_MAX)
        client = await self._get_client()
        request: dict[str, Any] = {
            "Bucket": self._bucket,
            "Prefix": self._prefix + prefix,
            "MaxKeys": limit,
        }
        if token is not None:
            request["ContinuationToken"] = token
        if start_after is not None:
            request["StartAfter"] = self._prefix + start_after
        self._counters.list()
        with self._boundary("list", prefix):
            response = await client.list_objects_v2(**request)
        strip = len(self._prefix)
        objects = [
            ObjectInfo(
                key=item["Key"][strip:],
                size=int(item["Size"]),
                last_modified_ms=int(item["LastModified"].timestamp() * 1000),
            )
            for item in response.get("Contents", [])
        ]
        next_token = response.get("NextContinuationToken") if response.get("IsTruncated") else None
        return ListPage(objects=objects, next_token=next_token)

    async def delete_many(self, keys: Sequence[str]) -> list[str]:
        for key in keys:
            validate_key(key)
        unique = list(dict.fromkeys(keys))
        if not unique:
            return []
        client = await self._get_client()
        gone: set[str] = set()
        strip = len(self._prefix)
        for first in range(0, len(unique), DELETE_KEYS_MAX):
            chunk = unique[first : first + DELETE_KEYS_MAX]
            self._counters.delete(len(chunk))
            with self._boundary("delete", chunk[0]):
                response = await client.delete_objects(
                    Bucket=self._bucket,
                    Delete={"Objects": [{"Key": self._prefix + k} for k in chunk], "Quiet": False},
                )
            gone.update(item["Key"][strip:] for item in response.get("Deleted", []))
            for error in response.get("Errors", []):
                logger.warning(
                    "S3 delete of %r failed: %s", error.get("Key", "")[strip:], error.get("Code")
                )
        return [key for key in unique if key in gone]

    async def _get_client(self) -> Any:
        client = self._client
        if client is not None:
            return client
        async with self._lock:
            if self._closed:
                raise RuntimeError(f"{self!r} is closed")
            if self._client is None:
                stack = AsyncExitStack()
                with self._boundary("connect", ""):
                    self._client = await stack.enter_async_context(
                        self._session.create_client("s3", **self._client_kwargs)
                    )
                self._exit_stack = stack
            return self._client

    async def _put_multipart(self, client: Any, key: str, view: memoryview) -> None:
        size = view.nbytes
        part_size = max(self._part_size, -(-size // PARTS_MAX))
        full_key = self._prefix + key
        self._counters.put(size)
        with self._boundary("put", key):
            created = await client.create_multipart_upload(Bucket=self._bucket, Key=full_key)
        upload_id = created["UploadId"]
        slots = asyncio.Semaphore(self._part_concurrency)

        async def upload_part(number: int, offset: int) -> dict[str, Any]:
            async with slots:
                body = view[offset : offset + part_size].tobytes()  # one copy per in-flight part
                self._counters.put_request()
                with self._boundary("put", key):
                    part = await client.upload_part(
                        Bucket=self._bucket,
                        Key=full_key,
                        UploadId=upload_id,
                        PartNumber=number,
                        Body=body,
                    )
                return {"PartNumber": number, "ETag": part["ETag"]}

        offsets = range(0, size, part_size)
        tasks = [asyncio.create_task(upload_part(n, o)) for n, o in enumerate(offsets, start=1)]
        try:
            try:
                parts = await asyncio.gather(*tasks)
            except BaseException:
                for task in tasks:
                    task.cancel()
                await asyncio.gather(*tasks, return_exceptions=True)
                raise
            assert [p["PartNumber"] for p in parts] == list(range(1, len(offsets) + 1))
            self._counters.put_request()
            with self._boundary("put", key):
                await client.complete_multipart_upload(
                    Bucket=self._bucket,
                    Key=full_key,
                    UploadId=upload_id,
                    MultipartUpload={"Parts": parts},
                )
        except BaseException:
            await self._abort_multipart(client, key, full_key, upload_id)
            raise

    async def _abort_multipart(self, client: Any, key: str, full_key: str, upload_id: str) -> None:
        """Best effort: an unaborted upload keeps its parts, and their cost, until lifecycle GC."""
        try:
            with self._boundary("abort", key):
                await client.abort_multipart_upload(
                    Bucket=self._bucket, Key=full_key, UploadId=upload_id
                )
        except StorageError as error:
            log_failure(logger, error, "could not abort multipart upload of %r", key)
