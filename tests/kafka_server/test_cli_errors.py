"""`python -m diskless.kafka_server` with a bad value: one line on stderr that names the flag (and
the allowed range of a number), exit status 2, never a traceback.

Integration test: a bad value of each flag runs the real module in a process of its own; every
case runs in process too, and the ranges are checked against the rules they come from (unit
tests of `cli`).
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

from diskless import BrokerConfig
from diskless.broker import check_commit_bounds
from diskless.kafka_server.__main__ import COMMIT_BOUNDS, _parser, main
from diskless.kafka_server._server.process.cli import (
    Setting,
    UsageError,
    admitted_range,
    build_checked,
)
from diskless.wal import WalConfig

BAD_VALUES = [
    # (flag named, arguments)
    ("--upload-timeout-ms", ["--upload-timeout-ms", "100000"]),
    ("--upload-timeout-ms", ["--upload-timeout-ms", "0"]),
    ("--upload-timeout-ms", ["--upload-timeout-ms", "soon"]),
    ("--upload-timeout-ms", ["--upload-timeout-ms", "60000", "--txn-lease-ttl-ms", "100000"]),
    ("--txn-lease-ttl-ms", ["--txn-lease-ttl-ms", "5"]),
    ("--txn-lease-ttl-ms", ["--txn-lease-ttl-ms", "99999999"]),
    ("--retention-check-interval-ms", ["--retention-check-interval-ms", "0"]),
    ("--consolidation-age-ms", ["--consolidation-age-ms", "-1"]),
    ("--consolidation-period-ms", ["--consolidation-period-ms", "0"]),
    ("--cleaner-dedupe-buffer-bytes", ["--cleaner-dedupe-buffer-bytes", "10"]),
    ("--brokers", ["--brokers", "0"]),
    ("--brokers", ["--brokers", "three"]),
    ("--brokers", ["--brokers"]),
    ("--racks", ["--racks", "0"]),
    ("--base-port", ["--base-port", "70000"]),
    ("--base-port", ["--base-port", "65535", "--brokers", "2"]),
    ("--base-port", ["--base-port", "-1"]),
    ("--topic", ["--topic", "events:0"]),
    ("--topic", ["--topic", "events"]),
    ("--topic", ["--topic", "bad/name:1"]),
    ("--topic", ["--topic", "events:100000000"]),
    ("--broker-ids", ["--broker-ids", "4,4"]),
    ("--broker-ids", ["--broker-ids", "99999999999"]),
    ("--coordinator", ["--coordinator", "mysql://h/db"]),
    ("--coordinator", ["--coordinator", "postgresql://u@h:port/db"]),
    ("--s3-endpoint", ["--s3-endpoint", "localhost:9000", "--bucket", "b"]),
    ("--s3-endpoint", ["--s3-endpoint", "http://localhost:9000"]),
    ("--bucket", ["--bucket", "b"]),
    ("--bucket", ["--bucket", "no spaces", "--region", "eu-west-1"]),
    ("--region", ["--region", "eu_west", "--bucket", "b"]),
    ("--s3-prefix", ["--s3-prefix", "a//b", "--bucket", "b", "--region", "eu-west-1"]),
    ("--s3-ca-bundle", ["--s3-ca-bundle", "/nonexistent/ca.pem"]),
    ("--config", ["--config", "/nonexistent/server.properties"]),
    ("--override", ["--override", "log.dirz=/var/kafka"]),
    ("--override", ["--override", "listeners=PLAINTEXT://0.0.0.0:9092"]),
    ("--override", ["--override", "no-value"]),
    ("--log-level", ["--log-level", "LOUD"]),
    ("--auto-create-partitions", ["--auto-create-partitions", "-1"]),
    ("--auto-create-partitions", ["--auto-create-partitions", "100000"]),
    ("--server-option", ["--server-option", "no_such_field=1"]),
    ("--server-option", ["--server-option", "fetch_wait_ms_max=often"]),
    ("--server-option", ["--server-option", "frame_bytes_max=200000000"]),
    ("--server-option", ["--server-option", "requests_inflight_max=0"]),
    ("--metrics-address", ["--metrics-address", "localhost"]),
    ("--metrics-address", ["--metrics-address", "127.0.0.1:99999"]),
    ("--log-format", ["--log-format", "xml"]),
    ("--server-option", ["--server-option", "acl_refresh_ms=0"]),
    ("--authorizer-class-name", ["--authorizer-class-name", "com.example.MyAuthorizer"]),
    ("--unknown-flag", ["--unknown-flag"]),
]
"""Each case runs with a data directory, so that only its own flags are bad."""


def _run(arguments: list[str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "diskless.kafka_server", *arguments],
        capture_output=True,
        text=True,
        timeout=60,
    )


def _check_refused(result: subprocess.CompletedProcess[str], flag: str) -> str:
    """The one line of a refusal of `flag`'s value."""
    assert "Traceback" not in result.stderr, result.stderr
    assert result.returncode == 2, result.stderr
    assert result.stdout == ""
    lines = result.stderr.splitlines()
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith("python -m diskless.kafka_server: error: "), lines[0]
    assert flag in lines[0], lines[0]
    return lines[0]


