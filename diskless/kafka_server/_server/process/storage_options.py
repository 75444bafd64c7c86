"""Where a process's cluster keeps its objects and its batch metadata, as the command line says:
`--data-dir` (embedded: a local object directory and a SQLite coordinator file), or
`--coordinator` (PostgreSQL) with `--s3-endpoint` (or `--region`) and `--bucket` (S3).

Every command that opens a diskless cluster's storage (the broker, the mirror) takes these
flags from here, so that they are spelled, checked and opened one way.
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Final

from diskless._limits import COMMIT_AGE_MAX_MS_DEFAULT, CommitBounds
from diskless._object_keys import DEFAULT_OBJECT_PREFIX
from diskless.coordinator import BatchCoordinator, PostgresBatchCoordinator, SqliteBatchCoordinator
from diskless.kafka_server._server.process import cli, startup
from diskless.storage import ObjectStore

COMMIT_BOUNDS: Final = CommitBounds(DEFAULT_OBJECT_PREFIX, COMMIT_AGE_MAX_MS_DEFAULT)
"""The coordinator's, which the brokers' settings are checked against before it is opened."""


def add_storage_arguments(parser: argparse.ArgumentParser) -> None:
    """The storage flags, on `parser`."""
    parser.add_argument(
        "--data-dir",
        type=Path,
        default=None,
        help="objects and SQLite coordinator file of an embedded cluster (default: the first of"
        " log.dirs; needed unless both --coordinator and --bucket are given)",
    )
    parser.add_argument(
        "--coordinator",
        type=cli.postgresql_url,
        default=None,
        metavar="postgresql://USER@HOST:PORT/DB",
        help="a PostgreSQL batch coordinator that processes on several hosts share; TLS with"
        " ?sslmode=verify-full&sslrootcert=CA.pem (libpq's parameters)",
    )
    parser.add_argument(
        "--s3-endpoint", type=cli.s3_endpoint, help="S3-compatible endpoint URL (objects in S3)"
    )
    parser.add_argument(
        "--bucket", type=cli.s3_bucket, help="S3 bucket (with --s3-endpoint, or --region for AWS)"
    )
    parser.add_argument(
        "--s3-prefix", type=cli.s3_prefix, default="", help="key prefix inside the bucket"
    )
    parser.add_argument("--region", type=cli.s3_region, help="S3 region")
    parser.add_argument(
        "--s3-ca-bundle",
        type=cli.readable_file,
        default=None,
        metavar="PEM",
        help="CA certificates an https --s3-endpoint's certificate must chain to",
    )


def check_storage_arguments(args: argparse.Namespace) -> None:
    """Every shared part has a place, and a data directory is one (`cli.UsageError`)."""
    cli.check_places(args)
    cli.check_data_dir(args.data_dir)


def open_store(args: argparse.Namespace) -> ObjectStore:
    if args.bucket is not None:
        from diskless.storage import S3ObjectStore  # only when S3 is asked for: see its package

        return S3ObjectStore(
            args.bucket,
            args.s3_prefix,
            endpoint_url=args.s3_endpoint,
            region=args.region,
            ca_bundle=args.s3_ca_bundle,
        )
    path: Path = args.data_dir / "objects"
    return startup.local_store(path)


def open_coordinator(args: argparse.Namespace) -> BatchCoordinator:
    age_max_ms, prefix = COMMIT_BOUNDS.commit_age_max_ms, COMMIT_BOUNDS.object_prefix
    if args.coordinator is not None:
        return PostgresBatchCoordinator(
            args.coordinator, commit_age_max_ms=age_max_ms, object_prefix=prefix
        )
    path: Path = args.data_dir / "coordinator.sqlite"
    return SqliteBatchCoordinator(path, commit_age_max_ms=age_max_ms, object_prefix=prefix)
