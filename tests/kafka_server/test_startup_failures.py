"""A start that fails is one line naming what is wrong, in the chosen log format, and an exit
status of its own; a coordinator that is down at start is waited for.

Integration tests: `python -m diskless.kafka_server` in a process of its own, against a real port
in use, a PostgreSQL server of this module's own (a role with a password, one without privileges,
no TLS), moto's S3 server (a bucket that does not exist, https with a certificate of a CA the
broker does not trust) and a real objects directory. Each runs at `--log-level WARNING`, so the
failure's lines are all of stderr.
"""

from __future__ import annotations

import contextlib
import json
import os
import pwd
import re
import shutil
import socket
import ssl
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Final

import asyncpg
import pytest
from botocore.exceptions import ClientError, NoCredentialsError

from diskless.coordinator._backends.postgres_connect import opening_error
from diskless.errors import CoordinatorUnavailableError
from diskless.kafka_server._server.process import startup
from diskless.storage._s3 import _translate as s3_translate
from testkit.metrics import http_get
from testkit.ports import free_port
from testkit.postgres import PostgresServer, bindir_or_skip
from testkit.processes import S3_ENV
from testkit.s3server import REGION, running_s3_server
from testkit.tls import make_certs

RUN_TIMEOUT_S: Final = 90.0
PASSWORD: Final = "right-password"
_TEXT_LINE: Final = re.compile(r"^\S+ \S+ (DEBUG|INFO|WARNING|ERROR|CRITICAL) (\S+) (.*)$")


def _argv(*arguments: str, log_format: str = "text") -> list[str]:
    return [
        sys.executable, "-m", "diskless.kafka_server",
        "--brokers", "1", "--log-level", "WARNING", "--log-format", log_format,
        *arguments,
    ]  # fmt: skip


def _run(*arguments: str, log_format: str = "text") -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        _argv(*arguments, log_format=log_format),
        capture_output=True,
        text=True,
        timeout=RUN_TIMEOUT_S,
        env={**os.environ, **S3_ENV},
    )


def _records(stderr: str, log_format: str) -> list[tuple[str, str]]:
    """(level, message) of every line of stderr, each a log record of the chosen format."""
    assert "Traceback" not in stderr, stderr
    records = []
    for line in stderr.splitlines():
        if log_format == "json":
            entry = json.loads(line)  # every line is a JSON object
            assert "exception" not in entry, line
            records.append((entry["level"], entry["message"]))
        else:
            match = _TEXT_LINE.match(line)
            assert match is not None, f"not a log line: {line!r}"
            records.append((match[1], match[3]))
    return records


def _failure(
    result: subprocess.CompletedProcess[str], status: int, log_format: str = "text"
) -> str:
    """The failure's one line (the only line the process wrote) once it exited with
    `status`."""
    records = _records(result.stderr, log_format)
    assert result.returncode == status, result.stderr
    assert [level for level, _ in records] == ["ERROR"], result.stderr
    assert "bootstrap.servers" not in result.stdout
    message = records[0][1]
    assert message.startswith("cannot start: "), message
    return message


# --- a port in use ----------------------------------------------------------------------------
@pytest.mark.parametrize("log_format", ["text", "json"])
def test_a_port_in_use_is_one_line(tmp_path: Path, log_format: str) -> None:
    port = free_port()
    with socket.create_server(("127.0.0.1", port)):
        result = _run(
            "--data-dir", str(tmp_path / "data"), "--base-port", str(port), log_format=log_format
        )
    line = _failure(result, startup.EXIT_ADDRESS_IN_USE, log_format)
    assert "address in use" in line and str(port) in line, line


# --- the object store -------------------------------------------------------------------------
def test_an_objects_directory_that_cannot_be_written_is_one_line(tmp_path: Path) -> None:
    """The objects directory replaced by a file: nothing can be created under it, even by
    root (whom permission bits do not stop)."""
    data = tmp_path / "data"
    data.mkdir()
    (data / "objects").write_text("not a directory")
    line = _failure(_run("--data-dir", str(data)), startup.EXIT_STORE_NOT_WRITABLE)
    assert "the objects directory is not writable" in line, line


@pytest.fixture(scope="module")
def s3_endpoint() -> Iterator[str]:
    with running_s3_server() as endpoint:
        yield endpoint


def test_a_missing_bucket_is_one_line(tmp_path: Path, s3_endpoint: str) -> None:
    result = _run(
        "--data-dir", str(tmp_path / "data"),
        "--s3-endpoint", s3_endpoint, "--bucket", "no-such-bucket", "--region", REGION,
        log_format="json",
    )  # fmt: skip
    line = _failure(result, startup.EXIT_STORE_BUCKET_MISSING, "json")
    assert "the S3 bucket does not exist" in line and "NoSuchBucket" in line, line


def test_an_s3_certificate_that_does_not_verify_is_one_line(tmp_path: Path) -> None:
    certs = make_certs(tmp_path / "certs")
    with running_s3_server(tls=(str(certs.server_cert), str(certs.server_key))) as endpoint:
        result = _run(
            "--data-dir", str(tmp_path / "data"),
            "--s3-endpoint", endpoint, "--bucket", "any-bucket", "--region", REGION,
        )  # fmt: skip
    line = _failure(result, startup.EXIT_STORE_TLS)
    assert "certificate verify failed" in line, line