IN_A_PROCESS = [
    case
    for case in BAD_VALUES
    if case[1]
    in (
        ["--upload-timeout-ms", "100000"],  # a range found against the broker's own rules
        ["--brokers"],  # argparse's own refusal
        ["--coordinator", "mysql://h/db"],  # a value checked when the coordinator is built
        ["--server-option", "no_such_field=1"],  # a server option
        ["--unknown-flag"],
    )
]
"""One case of each kind of check runs the real module in a process of its own (a second
each); every case runs in process below."""


def _check_names_value(line: str, flag: str, arguments: list[str]) -> None:
    """The value is in the line, unless the line is about a flag missing beside it."""
    at = arguments.index(flag) + 1
    if at < len(arguments) and " needs " not in line:
        assert arguments[at] in line, line


@pytest.mark.parametrize(
    ("flag", "arguments"), IN_A_PROCESS, ids=[" ".join(a) for _, a in IN_A_PROCESS]
)
def test_a_bad_value_is_one_line_naming_its_flag(
    tmp_path: Path, flag: str, arguments: list[str]
) -> None:
    result = _run(["--data-dir", str(tmp_path / "data"), *arguments])
    _check_names_value(_check_refused(result, flag), flag, arguments)
    assert not (tmp_path / "data").exists()  # refused before anything was created


@pytest.mark.parametrize(
    ("flag", "arguments"), BAD_VALUES, ids=[" ".join(a) for _, a in BAD_VALUES]
)
def test_every_bad_value_is_refused_in_one_line_before_anything_starts(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], flag: str, arguments: list[str]
) -> None:
    """Unit: the same checks in process, for every case (a process each costs a second)."""
    line = _refusal(["--data-dir", str(tmp_path / "data"), *arguments], capsys)
    assert line.startswith("python -m diskless.kafka_server: error: "), line
    assert flag in line, line
    _check_names_value(line, flag, arguments)
    assert not (tmp_path / "data").exists()


@pytest.mark.parametrize(
    ("flag", "arguments", "data_dir"),
    [
        ("--data-dir", [], None),
        ("--data-dir", ["--coordinator", "postgresql://u@h/db"], None),
        ("--data-dir", [], "a-file"),
    ],
    ids=["missing", "missing-with-coordinator", "a-file"],
)
def test_a_missing_or_unusable_data_dir_is_one_line(
    tmp_path: Path, flag: str, arguments: list[str], data_dir: str | None
) -> None:
    if data_dir is not None:
        (tmp_path / data_dir).write_text("")
        arguments = [*arguments, "--data-dir", str(tmp_path / data_dir)]
    _check_refused(_run(arguments), flag)


def _refusal(argv: list[str], capsys: pytest.CaptureFixture[str]) -> str:
    with pytest.raises(SystemExit) as exit_info:
        main(argv)
    assert exit_info.value.code == 2
    (line,) = capsys.readouterr().err.splitlines()
    return line