# --- PostgreSQL -------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def postgres() -> Iterator[PostgresServer]:
    """A server of this module's own: `pwuser` and `nopriv` log in with a password (the other
    roles are trusted), `nopriv` owns nothing and may create nothing in database `np`."""
    server = PostgresServer(bindir_or_skip())
    try:
        hba = server.data / "pg_hba.conf"
        rules = "".join(
            f"host all {role} 127.0.0.1/32 scram-sha-256\n" for role in ("pwuser", "nopriv")
        )
        hba.write_text(rules + hba.read_text())
        server.sql(f"CREATE ROLE pwuser LOGIN PASSWORD '{PASSWORD}'")
        server.sql(f"CREATE ROLE nopriv LOGIN PASSWORD '{PASSWORD}'")
        server.sql("CREATE DATABASE np")
        server.sql("REVOKE CREATE ON SCHEMA public FROM PUBLIC", database="np")
        server.sql("SELECT pg_reload_conf()")
        yield server
    finally:
        server.close()


def _url(server: PostgresServer, user: str, password: str, database: str = "np") -> str:
    return f"postgresql://{user}:{password}@127.0.0.1:{server.port}/{database}"


def test_a_wrong_postgres_password_is_one_line(tmp_path: Path, postgres: PostgresServer) -> None:
    result = _run(
        "--data-dir", str(tmp_path / "data"),
        "--coordinator", _url(postgres, "pwuser", "wrong-password"),
        log_format="json",
    )  # fmt: skip
    line = _failure(result, startup.EXIT_COORDINATOR_AUTHENTICATION, "json")
    assert "the coordinator refused the credentials" in line, line
    assert 'password authentication failed for user "pwuser"' in line, line
    assert "wrong-password" not in result.stderr


def test_a_missing_postgres_privilege_is_one_line(tmp_path: Path, postgres: PostgresServer) -> None:
    result = _run(
        "--data-dir", str(tmp_path / "data"), "--coordinator", _url(postgres, "nopriv", PASSWORD)
    )
    line = _failure(result, startup.EXIT_COORDINATOR_PRIVILEGE)
    assert "the coordinator's role lacks a privilege" in line, line
    assert "permission denied for schema public" in line, line


def test_postgres_tls_refused_is_one_line(tmp_path: Path, postgres: PostgresServer) -> None:
    """`sslmode=require` to a server without TLS."""
    url = _url(postgres, "pwuser", PASSWORD) + "?sslmode=require"
    line = _failure(
        _run("--data-dir", str(tmp_path / "data"), "--coordinator", url),
        startup.EXIT_COORDINATOR_TLS,
    )
    assert "TLS to the coordinator failed" in line, line


def test_a_postgres_certificate_that_does_not_verify_is_one_line(tmp_path: Path) -> None:
    """A server with TLS, whose certificate another CA signed than the one the URL trusts."""
    certs = make_certs(tmp_path / "certs")
    server = PostgresServer(bindir_or_skip())
    try:
        for name, source in (("server.crt", certs.server_cert), ("server.key", certs.server_key)):
            target = server.root / name
            shutil.copyfile(source, target)
            target.chmod(0o600)
            if os.geteuid() == 0:  # the server runs as another user, who must own its key
                owner = pwd.getpwnam("nobody")
                os.chown(target, owner.pw_uid, owner.pw_gid)
        server.sql(f"ALTER SYSTEM SET ssl_cert_file = '{server.root / 'server.crt'}'")
        server.sql(f"ALTER SYSTEM SET ssl_key_file = '{server.root / 'server.key'}'")
        server.sql("ALTER SYSTEM SET ssl = on")
        server.sql("SELECT pg_reload_conf()")
        other_ca = certs.stranger_cert.parent / "other-ca.pem"
        url = f"{server.dsn('postgres')}?sslmode=verify-full&sslrootcert={other_ca}"
        result = _run("--data-dir", str(tmp_path / "data"), "--coordinator", url, log_format="json")
    finally:
        server.close()
    line = _failure(result, startup.EXIT_COORDINATOR_TLS, "json")
    assert "TLS to the coordinator failed" in line and "certificate verify failed" in line, line


def test_a_postgres_server_that_does_not_answer_is_a_timeout(tmp_path: Path) -> None:
    """A listening socket nobody accepts from: the connection is made (by the kernel) and the
    server never speaks. With no wait at start, the first timeout stops it."""
    port = free_port()
    with socket.create_server(("127.0.0.1", port), backlog=8):
        result = _run(
            "--data-dir", str(tmp_path / "data"),
            "--coordinator", f"postgresql://u@127.0.0.1:{port}/db",
            "--initial-broker-registration-timeout-ms", "0",
        )  # fmt: skip
    line = _failure(result, startup.EXIT_COORDINATOR_TIMEOUT)
    assert "the coordinator timed out: no answer within 5 s" in line, line