def _allowed(line: str) -> tuple[int, int]:
    match = re.search(r"allowed range (-?\d+)\.\.(-?\d+)", line)
    assert match is not None, line
    return int(match[1]), int(match[2])


def _broker_fits(upload_timeout_ms: int) -> bool:
    try:
        config = BrokerConfig(wal=WalConfig(upload_timeout_ms=upload_timeout_ms))
        check_commit_bounds(config, COMMIT_BOUNDS)
    except ValueError:
        return False
    return True


def test_the_upload_timeout_range_is_what_a_broker_on_the_coordinator_admits(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Its ceiling is where the WAL's commit budget reaches the coordinator's commit-age bound:
    the broker's own check admits it and refuses one more."""
    line = _refusal(["--data-dir", str(tmp_path), "--upload-timeout-ms", "1000000"], capsys)
    lowest, highest = _allowed(line)
    assert _broker_fits(lowest) and not _broker_fits(lowest - 1)
    assert _broker_fits(highest) and not _broker_fits(highest + 1)
    assert "commit_age_max_ms" in line  # and why


def test_a_lease_range_follows_the_upload_timeout(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    lows = []
    for upload_timeout_ms in (1000, 30000):
        argv = ["--data-dir", str(tmp_path), "--upload-timeout-ms", str(upload_timeout_ms)]
        line = _refusal([*argv, "--txn-lease-ttl-ms", "10"], capsys)
        assert line.count("--txn-lease-ttl-ms") == 1, line
        lows.append(_allowed(line)[0])
        wal = WalConfig(upload_timeout_ms=upload_timeout_ms)
        BrokerConfig(wal=wal, txn_lease_ttl_ms=lows[-1])
        with pytest.raises(ValueError, match="must cover"):
            BrokerConfig(wal=wal, txn_lease_ttl_ms=lows[-1] - 1)
    assert lows[0] < lows[1]


def test_admitted_range_finds_both_ends_or_none() -> None:
    assert admitted_range(lambda v: 3 <= v <= 17, 10) == (3, 17)
    assert admitted_range(lambda v: v >= -5, 0) == (-5, None)
    assert admitted_range(lambda v: v <= 7, 7) == (None, 7)
    assert admitted_range(lambda v: True, 0) == (None, None)
    with pytest.raises(AssertionError):
        admitted_range(lambda v: v > 0, 0)  # the search starts from an admitted value


def test_the_blamed_value_is_the_one_the_others_leave_no_room_for() -> None:
    """Unit: `a` and `b` are each admitted with the other at its default, not together: the
    first is blamed, with the range that the other, as given, leaves it."""

    def build(values: dict[str, int]) -> int:
        if min(values.values()) < 0 or sum(values.values()) > 10:
            raise ValueError("a and b must be >= 0 and add up to at most 10")
        return sum(values.values())

    def settings(a: int, b: int) -> dict[str, Setting]:
        return {"a": Setting("--a", a, 1, 1), "b": Setting("--b", b, 1, 1)}

    assert build_checked(build, settings(4, 6)) == 10
    with pytest.raises(UsageError, match=r"^--a: 6 is outside the allowed range 0\.\.4 \(a and b"):
        build_checked(build, settings(6, 6))
    with pytest.raises(UsageError, match=r"^--b: -1 is outside the allowed range 0\.\.9 "):
        build_checked(build, settings(1, -1))
    # Neither leaves the other room, and each is refused on its own: the first is blamed.
    with pytest.raises(UsageError, match=r"^--a: 11 is outside the allowed range 0\.\.9 "):
        build_checked(build, settings(11, 11))


def test_parser_errors_are_one_line(capsys: pytest.CaptureFixture[str]) -> None:
    parser = _parser()
    with pytest.raises(SystemExit):
        parser.parse_args(["--racks", "x"])
    assert capsys.readouterr().err.splitlines() == [
        "python -m diskless.kafka_server: error: --racks: expected an integer (>= 1), got 'x'"
    ]