def test_postgres_down_is_waited_for_then_given_up_in_two_lines(tmp_path: Path) -> None:
    port = free_port()  # nothing listens there
    result = _run(
        "--data-dir", str(tmp_path / "data"),
        "--coordinator", f"postgresql://u@127.0.0.1:{port}/db",
        "--initial-broker-registration-timeout-ms", "1500",
        log_format="json",
    )  # fmt: skip
    records = _records(result.stderr, "json")
    assert result.returncode == startup.EXIT_COORDINATOR_UNREACHABLE, result.stderr
    assert [level for level, _ in records] == ["WARNING", "ERROR"], result.stderr
    assert records[0][1].startswith("waiting up to 1.5 s for the coordinator: "), records
    assert records[1][1].startswith("cannot start: the coordinator is unreachable: "), records
    assert "initial.broker.registration.timeout.ms=1500" in records[1][1], records


def test_postgres_down_at_start_is_waited_for_and_readiness_says_so(tmp_path: Path) -> None:
    """The server is stopped when the broker starts, and started a few seconds later: the
    broker waits (one line), `/readyz` answers 503 with the reason meanwhile, and once the
    server is back the broker starts (one line) and is ready."""
    server = PostgresServer(bindir_or_skip())
    metrics = f"127.0.0.1:{free_port()}"
    log = tmp_path / "broker.log"
    try:
        server.stop()
        with log.open("w") as stderr:
            process = subprocess.Popen(
                _argv(
                    "--data-dir", str(tmp_path / "data"),
                    "--coordinator", server.dsn("postgres"),
                    "--metrics-address", metrics,
                ),
                stdout=subprocess.PIPE, stderr=stderr, text=True,
                env={**os.environ, "PYTHONUNBUFFERED": "1"},
            )  # fmt: skip
        try:
            assert process.stdout is not None
            assert process.stdout.readline().startswith("metrics=")
            status, body = _until(lambda: http_get(f"http://{metrics}/readyz"), "waiting")
            assert status == 503, body
            assert body.startswith("not ready: waiting for the coordinator: "), body
            assert body.count("\n") == 1
            server.start()
            for line in process.stdout:
                if line.startswith("bootstrap.servers="):
                    break
            assert http_get(f"http://{metrics}/readyz") == (200, "ready\n")
        finally:
            process.terminate()
            process.wait(30)
            if process.stdout is not None:
                process.stdout.close()
    finally:
        server.close()
    records = _records(log.read_text(), "text")
    assert [level for level, _ in records] == ["WARNING", "WARNING"], records
    assert records[0][1].startswith("waiting up to 60.0 s for the coordinator: "), records
    assert re.fullmatch(r"coordinator reached after [\d.]+ s", records[1][1]), records


def _until(
    ask: Callable[[], tuple[int, str]], expected: str, timeout_s: float = 30.0
) -> tuple[int, str]:
    """`ask()`'s answer once its body holds `expected`."""
    deadline = time.monotonic() + timeout_s
    while True:
        with contextlib.suppress(OSError):
            status, body = ask()
            if expected in body:
                return status, body
        assert time.monotonic() < deadline, f"never saw {expected!r}"
        time.sleep(0.1)


# --- the kinds, unit --------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("error", "status"),
    [
        (asyncpg.InvalidPasswordError("password authentication failed"), 11),
        (asyncpg.InvalidAuthorizationSpecificationError('role "x" does not exist'), 11),
        (asyncpg.InsufficientPrivilegeError("permission denied for schema public"), 12),
        (ssl.SSLCertVerificationError("certificate verify failed"), 13),
        (ConnectionError("PostgreSQL server at 'h:5432' rejected SSL upgrade"), 13),
        (TimeoutError(), 14),
        (ConnectionRefusedError(111, "Connect call failed"), 10),
        (asyncpg.UndefinedTableError("relation does not exist"), 10),
    ],
    ids=lambda value: type(value).__name__ if isinstance(value, BaseException) else str(value),
)
def test_postgres_opening_errors_are_named(error: BaseException, status: int) -> None:
    translated = opening_error(error, 5.0)
    assert isinstance(translated, CoordinatorUnavailableError)  # retriable while running
    assert startup.failure_of(translated).status == status


@pytest.mark.parametrize(
    ("code", "status"),
    [
        ("NoSuchBucket", 20),
        ("InvalidAccessKeyId", 21),
        ("SignatureDoesNotMatch", 21),
        ("AccessDenied", 21),
        ("InternalError", 24),
    ],
)
def test_s3_errors_are_named(code: str, status: int) -> None:
    error = ClientError({"Error": {"Code": code}, "ResponseMetadata": {}}, "PutObject")
    translated = s3_translate(error, "put", "wal/k")
    assert translated.retriable  # a running broker keeps retrying
    assert startup.failure_of(translated).status == status
    assert code in str(translated)


def test_no_s3_credentials_is_named() -> None:
    assert startup.failure_of(s3_translate(NoCredentialsError(), "put", "k")).status == 21
